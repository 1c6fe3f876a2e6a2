"""The cpu-demo target's chapter 04 end to end: a real `transformers serve` per experts implementation, each
swept with repeats (tests/cpudemo.py runs the chapter)."""
import pandas as pd
import pytest

from cpudemo import assert_ran, left_running, run_chapter

# The serving chapters start real servers: minutes on 2 cores, longer on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
STEM = "04_moe_runners"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    return run_chapter(tmp_path_factory, STEM)


def test_the_chapter_runs_live(demo_run):
    assert_ran(demo_run, STEM)


def test_moe_runner_sweeps_have_repeats(demo_run):
    _, _, run = demo_run
    sweep = pd.read_csv(run / "results" / STEM / "sweep.csv")
    ok = sweep.groupby("runner")["repeat"].nunique() if "repeat" in sweep else None
    assert ok is not None and (ok >= 2).all(), "each runner needs repeats to show its spread"


def test_nothing_left_running_after_the_chapter(demo_run):
    assert left_running(demo_run[2]) == []
