"""The cpu-demo target's chapter 02 end to end: real `transformers serve` processes, one per configuration,
each attempt classified from what the server did (tests/cpudemo.py runs the chapter)."""
import pandas as pd
import pytest

from cpudemo import assert_ran, left_running, run_chapter
from helpers.core import results
from helpers.serving import demo

# The serving chapters start real servers: minutes on 2 cores, longer on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
STEM = "02_nan_crash"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    return run_chapter(tmp_path_factory, STEM)


def test_the_chapter_runs_live(demo_run):
    assert_ran(demo_run, STEM)


def test_backend_matrix_detects_each_outcome(demo_run):
    _, _, run = demo_run
    m = pd.read_csv(run / "results" / STEM / "live_matrix.csv", keep_default_na=False)
    assert {"ok", "nan", "crash", "startup-timeout", "unsupported", "wrong-answer"} <= set(m["outcome"])
    assert m.set_index("name").loc["nan-weights", "outcome"] == "nan"


def _attempts(run):
    return {r["name"]: r for r in results.read_rows(run / "results" / STEM / "attempts.jsonl")}


@pytest.mark.parametrize("name,expected", [(n, c.expected) for n, c in demo.DEMO_CONFIGS.items()])
def test_each_demo_outcome_is_detected(demo_run, name, expected):
    a = _attempts(demo_run[2])[name]
    assert a["outcome"] == expected, (a["detail"], a["log_excerpt"])


def test_attempt_details_keep_their_evidence(demo_run):
    att = _attempts(demo_run[2])
    ok = att["healthy"]
    assert ok["decode_completed"] > 0 and ok["decode_failed"] == 0 and ok["startup_s"] > 0
    assert "probability tensor" in open(att["nan-weights"]["log_path"]).read()
    crash = att["corrupt-weights"]
    assert crash["log_excerpt"] and "exited with code" in crash["detail"]   # the log excerpt is kept
    assert att["never-healthy"]["wall_s"] < 60


def test_nothing_left_running_after_the_chapter(demo_run):
    assert left_running(demo_run[2]) == []
