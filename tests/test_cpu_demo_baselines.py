"""The cpu-demo target's chapter 03 end to end: a real `transformers serve` swept over concurrency, then its
load study (rate sweep, goodput and capacity at the target's SLOs; tests/cpudemo.py runs the chapter)."""
import json

import pandas as pd
import pytest

from cpudemo import assert_ran, left_running, run_chapter

# The serving chapters start real servers: minutes on 2 cores, longer on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
STEM = "03_baselines_tuning"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    return run_chapter(tmp_path_factory, STEM)


def test_the_chapter_runs_live(demo_run):
    assert_ran(demo_run, STEM)


def test_baseline_sweep_completes_every_point(demo_run):
    _, _, run = demo_run
    s = pd.read_csv(run / "results" / STEM / "sweep.csv")
    assert len(s) > 0 and (s["failed"] == 0).all()
    assert (s["completed"] >= 5 * s["concurrency"]).all()
    assert (s["output_throughput"] > 0).all()


def test_the_load_study_shows_a_rate_sweep_goodput_and_capacity_each_with_its_points(demo_run):
    """Issue 38 on the CPU machine: the open-loop points were measured (each with its achieved rate and goodput
    at the target's SLOs), and both capacity searches ended with the points they rest on."""
    _, _, run = demo_run
    study = json.loads((run / "results" / STEM / "load_study.json").read_text())
    assert "failed" not in study and study["warmup"]["completed"] == study["warmup"]["requests"]
    opens = [r for r in study["rate_sweep"] if r["sweep_role"] == "open"]
    assert len(opens) >= 2 and all("skipped" not in r for r in opens), opens
    for r in opens:
        assert r["achieved_rate"] > 0 and 0 <= r["good_share"] <= 1 and "good_tokens_per_s" in r
        assert r["scheduled_rate"] == pytest.approx(r["request_rate"], rel=1e-6)   # the schedule sends its rate
    for which in ("capacity_concurrency", "capacity_rate"):
        cap = study[which]   # complete on a quiet machine (13 in flight at 6342cf9); a loaded one may stop it early
        assert cap["points"] and isinstance(cap["complete"], bool), (which, cap)
        assert all("good_share" in p and "passed" in p for p in cap["points"])
        # the capacity is the highest load that held below the first failure (NaN where none did), and the loads
        # that held above it are named: on a loaded machine the points need not be monotonic (under `make test`
        # the first rate failed once while three higher ones held)
        failed = cap["first_failed"]
        held = [p["load"] for p in cap["points"] if p["passed"]]
        below = [x for x in held if failed is None or x < failed]
        assert cap["capacity"] == max(below) if below else cap["capacity"] != cap["capacity"], (which, cap)
        assert cap["held_above_failure"] == sorted(x for x in held if failed is not None and x > failed), (which, cap)


def test_nothing_left_running_after_the_chapter(demo_run):
    assert left_running(demo_run[2]) == []
