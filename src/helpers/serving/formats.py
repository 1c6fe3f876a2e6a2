"""A point saved with `vllm bench serve --save-result`'s JSON keys, so readers can load it in the tools they
know. Keys checked against vllm/benchmarks/serve.py (vllm-project/vllm, v0.31.0: the `result` dict and
process_one_metric's f"mean_/median_/std_/p{p}_{metric}_ms"); times in the per-request lists are seconds,
as vllm saves them. Definitions: data/reference/serving_metric_names.csv.
"""
from __future__ import annotations

import numpy as np

from .loadspec import tpot_s

PERCENTILES = (90, 95, 99)


def _metric(name: str, values_s, out: dict) -> None:
    v = np.asarray([x for x in values_s if x == x], dtype=float) * 1e3
    nan = float("nan")
    out[f"mean_{name}_ms"] = float(v.mean()) if len(v) else nan
    out[f"median_{name}_ms"] = float(np.median(v)) if len(v) else nan
    out[f"std_{name}_ms"] = float(v.std()) if len(v) else nan
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = float(np.percentile(v, p)) if len(v) else nan


def vllm_result(row: dict, results, model_id: str = "", backend: str = "openai") -> dict:
    """One point (openloop.run_spec's row and results) as a `vllm bench serve` saved result."""
    ok = [r for r in results if r.ok]
    out = {"backend": backend, "model_id": model_id, "tokenizer_id": model_id, "num_prompts": len(results),
           "request_rate": row.get("request_rate", float("inf")), "burstiness": row.get("burstiness", 1.0),
           "max_concurrency": row.get("max_concurrency", row.get("concurrency")),
           "duration": row["duration_s"], "completed": len(ok), "failed": len(results) - len(ok),
           "total_input_tokens": row["total_input_tokens"], "total_output_tokens": row["total_output_tokens"],
           "request_throughput": row["request_throughput"], "request_goodput": row.get("goodput_rps"),
           "output_throughput": row["output_throughput"], "total_token_throughput": row["total_throughput"],
           "input_lens": [r.prompt_tokens for r in results], "output_lens": [r.output_tokens for r in results],
           "ttfts": [r.ttft_s if r.ok else 0.0 for r in results], "itls": [list(r.itl_s) for r in results],
           "start_times": [r.start_s for r in results], "generated_texts": [r.text for r in results],
           "errors": [r.error for r in results]}
    _metric("ttft", [r.ttft_s for r in ok], out)
    _metric("tpot", [tpot_s(r) for r in ok], out)
    _metric("itl", [x for r in ok for x in r.itl_s], out)
    _metric("e2el", [r.e2e_s for r in ok], out)
    return out
