"""The load study's pieces without a server (issue 46): the requests-per-point rule, the bootstrap interval on
capacity, the drift rule, the committed synthetic trace and its reader, the ramp's schedule, the AIPerf export."""
import math

import pytest

from helpers import repo_root
from helpers.serving import trace
from helpers.serving.client import Workload
from helpers.serving.confidence import capacity_interval, capacity_of, drift
from helpers.serving.formats import aiperf_record, aiperf_summary
from helpers.serving.loadspec import SLO, LoadSpecError
from helpers.serving.points import Load, LoadPlan, open_schedule, ramp_offsets, rule_requests


def test_the_rule_allows_one_request_outside_the_share():
    assert rule_requests(0.9) == 10 and rule_requests(0.95) == 20 and rule_requests(0.5) == 2
    assert rule_requests(1.0) == 10


def test_capacity_is_the_highest_pass_below_the_first_failure():
    assert capacity_of([1, 2, 4, 8], [1.0, 1.0, 0.5, 1.0], 0.9) == 2
    assert math.isnan(capacity_of([1, 2], [0.5, 1.0], 0.9))
    assert capacity_of([4, 1, 2], [0.0, 1.0, 1.0], 0.9) == 2      # sorted by load first


def test_the_bootstrap_interval_is_tight_for_clear_points_and_wide_for_a_point_on_the_edge():
    clear = [(1, [True] * 10), (2, [True] * 10), (4, [False] * 10)]
    assert capacity_interval(clear, 0.9) == (2.0, 2.0)
    edge = [(1, [True] * 10), (2, [True] * 9 + [False]), (4, [False] * 10)]   # 2 holds by one request
    lo, hi = capacity_interval(edge, 0.9)
    assert lo == 1.0 and hi == 2.0
    none = [(1, [False] * 10)]
    assert all(math.isnan(x) for x in capacity_interval(none, 0.9))


def _recs(ttft_ms):
    return [{"ok": True, "ramp": False, "ttft_s": t / 1e3, "tpot_s": 0.01} for t in ttft_ms]


def test_drift_is_flagged_only_beyond_ten_percent_and_outside_the_first_interval():
    first = _recs([50, 51, 49, 50, 52, 48, 50, 51, 49, 50])
    same = drift("c=1", first, _recs([51, 50, 52, 49, 50, 51, 50, 49, 50, 51]))
    assert not same.flagged and same.key == "c=1"
    slow = drift("c=1", first, _recs([80, 82, 79, 81, 80, 83, 78, 80, 81, 80]))
    assert slow.flagged and slow.metric == "ttft" and slow.change_pct == pytest.approx(60, abs=2)
    assert drift("c=1", first, []) is None


def test_the_committed_synthetic_trace_is_what_its_generator_writes_and_reads_back():
    path = repo_root() / "data" / "traces" / "synthetic.jsonl"
    assert path.read_text() == trace.dumps(trace.synthetic())
    entries = trace.read(path)
    assert len(entries) == 40 and entries[0].t_s == 0 and all(a.t_s <= b.t_s for a, b in zip(entries, entries[1:]))
    assert 6 < entries[-1].t_s < 16          # 39 gaps at 4/s: about 10 s


def test_a_bad_trace_line_is_refused_naming_the_line(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 3}\n{"timestamp": 10, "input_length": 0}\n')
    with pytest.raises(LoadSpecError, match="t.jsonl, line 2"):
        trace.read(p)
    p.write_text('{"timestamp": 5, "input_length": 5, "output_length": 3, "hash_ids": [1, 2]}\n')
    assert trace.read(p)[0] == trace.TraceEntry(0.0, 5, 3)       # Mooncake's hash_ids read past, start at 0


def test_an_open_point_ramps_its_rate_up_then_sends_its_own_arrivals():
    r = ramp_offsets(10.0, 1.0)
    assert len(r) == 5 and r[-1] <= 1.0 and all(b - a < a2 - a1 for a1, a2, a, b in
                                                 zip(r, r[1:], r[1:], r[2:]))   # gaps shrink: the rate grows
    plan = LoadPlan(Workload(8, 4), SLO.parse("ttft:100"), 10, ramp_s=1.0, min_span_s=2.0)
    sched, n_ramp = open_schedule(10.0, plan)
    assert n_ramp == 5 and len(sched) == 5 + 20 and sched[n_ramp] == 1.0
    assert Load.open(2.5).key == "r=2.5" and Load.closed(4).key == "c=4"


def test_the_aiperf_export_keeps_the_ramp_as_its_warm_up_and_summarises_the_rest():
    rec = {"start_s": 0.5, "ok": True, "ramp": False, "ttft_s": 0.05, "e2e_s": 0.2, "tpot_s": 0.01, "input_tokens": 8,
           "output_tokens": 16, "connected_s": 0.001, "written_s": 0.0012, "first_byte_s": 0.01, "itl_s": [0.01] * 15,
           "error_kind": "", "error": ""}
    line = aiperf_record(3, rec, 10**9)
    assert line["metadata"]["benchmark_phase"] == "profiling" and line["metadata"]["request_start_ns"] == 1_500_000_000
    assert line["metrics"]["time_to_first_token"] == {"value": 50.0, "unit": "ms"}
    assert line["metrics"]["http_req_sending"]["value"] == pytest.approx(0.2)
    assert aiperf_record(0, {**rec, "ramp": True}, 0)["metadata"]["benchmark_phase"] == "warmup"
    s = aiperf_summary({"records": [rec, {**rec, "ttft_s": 0.07}, {**rec, "ramp": True, "ttft_s": 9.0}]})
    assert s["time_to_first_token"]["count"] == 2 and s["time_to_first_token"]["p50"] == pytest.approx(60.0)
