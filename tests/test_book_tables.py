"""helpers.core.tables: the one way the book shows a table to a reader."""
import numpy as np
import pandas as pd
import pytest

from helpers.core import tables


def test_a_range_index_is_dropped_and_a_meaningful_one_kept():
    df = pd.DataFrame({"a": [1, 2, 3]})
    assert tables.table(df).columns == ["a"]
    named = df.set_index(pd.Index(["x", "y", "z"], name="case"))
    t = tables.table(named)
    assert t.columns == ["case", "a"] and [r[0] for r in t.rows] == ["x", "y", "z"]
    for counters in (df.iloc[[2, 0, 1]], df.iloc[[0, 2]], df.set_index(pd.Index([5, 6, 7]))):
        assert tables.table(counters).columns == ["a"]  # sorted, filtered or offset row numbers
    assert tables.table(df.set_index(pd.Index([5, 6, 7], name="n"))).columns == ["n", "a"]
    assert tables.table(df, index=True).columns == ["", "a"]


def test_units_go_into_headers_from_the_argument_or_the_column_name():
    df = pd.DataFrame({"time": [1.0], "beta_GBps": [12.5], "lat_us": [3.0], "size (KiB)": [4]})
    t = tables.table(df, units={"time": "ms"})
    assert t.columns == ["time (ms)", "beta (GB/s)", "lat (µs)", "size (KiB)"]  # us is written µs


def test_byte_columns_are_written_with_binary_prefixes():
    t = tables.table(pd.DataFrame({"size_bytes": [4, 1536, 12288, 2**20, 3 * 2**30]}))
    assert t.columns == ["size"]
    assert [r[0] for r in t.rows] == ["4 B", "1.5 KiB", "12 KiB", "1 MiB", "3 GiB"]


def test_numbers_are_rounded_per_column():
    df = pd.DataFrame({"big": [1234.5678, 2345.1], "mid": [12.3456, 13.0], "small": [0.0123456, 0.02],
                       "n": [3, 4]})
    t = tables.table(df)
    assert t.rows[0] == ["1235", "12.3", "0.0123", "3"]
    t2 = tables.table(df, digits={"big": 1})
    assert t2.rows[0][0] == "1234.6"
    assert tables.table(df, digits=2).rows[0] == ["1234.57", "12.35", "0.01", "3"]
    assert tables.auto_digits([1.2345, 1.5]) == 2 and tables.auto_digits([np.nan, 0.0]) == 0


def test_missing_values_are_n_a_with_a_legend():
    df = pd.DataFrame({"x": [1.5, np.nan], "s": ["a", None],
                       "i": pd.array([1, pd.NA], dtype="Int64")})
    t = tables.table(df)
    assert t.rows[1] == ["n/a", "n/a", "n/a"]
    for bad in ("nan", "NaN", "<NA>", "None", "&lt;NA&gt;"):
        assert bad not in t.html
    assert tables.MISSING_LEGEND in t.html
    assert tables.MISSING_LEGEND not in tables.table(df.iloc[:1]).html      # no legend where nothing is missing


def test_long_tables_fold_behind_a_toggle_with_the_summary_visible():
    df = pd.DataFrame({"k": range(30)})
    t = tables.table(df, fold_after=8, summary="thirty rows")
    assert t.folded
    assert t.html.count("<details") == 1 and "<summary>thirty rows" in t.html
    assert t.html.count("<tr>") == 31  # all rows stay in the folded table
    short = tables.table(df.head(5), fold_after=8, summary="five rows")
    assert not short.folded and "<details" not in short.html and "five rows" in short.html
    assert not tables.table(df, fold_after=None).folded


def test_html_scrolls_escapes_and_right_aligns_numbers():
    t = tables.table(pd.DataFrame({"name": ["<b>"], "v": [1.0]}))
    assert 'class="book-table-scroll"' in t.html and "&lt;b&gt;" in t.html
    assert '<td class="num">1</td>' in t.html and '<td class="nowrap">&lt;b&gt;</td>' in t.html


def test_percent_units_and_booleans():
    t = tables.table(pd.DataFrame({"share_pct": [12.345], "ok": [True]}))
    assert t.columns == ["share", "ok"] and t.rows[0] == ["12.3 %", "yes"]


def test_a_name_the_table_lacks_is_refused():
    with pytest.raises(KeyError, match="nope"):
        tables.table(pd.DataFrame({"a": [1]}), units={"nope": "us"})


def test_text_form_and_series_and_multiindex_columns():
    df = pd.DataFrame([[1, 2]], columns=pd.MultiIndex.from_tuples([("t", "p50"), ("t", "p90")]))
    t = tables.table(df)
    assert t.columns == ["t p50", "t p90"]
    assert "t p50" in repr(t)
    assert tables.table(pd.Series([1, 2], name="x")).columns == ["x"]


def test_show_displays_once_and_returns_nothing(capsys):
    assert tables.show(pd.DataFrame({"a": [1]})) is None


def test_short_text_columns_do_not_wrap_long_ones_do():
    t = tables.table(pd.DataFrame({"setup": ["1x NVIDIA H200"], "note": ["x" * 80]}))
    assert '<td class="nowrap">1x NVIDIA H200</td>' in t.html and f'<td class="long">{"x" * 80}</td>' in t.html
    mid = tables.table(pd.DataFrame({"note": ["y" * 40]}))
    assert f"<td>{'y' * 40}</td>" in mid.html  # wraps, no reserved width


def test_a_column_with_no_value_is_left_out():
    df = pd.DataFrame({"path": ["peer"], "size_bytes": [np.nan], "reason": ["no GPU"]})
    assert tables.table(df).columns == ["path", "reason"]
    assert tables.table(df, drop_empty=False).columns == ["path", "size (bytes)", "reason"]


def test_tiny_values_are_not_rounded_to_zero():
    t = tables.table(pd.DataFrame({"err": [3.14e-9, 0.0, 0.5, 0.25]}))
    assert [r[0] for r in t.rows] == ["3.1e-09", "0.000", "0.500", "0.250"]


def test_show_passes_anything_else_through(capsys):
    tables.show({"not": "a table"})
    assert "not" in capsys.readouterr().out


def test_headers_are_words_with_the_books_units():
    df = pd.DataFrame({"tok_s_per_stream": [12.3], "ceiling_tok_s": [1.5], "memory_total_bytes": [150754820096],
                       "time_us_p10": [7.137975], "n_gpus": [8], "unit": ["us"], "rate": ["38 tok/s"],
                       "observed_tok_s": [3.0]})
    t = tables.table(df, max_columns=10)
    assert t.columns == ["tokens/s per stream", "ceiling (tokens/s)", "memory total", "time p10 (µs)",
                         "number of GPUs", "unit", "rate", "observed (tokens/s)"]
    assert t.rows[0][2:7] == ["140 GiB", "7.14", "8", "µs", "38 tokens/s"]
    assert "tok (s)" not in t.text and "(us)" not in t.text
    assert tables.table(df, rename={"n_gpus": "GPUs"}, max_columns=10).columns[4] == "GPUs"


def test_shares_are_percentages_only_where_the_name_says_so():
    df = pd.DataFrame({"share_of_peak": [9.2e-05, 0.5], "fraction_of_ceiling": [0.25, 1.2],
                       "mem_fraction_static": [0.85, 0.9], "shared_experts": [0.5, 0.25], "ratio": [0.5, 0.1]})
    t = tables.table(df)
    assert t.rows[0] == ["0.0092 %", "25 %", "0.850", "0.500", "0.500"]
    assert t.rows[1][:2] == ["50.0 %", "120 %"]
    assert tables.table(pd.DataFrame({"share": [45.0, 60.0]})).rows[0] == ["45"]  # already percent: left alone


def test_a_recorded_nan_is_NaN_booleans_are_words_and_text_is_never_cut():
    reason = "the server never became healthy within 900 s because " + "x" * 300
    df = pd.DataFrame({"outcome": ["nan", "NaN", None, "ok"], "ok": np.array([True, False, True, False]),
                       "mixed": [2.302439, "x", 150754820096.0, None], "reason": [reason, "", "", ""]})
    t = tables.table(df)
    assert [r[0] for r in t.rows] == ["NaN", "NaN", "n/a", "ok"]
    assert [r[1] for r in t.rows] == ["yes", "no", "yes", "no"]
    assert [r[2] for r in t.rows] == ["2.3", "x", "150754820096", "n/a"]
    assert t.rows[0][3] == reason and "…" not in t.html and reason in t.html


def test_a_wide_table_is_stacked_repeating_its_key_column():
    df = pd.DataFrame({"case": ["a", "b"], **{f"c{i}": [i, i + 1] for i in range(10)}})
    t = tables.table(df)
    assert t.parts == [[0, 1, 2, 3, 4, 5], [0, 6, 7, 8, 9, 10]]  # ten others: two balanced groups of five
    assert t.html.count("<table") == 2 and t.html.count("</th>") == 12 and "(2 of 2)" in t.html
    assert t.text.count("case") == 2
    narrow = tables.table(df.iloc[:, :7])
    assert narrow.parts == [list(range(7))] and narrow.html.count("<table") == 1
    idx = df.set_index(["case", "c0"])
    assert all(p[:2] == [0, 1] for p in tables.table(idx).parts)  # a meaningful index is the key
    keyed = tables.table(df, keys=["c9"])
    assert keyed.columns[0] == "c9" and all(p[0] == 0 for p in keyed.parts)
    folded = tables.table(pd.concat([df] * 10), fold_after=5)
    assert folded.html.count("<details") == 1 and folded.html.count("<table") == 2


def test_a_unit_given_for_a_column_named_with_it_is_written_once():
    df = pd.DataFrame({"bf16_MiB": [1.5], "unfused_ms": [2.25], "time": [3.0]})
    t = tables.table(df, units={"bf16_MiB": "MiB", "unfused_ms": "ms", "time": "us"})
    assert t.columns == ["BF16 (MiB)", "unfused (ms)", "time (µs)"]


def test_a_name_that_is_only_a_unit_is_its_unit():
    assert tables.table(pd.DataFrame({"tok_s": [2.5], "us": [3.5]})).columns == ["tokens/s", "µs"]


def test_a_unit_before_a_number_or_qualifier_moves_to_the_end():
    df = pd.DataFrame({"measured_kernels_ms_1": [1.5], "time_us_p90": [2.5], "rel_err": [0.1]})
    assert tables.table(df).columns == ["measured kernels 1 (ms)", "time p90 (µs)", "relative error"]


def test_the_leading_text_columns_are_the_keys_of_a_stacked_table():
    df = pd.DataFrame({"op": ["all_reduce"], "backend": ["gloo"], "world_size": [2], "method": ["eager"],
                       **{f"v{i}": [float(i)] for i in range(6)}})
    t = tables.table(df)
    assert all(p[:2] == [0, 1] for p in t.parts) and len(t.parts) == 2 and max(map(len, t.parts)) <= 7


def test_a_renamed_header_is_written_with_the_books_units_too():
    t = tables.table(pd.DataFrame({"a": [1.5], "b": [2.5]}), rename={"a": "time (us)", "b": "rate in tok/s"})
    assert t.columns == ["time (µs)", "rate in tokens/s"]


def test_an_upper_case_B_suffix_is_billions_not_bytes():
    t = tables.table(pd.DataFrame({"params_B": [744.0, 12.3], "size_b": [2048, 4]}))
    assert t.columns == ["params (billions)", "size"] and t.rows[0] == ["744", "2 KiB"] and t.rows[1][0] == "12"


def test_several_tables_fold_behind_one_toggle_each_under_its_title(monkeypatch):
    """show_folded: one toggle whose visible line is the group's summary, each table whole under its own summary;
    a None table is left out, and a group of one keeps a fold of its own."""
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    a = pd.DataFrame({"x": [1, 2]})
    b = pd.DataFrame({"y_us": [3.0]})
    tables.show_folded("both tables", [(a, dict(summary="the first")), (None, dict(summary="absent")),
                                       (b, dict(summary="the second", fold_after=0))])
    assert len(shown) == 1 and isinstance(shown[0], tables.Folded)
    html = shown[0]._repr_html_()
    assert html.count("<details") == 1 and "both tables" in html and "(show 2 tables)" in html
    assert "the first" in html and "the second" in html and "absent" not in html and "y (µs)" in html
    tables.show_folded("one table", [(a, dict(summary="alone"))])
    assert isinstance(shown[1], tables.Table) and shown[1].folded and "alone" in shown[1].html
    with pytest.raises(ValueError, match="needs a `summary`"):
        tables.show_folded("untitled", [(a, {})])
