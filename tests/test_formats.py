"""A point saved with `vllm bench serve`'s saved-result keys; the name-mapping table loads with its sources."""
import csv

import pytest

from helpers import repo_root
from helpers.serving.client import RequestResult
from helpers.serving.formats import vllm_result

# the keys of vllm/benchmarks/serve.py's `result` dict (v0.31.0) and its per-metric statistics
VLLM_KEYS = {"duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
             "request_goodput", "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts",
             "itls", "start_times", "generated_texts", "errors"}


def test_vllm_keys_and_values():
    res = [RequestResult(ok=True, start_s=0.0, ttft_s=0.1, e2e_s=0.4, itl_s=[0.1, 0.1, 0.1], prompt_tokens=4,
                         output_tokens=4, text="abcd"),
           RequestResult(ok=False, start_s=0.5, error="boom")]
    row = {"duration_s": 1.0, "total_input_tokens": 4, "total_output_tokens": 4, "request_throughput": 1.0,
           "output_throughput": 4.0, "total_throughput": 8.0, "concurrency": 2}
    out = vllm_result(row, res, model_id="m")
    missing = VLLM_KEYS - set(out)
    assert not missing, missing
    for m in ("ttft", "tpot", "itl", "e2el"):
        assert {f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms", f"p99_{m}_ms"} <= set(out)
    assert out["completed"] == 1 and out["failed"] == 1 and out["max_concurrency"] == 2
    assert out["median_ttft_ms"] == pytest.approx(100) and out["mean_tpot_ms"] == pytest.approx(100)
    assert out["errors"] == ["", "boom"]


def test_mapping_table_has_every_tool_and_a_known_source():
    import yaml
    rows = list(csv.DictReader(open(repo_root() / "data/reference/serving_metric_names.csv")))
    sources = yaml.safe_load(open(repo_root() / "data/sources.yaml"))
    assert {"ttft", "tpot", "e2e", "goodput", "itl (per chunk)", "itl (per token)"} <= {r["book_name"] for r in rows}
    for r in rows:
        assert r["source"] in sources and all(r[k] for k in ("vllm_bench_serve", "sglang_bench_serving", "guidellm",
                                                            "aiperf", "checked"))
