import pandas as pd
import pytest

from helpers.core import results


def test_table_roundtrip_and_missing(tmp_path):
    df = pd.DataFrame({"size_bytes": [1, 2], "time_us": [3.0, 4.0]})
    results.save_table(tmp_path, "t", df)
    pd.testing.assert_frame_equal(results.load_table(tmp_path, "t"), df)
    assert not list(tmp_path.glob(".*tmp"))
    with pytest.raises(FileNotFoundError, match="run the chapter"):
        results.load_table(tmp_path, "nope")


def test_rows_survive_a_torn_last_line(tmp_path):
    path = tmp_path / "points.jsonl"
    results.append_row(path, {"c": 1})
    results.append_row(path, {"c": 2})
    with path.open("a") as f:
        f.write('{"c": 3')  # a crash in the middle of a write
    assert results.read_rows(path) == [{"c": 1}, {"c": 2}]
    assert results.read_rows(tmp_path / "absent.jsonl") == []


def test_json_roundtrip(tmp_path):
    results.save_json(tmp_path, "probe", {"a": [1, 2]})
    assert results.load_json(tmp_path, "probe") == {"a": [1, 2]}
