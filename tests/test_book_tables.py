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
    assert t.columns == ["time (ms)", "beta (GB/s)", "lat (us)", "size (KiB)"]


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


def test_missing_values_are_blank():
    df = pd.DataFrame({"x": [1.5, np.nan], "s": ["a", None],
                       "i": pd.array([1, pd.NA], dtype="Int64")})
    t = tables.table(df)
    assert t.rows[1] == ["", "", ""]
    for bad in ("nan", "NaN", "<NA>", "None", "&lt;NA&gt;"):
        assert bad not in t.html


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
    assert '<td class="nowrap">1x NVIDIA H200</td>' in t.html and f"<td>{'x' * 80}</td>" in t.html


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
