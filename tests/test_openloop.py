"""Open-loop points against a real local stand-in server streaming on a known schedule."""
import numpy as np
import pytest

from helpers.serving.client import Workload
from helpers.serving.loadspec import SLO, ClosedLoop, LoadSpec, OpenLoop
from helpers.serving.openloop import run_spec
from helpers.serving.standin import StandIn

pytestmark = pytest.mark.integration


def test_open_loop_sends_its_rate_and_counts_goodput():
    with StandIn(ttft_s=0.02, interval_s=0.005) as srv:
        spec = LoadSpec(Workload(8, 6), OpenLoop(20.0, 1.0), num_requests=30, seed=1,
                        slo=SLO.parse("ttft:1000 tpot:500"), time_limit_s=30)
        row, results = run_spec(srv.url, "standin", spec)
    assert row["completed"] == 30 and row["mode"] == "open"
    assert len(row["schedule_s"]) == 30
    assert row["achieved_rate"] == pytest.approx(1 / ((row["schedule_s"][-1]) / 29), rel=0.10)
    assert not row["rate_short"]
    assert row["good_share"] == 1.0
    assert row["median_ttft_ms"] >= 20


def test_multi_token_chunks_detected_and_itl_per_token():
    with StandIn(ttft_s=0.01, interval_s=0.01, tokens_per_chunk=3) as srv:
        row, _ = run_spec(srv.url, "standin", LoadSpec(Workload(8, 9), ClosedLoop(1), num_requests=2))
    assert row["multi_token_chunk_requests"] == 2
    # chunks at least 30 ms apart (the stand-in sleeps its schedule; a gap can read shorter only where the chunk
    # before it was stamped late) carrying 3 tokens each: the per-token ITL is the per-chunk gap over 3
    assert row["median_itl_per_token_ms"] == pytest.approx(row["median_itl_ms"] / 3)
    assert row["median_itl_ms"] > 3 * 10 / 2       # a chunk's gap, not a token's: two of the four gaps would have
                                                   # to lose half their 30 ms to a late stamp before them to fail


def test_slo_missed_when_server_slows_past_its_knee():
    # TTFT 50 ms with up to 2 in flight, 1 s past them (the stand-in's step): past the knee every request misses
    # ttft:600 whatever the client adds, below it the client would have to add 550 ms to one to miss
    with StandIn(ttft_s=0.05, interval_s=0.01, knee=2, past_knee=20) as srv:
        slo = SLO.parse("ttft:600")
        low, _ = run_spec(srv.url, "standin", LoadSpec(Workload(8, 4), ClosedLoop(1), num_requests=3, slo=slo))
        high, _ = run_spec(srv.url, "standin", LoadSpec(Workload(8, 4), ClosedLoop(8), num_requests=8, slo=slo))
    assert low["good_share"] == 1.0
    assert high["good_share"] < 0.5


def test_rate_flagged_short_when_the_cap_holds_it_back():
    # one request at a time, each ~60 ms: the client cannot start 50 requests/s
    with StandIn(ttft_s=0.02, interval_s=0.01) as srv:
        spec = LoadSpec(Workload(8, 4), OpenLoop(50.0, max_concurrency=1), num_requests=10, seed=2)
        row, _ = run_spec(srv.url, "standin", spec)
    assert row["completed"] == 10
    assert row["achieved_rate"] < 0.5 * row["scheduled_rate"] and row["rate_short"]


def test_client_overhead_rows_are_the_excess_over_the_schedule():
    from helpers.serving.overhead import client_overhead

    rows = client_overhead((1, 2), tokens=8, ttft_s=0.02, interval_s=0.005, per_concurrency=2)
    assert [r["concurrency"] for r in rows] == [1, 2]
    for r in rows:
        assert r["scheduled_e2e_ms"] == pytest.approx(20 + 7 * 5)
        # the stand-in sleeps at least its schedule: the client can only measure more, never less
        assert r["median_e2e_ms"] >= r["scheduled_e2e_ms"] and r["median_ttft_ms"] >= 20
        assert r["overhead_per_token_ms"] == pytest.approx(r["overhead_per_request_ms"] / 8)


def test_rate_sweep_spans_one_at_a_time_to_max_throughput():
    from helpers.serving.openloop import rate_sweep

    with StandIn(ttft_s=0.01, interval_s=0.004) as srv:
        rows = rate_sweep(srv.url, "standin", Workload(8, 6), points=3, slo=SLO.parse("ttft:200"),
                          requests_per_point=8, max_concurrency_probe=8, time_limit_s=60)
    ends, opens = rows[:2], rows[2:]
    assert [r["sweep_role"] for r in ends] == ["one-at-a-time", "max-throughput"]
    assert ends[1]["request_throughput"] > ends[0]["request_throughput"]
    from helpers.serving.openloop import open_requests

    assert len(opens) == 3 and all(r["mode"] == "open" for r in opens)
    assert all(r["completed"] == r["num_requests"] == open_requests(r["request_rate"], 8) for r in opens), opens
    assert opens[0]["request_rate"] == pytest.approx(ends[0]["request_throughput"])
    assert opens[-1]["request_rate"] == pytest.approx(ends[1]["request_throughput"])
    assert all("good_share" in r and "achieved_rate" in r for r in opens)


def test_standin_takes_a_burst_of_connections_while_its_accept_thread_is_busy():
    """The rate-sweep test's failure in the full suite (max-throughput 7.4 requests/s against 24 one at a time):
    the stand-in listened with socketserver's backlog of 5, so a burst of 8 new connections while its accept
    thread waited for the GIL lost SYNs that Linux resends after 1 s. Here nothing accepts at all (the server is
    not started): every one of 32 connections must still complete its handshake at once."""
    import socket

    srv = StandIn()
    port = int(srv.url.rsplit(":", 1)[1])
    socks, connected = [], 0
    try:
        for _ in range(32):
            c = socket.socket()
            c.settimeout(0.2)
            socks.append(c)
            try:
                c.connect(("127.0.0.1", port))
                connected += 1
            except OSError:
                pass
    finally:
        for c in socks:
            c.close()
        srv.httpd.server_close()
    assert connected == 32


def test_rate_sweep_resumes_from_its_points_and_keeps_a_failed_point(tmp_path):
    from helpers.serving.openloop import rate_sweep

    f = tmp_path / "rate.jsonl"
    kw = dict(points=2, slo=SLO.parse("ttft:500"), requests_per_point=4, max_concurrency_probe=4, time_limit_s=30,
              points_file=f)
    with StandIn(ttft_s=0.01, interval_s=0.004) as srv:
        url = srv.url
        first = rate_sweep(url, "standin", Workload(8, 4), **kw)
    # two ends and up to two rates (one when a loaded machine put the probe below one-at-a-time: said on its row)
    assert len(f.read_text().splitlines()) == len(first) and 3 <= len(first) <= 4
    assert all(r.get("completed") == r.get("num_requests") for r in first)
    assert (len(first) == 3) == bool(first[1].get("probe_below_one_at_a_time"))
    # the server is gone: a rerun measures nothing (every point is in the file) and returns the same rows
    again = rate_sweep(url, "standin", Workload(8, 4), **kw)
    assert [r["key"] for r in again] == [r["key"] for r in first]
    assert [r["request_throughput"] for r in again] == pytest.approx([r["request_throughput"] for r in first])
    # a point not yet measured against the dead server ends as failed, and the rows before it stay
    more = rate_sweep(url, "standin", Workload(8, 4), **{**kw, "points": 3})
    new = [r for r in more if r["key"] not in {x["key"] for x in first}]
    assert new or first[1].get("probe_below_one_at_a_time")
    assert all(r.get("failed_point") or r.get("failed", 0) > 0 for r in new)
    assert len(f.read_text().splitlines()) == len(first) + len(new)


def test_an_open_loop_point_spans_at_least_its_minimum_seconds_of_arrivals():
    """A few requests at a high rate arrive as one burst; a point sends at least MIN_SPAN_S of arrivals."""
    from helpers.serving.openloop import MIN_SPAN_S, open_requests

    assert open_requests(0.5, 8) == 8                                 # 8 requests already span 14 s
    assert open_requests(17.6, 8) == int(np.ceil(17.6 * MIN_SPAN_S))  # not 8 requests in 0.4 s
    assert open_requests(17.6, 8) / 17.6 >= MIN_SPAN_S
