"""The load generator and its metrics: definitions as sglang bench_serving, token counts from usage,
resumable sweeps against a real `transformers serve` process, and clear errors for bad input."""
import json

import numpy as np
import pytest

from helpers.core import results
from helpers.serving import client as cl, sweep, tiny_model, transformers_serve as ts
from helpers.serving.server import Server, free_port

pytestmark = pytest.mark.timeout(300)


def test_summarize_matches_bench_serving_definitions():
    rs = [cl.RequestResult(ok=True, ttft_s=0.1, e2e_s=1.1, itl_s=[0.2] * 5, prompt_tokens=10, output_tokens=11),
          cl.RequestResult(ok=True, ttft_s=0.3, e2e_s=2.3, itl_s=[0.4] * 5, prompt_tokens=10, output_tokens=21),
          cl.RequestResult(ok=False, error="HTTP 500")]
    m = cl.summarize(rs, duration_s=4.0)
    assert m["completed"] == 2 and m["failed"] == 1 and m["errors"] == "HTTP 500"
    assert m["output_throughput"] == pytest.approx(32 / 4.0)
    assert m["total_throughput"] == pytest.approx(52 / 4.0)
    assert m["request_throughput"] == pytest.approx(0.5)
    assert m["achieved_concurrency"] == pytest.approx((1.1 + 2.3) / 4.0)
    assert m["mean_tpot_ms"] == pytest.approx(np.mean([1.0 / 10, 2.0 / 20]) * 1e3)
    assert m["median_ttft_ms"] == pytest.approx(200.0)
    assert m["p99_itl_ms"] == pytest.approx(np.percentile([0.2] * 5 + [0.4] * 5, 99) * 1e3)
    assert m["mean_e2e_latency_ms"] == pytest.approx(1700.0)


def test_bad_inputs_are_clear_errors():
    with pytest.raises(cl.BenchmarkError, match=r"concurrency 0 is not allowed: expected a positive integer"):
        cl.check_concurrencies([1, 0])
    with pytest.raises(cl.BenchmarkError, match="empty"):
        cl.check_concurrencies([])
    with pytest.raises(cl.BenchmarkError, match="'256-256' is not 'INPUT/OUTPUT'"):
        cl.Workload.parse("256-256")
    with pytest.raises(cl.BenchmarkError, match="output_len = 0"):
        cl.Workload(16, 0)
    with pytest.raises(cl.BenchmarkError, match="expected http"):
        cl.check_reachable("localhost:8000")
    with pytest.raises(cl.BenchmarkError, match="requests per concurrency"):
        cl.requests_for(4, 0)


@pytest.mark.integration
def test_unreachable_url_is_a_clear_error():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(cl.ServerUnreachable, match=f"cannot reach the server at {url}.*server_url"):
        cl.check_reachable(url, timeout_s=2)
    with pytest.raises(cl.ServerUnreachable, match="cannot reach"):
        sweep.sweep("/tmp/never-written.jsonl", url, "m", [cl.Workload(8, 8)], [1], progress=False)


def test_parse_bench_serving_jsonl(tmp_path):
    line = {"duration": 10.0, "completed": 64, "total_input_tokens": 16384, "total_output_tokens": 16384,
            "request_throughput": 6.4, "output_throughput": 1638.4, "concurrency": 30.0, "max_concurrency": 64,
            "random_input_len": 256, "random_output_len": 256, "mean_ttft_ms": 50.0, "median_ttft_ms": 40.0,
            "p99_ttft_ms": 90.0, "mean_tpot_ms": 20.0, "mean_itl_ms": 20.0, "mean_e2e_latency_ms": 5000.0}
    p = tmp_path / "b.jsonl"
    p.write_text(json.dumps(line) + "\n")
    df = cl.parse_bench_serving_jsonl(p)
    r = df.iloc[0]
    assert r.workload == "256/256" and r.concurrency == 64 and r.achieved_concurrency == 30.0
    assert r.total_throughput == pytest.approx(3276.8) and r.p99_ttft_ms == 90.0
    p.write_text("not json\n")
    with pytest.raises(cl.BenchmarkError, match="line 1: not JSON"):
        cl.parse_bench_serving_jsonl(p)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    # the demo's healthy model alone (demo.models would also build and teach the nan and untrained ones)
    model = str(tiny_model.build(tmp_path_factory.getbasetemp() / "serving-models" / "healthy"))
    spec = ts.spec(ts.TransformersServeConfig(model=model, continuous_batching=True), name="bench")
    with Server(spec, tmp_path_factory.mktemp("logs") / "bench.log", startup_timeout_s=90) as srv:
        from transformers import AutoTokenizer

        yield srv, model, AutoTokenizer.from_pretrained(model)


@pytest.mark.integration
def test_point_counts_tokens_from_usage(live):
    srv, model, tok = live
    row = cl.run_point(srv.spec.base_url, model, cl.Workload(32, 24), concurrency=3, num_requests=6, tokenizer=tok)
    assert row["completed"] == 6 and row["failed"] == 0, row["errors"]
    assert row["total_output_tokens"] == 6 * 24          # usage, with no early stop
    assert 6 * 30 <= row["total_input_tokens"] <= 6 * 40  # fixed-length prompts (+ a few template tokens)
    assert 0 < row["achieved_concurrency"] <= 3.05
    assert row["mean_ttft_ms"] < row["mean_e2e_latency_ms"]
    assert cl.served_model(srv.spec.base_url) == model


@pytest.mark.integration
def test_interrupted_sweep_resumes_without_repeating(live, tmp_path):
    srv, model, tok = live
    rows = tmp_path / "sweep.jsonl"
    seen = []

    def interrupt_after_first(row):
        seen.append(row)
        raise KeyboardInterrupt

    args = dict(base_url=srv.spec.base_url, model=model, workloads=[cl.Workload(16, 8)], concurrencies=[1, 2, 4],
                labels={"config": "demo", "repeat": 0}, per_concurrency=2, tokenizer=tok, progress=False)
    with pytest.raises(KeyboardInterrupt):
        sweep.sweep(rows, on_point=interrupt_after_first, **args)
    first = results.read_rows(rows)
    assert [r["concurrency"] for r in first] == [1]
    calls = []
    df = sweep.sweep(rows, on_point=calls.append, **args)
    assert [r["concurrency"] for r in calls] == [2, 4]            # the finished point was not repeated
    assert sorted(df.concurrency) == [1, 2, 4]
    assert df[df.concurrency == 1].finished_at.iloc[0] == first[0]["finished_at"]
    again = []
    sweep.sweep(rows, on_point=again.append, **args)
    assert again == []                                             # nothing left to do
    other = sweep.sweep(rows, **{**args, "labels": {"config": "demo", "repeat": 1}, "concurrencies": [1]})
    assert len(other) == 1 and len(results.read_rows(rows)) == 4
