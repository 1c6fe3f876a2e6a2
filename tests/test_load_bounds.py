"""Every load-study path stops at its own limit, within one request's time limit, and the study within
`load_time_s` (issue 47, item 2); what did not run is recorded as not run. Against the stand-in server (a real
local HTTP server) slower than the limits: on 1beba90 run_open slept to every scheduled start whatever the point's
time limit (a point given 5 s took 60 s), and the sweep and the searches checked the time only between points (a
10-s study against a server taking 3 s a request took 53 s).

The bounds are asserted from the client's own record (each request's start, each point's duration) against the
stated overshoot: a limit plus one request time limit, which the stand-in's requests (well under it) leave wide."""
import json
import math

import pytest

from helpers.serving import client as cl
from helpers.serving.capacity import search
from helpers.serving.loadspec import SLO, ClosedLoop, LoadSpec, OpenLoop, arrival_schedule
from helpers.serving.loadstudy import load_study
from helpers.serving.openloop import rate_sweep, run_open, run_spec
from helpers.serving.standin import StandIn

W = cl.Workload(8, 4)


def ran(results):
    return [r for r in results if r.error_kind != "not-run"]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_an_open_loop_point_starts_nothing_past_its_limit():
    load = OpenLoop(2.0)
    sched = arrival_schedule(load, 40, seed=1)            # 40 arrivals over 19.5 s
    limit, timeout = 2.0, 10.0
    with StandIn(ttft_s=0.3, interval_s=0.01) as srv:
        results, dur = cl.run_sync(run_open(srv.url, "standin", ["p"] * 40, 4, load, sched, timeout, limit_s=limit))
    went = ran(results)
    assert went and all(r.start_s <= limit for r in went)
    assert len(results) - len(went) >= sum(t >= limit for t in sched) > 30        # the rest: not run, not waited for
    assert all(r.error_kind == "not-run" and "time limit" in r.error for r in results if r not in went)
    assert dur <= limit + timeout, dur                   # the stated overshoot: one request time limit at most


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_point_keeps_its_time_limit_and_counts_what_did_not_run():
    """LoadSpec.time_limit_s is the point's limit (1beba90 took it as the request timeout only)."""
    spec = LoadSpec(W, OpenLoop(1.0), num_requests=30, slo=SLO.parse("ttft:2000"), time_limit_s=3.0)
    late = sum(t >= spec.time_limit_s for t in spec.schedule())          # 30 arrivals over 29 s: most come late
    with StandIn(ttft_s=0.2, interval_s=0.01) as srv:
        row, results = run_spec(srv.url, "standin", spec)
    assert row["cut_short"] and row["not_run"] == len(results) - len(ran(results)) >= late > 20, (row["not_run"], late)
    assert row["failed"] == 0 and row["completed"] == len(ran(results))
    assert row["requests"] == len(ran(results)) and row["good_share"] == 1.0   # goodput over what ran
    assert row["duration_s"] <= spec.time_limit_s + spec.request_limit_s


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_closed_loop_point_starts_nothing_past_its_limit():
    limit = 1.5
    with StandIn(ttft_s=0.3, interval_s=0.01) as srv:
        results, dur = cl.run_sync(cl.run_requests(srv.url, "standin", ["p"] * 30, 4, 2, timeout_s=10, limit_s=limit))
    went = ran(results)
    assert went and all(r.start_s <= limit for r in went) and len(went) < 30
    row = cl.summarize(results, dur)
    assert row["not_run"] == 30 - len(went) and row["failed"] == 0
    assert dur <= limit + 10


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_the_rate_sweep_stops_inside_a_point_not_after_it(tmp_path):
    """A stand-in taking 2 s a request and a sweep of 3 s: its first probe (4 requests one at a time) is cut at the
    limit and the rest is recorded as skipped; nothing cut short goes to the points file (a rerun measures it)."""
    with StandIn(ttft_s=2.0, interval_s=0.01) as srv:
        rows = rate_sweep(srv.url, "standin", W, points=2, slo=SLO.parse("ttft:5000"), requests_per_point=4,
                          max_concurrency_probe=4, time_limit_s=3.0, points_file=tmp_path / "p.jsonl")
    first = rows[0]
    assert first["sweep_role"] == "one-at-a-time" and first["cut_short"] and first["not_run"] >= 2, first
    assert first["duration_s"] <= 3.0 + 3.0                    # its limit plus one request time limit
    assert rows[1]["skipped"] == "time limit" and len(rows) == 2
    assert not (tmp_path / "p.jsonl").exists()


def test_a_search_point_cut_short_is_not_evidence(tmp_path):
    """A capacity point whose time ran out inside it (cut_short) passes nor fails: it is listed as not run, not
    written to the points file, and the search ends incomplete."""
    calls = []

    def measure(c):
        calls.append(c)
        return {"good_share": 1.0} if c < 4 else {"good_share": 0.2, "cut_short": True, "not_run": 5}
    out = search(measure, 1, 0.9, limit=16, points_file=tmp_path / "c.jsonl", time_limit_s=60)
    assert calls == [1, 2, 4] and out["not_run"] == [4] and not out["complete"] and out["capacity"] == 2
    assert [json.loads(x)["load"] for x in (tmp_path / "c.jsonl").read_text().splitlines()] == [1, 2]


# the load study's own bound (a 20-s study against a server taking 3 s a request) is held by
# tests/test_loadstudy.py::test_the_load_study_keeps_load_time_s_and_marks_what_its_end_cut, on the study's typed API


def test_the_load_api_refuses_values_no_run_can_use():
    """Issue 47, item 7: rate 1e-300, 10^9 requests and burstiness 5e-324 (NaN arrival times) were accepted."""
    from helpers.serving.loadspec import LoadSpecError

    for bad, said in ((lambda: OpenLoop(1e-300), "OpenLoop.rate"), (lambda: OpenLoop(1e9), "OpenLoop.rate"),
                      (lambda: OpenLoop(1.0, 5e-324), "OpenLoop.burstiness"),
                      (lambda: LoadSpec(W, ClosedLoop(1), num_requests=10 ** 9), "LoadSpec.num_requests"),
                      (lambda: arrival_schedule(OpenLoop(1.0), 10 ** 9, 0), "number of requests"),
                      (lambda: LoadSpec(W, ClosedLoop(1), 4, request_timeout_s=0), "request_timeout_s")):
        with pytest.raises(LoadSpecError, match=said):
            bad()
    t = arrival_schedule(OpenLoop(1e-3, 0.01), 100, 0)
    assert all(math.isfinite(x) for x in t) and t[-1] == pytest.approx(99 / 1e-3)
