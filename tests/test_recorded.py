import pandas as pd
import pytest

from helpers.core import recorded


@pytest.mark.parametrize("name", recorded.tables())
def test_every_table_loads_and_cites_a_known_source(name):
    df = recorded.load(name)
    assert len(df) > 0
    assert df["source"].isin(list(recorded.sources())).all()


def _raw(name):
    return pd.read_csv(recorded.data_dir() / name, dtype=str, keep_default_na=False)


def _refused(name, row, column, value, match):
    """Set one cell of a committed table to `value` and check that validation refuses it with `match`."""
    df = _raw(name)
    df.loc[row, column] = value
    with pytest.raises(recorded.DataError, match=match):
        recorded.validate(name, df)
    return df


def test_bad_number_names_file_row_and_column():
    _refused("recorded/copy_sweep.csv", 1, "latency_us", "fast", r"copy_sweep.csv, row 3, column 'latency_us'")


def test_unknown_source_is_refused():
    _refused("recorded/hardware.csv", 0, "source", "blog-post", "source 'blog-post' is not an id")


def test_missing_required_value_and_bad_choice():
    _refused("recorded/backend_matrix.csv", 0, "outcome", "maybe", "'maybe' is not one of")
    _refused("recorded/backend_matrix.csv", 2, "backend", "", "required column 'backend' is empty")


def test_value_or_range_required():
    _refused("recorded/serving.csv", 0, "value", "", "needs one of")


def test_unknown_phase_and_columns():
    df = _refused("recorded/timeline.csv", 0, "phase", "lunch", "phase 'lunch'")
    with pytest.raises(recorded.DataError, match="unexpected"):
        recorded.validate("recorded/timeline.csv", df.assign(extra="x"))


def test_unknown_table_and_model_are_named():
    with pytest.raises(recorded.DataError, match="known tables"):
        recorded.load("recorded/nothing.csv")
    with pytest.raises(recorded.DataError, match="known: .*glm5"):
        recorded.model_config("gpt-9")


def test_recorded_copy_sweep_is_self_consistent_with_hidden_size():
    """The seed's bandwidths equal tokens x hidden x 2 bytes / latency: the sizes are derived, not typed."""
    cfg = recorded.model_config("glm5")
    df = recorded.load("recorded/copy_sweep.csv").dropna(subset=["tokens"])
    size = df["tokens"].astype(float) * cfg["architecture"]["hidden_size"] * 2
    derived_bw = size / (df["latency_us"].astype(float) * 1e3)
    assert ((derived_bw - df["bandwidth_GBps"].astype(float)).abs() / df["bandwidth_GBps"].astype(float) < 0.02).all()


def test_hardware_items_are_cited():
    hw = recorded.hardware()
    assert hw["gpu_count"].value == "8"
    assert hw["p2p_read_all_pairs"].seed_file.endswith(".txt")


def test_every_measured_study_is_registered_with_its_provenance():
    """Every folder under data/measured/ has a sources.yaml entry (machine, date, commit, command, role) and
    a README, and every measured entry has its folder."""
    found = recorded.measured_studies()
    folders = {p.name for p in (recorded.data_dir() / "measured").iterdir() if p.is_dir()}
    assert {s.id for s in found} == folders and folders
    for s in found:
        assert all(s.entry.get(k) for k in recorded.schema()["_measured"]["keys"]), s.id
        assert (s.path / "README.md").exists(), s.id
    assert recorded.study("allreduce-gap-idle").id == "allreduce-gap-h200x2-20261129c"


def test_an_unregistered_study_or_an_incomplete_entry_is_refused(tmp_path, monkeypatch):
    real = recorded.schema()
    monkeypatch.setattr(recorded, "schema", lambda: real)
    monkeypatch.setattr(recorded, "data_dir", lambda: tmp_path)
    (tmp_path / "measured" / "study-x").mkdir(parents=True)
    monkeypatch.setattr(recorded, "sources", lambda: {})
    with pytest.raises(recorded.DataError, match="data/measured/study-x/ has no entry in data/sources.yaml"):
        recorded.measured_studies()
    entry = {"kind": "measured", "file": "data/measured/study-x/", "title": "t", "machine": "m", "date": "d",
             "commit": "c", "command": "python3 x.py", "role": "fidelity"}
    monkeypatch.setattr(recorded, "sources", lambda: {"study-x": {**entry, "commit": ""}})
    with pytest.raises(recorded.DataError, match="'study-x' lacks \\['commit'\\]"):
        recorded.measured_studies()
    monkeypatch.setattr(recorded, "sources", lambda: {"study-x": {**entry, "role": "decoration"}})
    with pytest.raises(recorded.DataError, match="role 'decoration'"):
        recorded.measured_studies()
    monkeypatch.setattr(recorded, "sources", lambda: {"study-x": entry, "study-y": {**entry, "file": "data/measured/study-y/"}})
    with pytest.raises(recorded.DataError, match="'study-y' names file"):
        recorded.measured_studies()
    monkeypatch.setattr(recorded, "sources", lambda: {"study-x": entry})
    assert [s.id for s in recorded.measured_studies("fidelity")] == ["study-x"]
    with pytest.raises(recorded.DataError, match="exactly one measured study of role 'allreduce-gap-idle'"):
        recorded.study("allreduce-gap-idle")


def test_a_recorded_nan_outcome_stays_the_word_nan():
    """backend_matrix.csv records two backends whose outcome is "nan" (the NaN crash): a text column keeps
    it as text, never a missing value, so tables.show writes NaN and the counts see it."""
    assert recorded.schema()["recorded/backend_matrix.csv"]["columns"]["outcome"] == "str"
    m = recorded.load("recorded/backend_matrix.csv")
    nan = m[m["outcome"] == "nan"]
    assert len(nan) == 2 and m["outcome"].notna().all()
    from helpers.core import tables
    t = tables.table(m[["backend", "outcome"]])
    assert [r[1] for r in t.rows if r[0].startswith("flashmla")] == ["NaN", "NaN"]


def test_source_url_reads_the_url_field_of_a_temporary_sources_file(tmp_path, monkeypatch):
    (tmp_path / "sources.yaml").write_text(
        "seed-000: {kind: seed, file: a.txt, title: t}\n"
        "ref-a: {kind: reference, file: x, title: t, url: 'https://example.org/a', date: 2026-01-01}\n"
        "ref-b: {kind: reference, file: y, title: t, url: 'file:///etc/passwd'}\n")
    monkeypatch.setattr(recorded, "data_dir", lambda: tmp_path)
    recorded.sources.cache_clear()
    try:
        assert recorded.source_url("ref-a") == "https://example.org/a"
        assert recorded.source_url("seed-000") is None  # an entry without a url (yet)
        assert recorded.source_url("ref-b") is None  # not a web address
        assert recorded.source_url("nope") is None
        from helpers.core import tables
        t = tables.table(pd.DataFrame({"figure": [1.5, 2.0], "source": ["ref-a", "seed-000, ref-a"]}))
        assert t.rows[1][1] == "seed-000, ref-a"  # the text form keeps the ids
        assert t.html.count('<a href="https://example.org/a">ref-a</a>') == 2 and "seed-000" in t.html
        assert "<a" not in tables.table(pd.DataFrame({"note": ["ref-a"]})).html  # only a source column links
    finally:
        recorded.sources.cache_clear()
    assert recorded.source_url("ref-a", {"ref-a": {"url": " https://x.org "}}) == "https://x.org"


def test_a_table_loaded_again_is_a_fresh_copy_and_a_rewritten_file_is_read_again(tmp_path, monkeypatch):
    """load() validates a file's bytes once a process (the unit tier loads the same tables hundreds of times):
    what it hands out is a copy, and a file rewritten with other bytes of the same size, at once (within the
    clock's tick, where a modification time would not change), is read and validated again."""
    name = "recorded/hardware.csv"
    (tmp_path / "recorded").mkdir()
    text = (recorded.data_dir() / name).read_text()
    recorded.schema(), recorded.sources()                     # the committed ones, read before the move
    monkeypatch.setattr(recorded, "data_dir", lambda: tmp_path)
    (tmp_path / name).write_text(text)
    first = recorded.load(name)
    first.loc[0, "source"] = "changed by the caller"
    again = recorded.load(name)
    assert again.loc[0, "source"] != "changed by the caller"
    assert again.equals(recorded.validate(name, _raw_from(tmp_path / name)))
    source = again.loc[0, "source"]
    bad = text.replace(source, "x" * len(source), 1)          # same size, an unknown source
    (tmp_path / name).write_text(bad)
    with pytest.raises(recorded.DataError, match="is not an id in data/sources.yaml"):
        recorded.load(name)


def _raw_from(path):
    return pd.read_csv(path, dtype=str, keep_default_na=False)
