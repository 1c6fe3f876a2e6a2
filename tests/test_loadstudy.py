"""Chapter 03's load study end to end against the stand-in server (a real local HTTP server) whose latency
rises past a known concurrency: the capacity it reports, its points, the saved result, and a resume that
measures nothing again."""
import json

import pytest

from helpers.core import layout
from helpers.serving.loadstudy import load_study
from helpers.serving.standin import StandIn

pytestmark = pytest.mark.integration


def test_load_study_finds_the_stand_ins_knee_and_resumes(tmp_path):
    P = dict(served_model="standin", load_modes="on", slo="ttft:600", slo_share=0.9, burstiness=1.0, rate_points=2,
             load_requests=4, load_time_s=90, workloads=["8/4"], concurrencies=[1, 8], request_timeout_s=30)
    run = layout.Run(str(tmp_path), "03_baselines_tuning")
    # TTFT 50 ms up to 3 in flight, 1 s past them (the stand-in's step): 4 fails ttft:600 whatever the client adds
    # (overhead only adds), and 3 holds it unless the client adds 550 ms to a request (tests/test_capacity.py)
    with StandIn(ttft_s=0.05, interval_s=0.005, knee=3, past_knee=20) as srv:
        study = load_study({**P, "server_url": srv.url}, run)
    assert "failed" not in study
    cap = study["capacity_concurrency"]
    assert cap["capacity"] == 3 and cap["first_failed"] == 4 and cap["complete"]
    assert [p["load"] for p in cap["points"]] == [1, 2, 3, 4]     # ramp 1, 2, 4 (fails), bisect: 3
    roles = [r["sweep_role"] for r in study["rate_sweep"]]
    assert roles[:2] == ["one-at-a-time", "max-throughput"] and roles[2:] in (["open"], ["open", "open"])
    assert len(study["client_overhead"]) == 3
    assert study["warmup"]["concurrency"] == 4 and study["warmup"]["completed"] == 4   # one wave, not in any point
    # every rate-sweep point also saved as `vllm bench serve --save-result` JSON, its figures the row's
    saved_vllm = {f.stem: json.loads(f.read_text()) for f in run.path("vllm_results").glob("*.json")}
    assert len(saved_vllm) == len(study["rate_sweep"])
    one = saved_vllm["one-at-a-time"]
    assert one["completed"] == study["rate_sweep"][0]["completed"] and len(one["ttfts"]) == one["num_prompts"]
    assert one["median_ttft_ms"] == study["rate_sweep"][0]["median_ttft_ms"]
    # the rate search starts from the sweep's open points (same SLO, requests and arrivals) instead of measuring them
    seeded = [p["load"] for p in study["capacity_rate"]["points"] if p.get("from_known")]
    assert seeded == sorted(r["request_rate"] for r in study["rate_sweep"] if r["sweep_role"] == "open")
    saved = json.loads(run.path("load_study").read_text())
    assert saved["capacity_concurrency"]["capacity"] == 3
    n_points = len(run.path("capacity_concurrency").read_text().splitlines())
    # the server is gone: a resume finds every point in its files and measures none of them again
    again = load_study({**P, "server_url": srv.url}, run)
    assert again["capacity_concurrency"]["capacity"] == 3
    assert len(run.path("capacity_concurrency").read_text().splitlines()) == n_points
