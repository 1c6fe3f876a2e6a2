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


# -- AIPerf's export files --------------------------------------------------------------------------
# Read in aiperf 0.13.0's source (ai-dynamo/aiperf): config/artifacts.py names profile_export.jsonl (one
# MetricRecordInfo a line: metadata, metrics as {"value", "unit"}, error) and profile_export_aiperf.json
# (JsonExportData, schema 1.4: one JsonMetricResult per metric tag, with unit, avg, p1 .. p99, min, max, std,
# count); the tags are the metric classes' `tag` (metrics/types/*.py) and the HTTP phases are k6's names
# (metrics/types/http_trace_metrics.py: http_req_connecting, _sending, _waiting, _receiving).
AIPERF_SCHEMA = "1.4"
AIPERF_STATS = (1, 5, 10, 25, 50, 75, 90, 95, 99)


def _ms(x):
    return None if x is None else float(x) * 1e3


def aiperf_record(i: int, rec: dict, t0_ns: int) -> dict:
    """One request (a helpers.serving.points record) as an AIPerf profile_export.jsonl line."""
    start = t0_ns + int(round((rec["start_s"] or 0.0) * 1e9))
    end = start + int(round((rec["e2e_s"] or 0.0) * 1e9))
    m = {}

    def put(tag, value, unit):
        if value is not None:
            m[tag] = {"value": value, "unit": unit}
    if rec["ok"]:
        put("time_to_first_token", _ms(rec["ttft_s"]), "ms")
        put("request_latency", _ms(rec["e2e_s"]), "ms")
        put("inter_token_latency", _ms(rec["tpot_s"]), "ms")
        put("inter_chunk_latency", [x * 1e3 for x in rec["itl_s"]], "ms")
        put("output_sequence_length", rec["output_tokens"], "tokens")
        put("input_sequence_length", rec["input_tokens"], "tokens")
        if rec.get("tpot_s"):
            put("output_token_throughput_per_user", 1.0 / rec["tpot_s"], "tokens/sec/user")
        for tag, a, b in (("http_req_connecting", None, "connected_s"), ("http_req_sending", "connected_s", "written_s"),
                          ("http_req_waiting", "written_s", "first_byte_s"), ("http_req_receiving", "first_byte_s", "e2e_s")):
            if rec.get(b) is not None and (a is None or rec.get(a) is not None):
                put(tag, _ms(rec[b] - (rec[a] if a else 0.0)), "ms")
    meta = {"session_num": i, "request_start_ns": start, "request_end_ns": end, "worker_id": "glm5-book",
            "record_processor_id": "glm5-book", "benchmark_phase": "warmup" if rec["ramp"] else "profiling"}
    err = None if rec["ok"] else {"code": None, "type": rec["error_kind"] or "error", "message": rec["error"]}
    return {"metadata": meta, "metrics": m, "error": err}


def _aiperf_metric(values, unit: str) -> dict | None:
    v = np.asarray([x for x in values if x is not None and x == x], dtype=float)
    if not len(v):
        return None
    out = {"unit": unit, "avg": float(v.mean())}
    out.update({f"p{p}": float(np.percentile(v, p)) for p in AIPERF_STATS})
    out.update(min=float(v.min()), max=float(v.max()), std=float(v.std()), count=int(len(v)))
    return out


def aiperf_summary(row: dict) -> dict:
    """One point (its row, records included) as AIPerf's profile_export_aiperf.json (the measured requests only:
    the ramp is AIPerf's warm-up phase, which its summary leaves out too)."""
    recs = [r for r in row.get("records", []) if r["ok"] and not r["ramp"]]
    per = {"time_to_first_token": ([_ms(r["ttft_s"]) for r in recs], "ms"),
           "request_latency": ([_ms(r["e2e_s"]) for r in recs], "ms"),
           "inter_token_latency": ([_ms(r["tpot_s"]) for r in recs], "ms"),
           "inter_chunk_latency": ([x * 1e3 for r in recs for x in r["itl_s"]], "ms"),
           "output_sequence_length": ([r["output_tokens"] for r in recs], "tokens"),
           "input_sequence_length": ([r["input_tokens"] for r in recs], "tokens"),
           "output_token_throughput_per_user": ([1.0 / r["tpot_s"] for r in recs if r["tpot_s"]], "tokens/sec/user")}
    out = {"schema_version": AIPERF_SCHEMA, "aiperf_version": None, "benchmark_id": row.get("key")}
    for tag, (vals, unit) in per.items():
        m = _aiperf_metric(vals, unit)
        if m:
            out[tag] = m
    out["request_throughput"] = {"unit": "requests/sec", "avg": row.get("request_throughput")}
    out["output_token_throughput"] = {"unit": "tokens/sec", "avg": row.get("output_throughput")}
    out["request_count"] = {"unit": "requests", "avg": row.get("completed")}
    out["error_request_count"] = {"unit": "requests", "avg": row.get("failed")}
    out["benchmark_duration"] = {"unit": "sec", "avg": row.get("duration_s")}
    if row.get("goodput_rps") is not None:
        out["goodput"] = {"unit": "requests/sec", "avg": row["goodput_rps"]}
        out["good_request_count"] = {"unit": "requests", "avg": row.get("good_requests")}
    return out


def vllm_from_records(row: dict, model_id: str = "") -> dict:
    """One study point (its row, records included) as a `vllm bench serve` saved result (measured requests only)."""
    from .client import RequestResult

    recs = [r for r in row.get("records", []) if not r["ramp"]]
    res = [RequestResult(ok=r["ok"], start_s=r["start_s"] or 0.0, ttft_s=r["ttft_s"] if r["ttft_s"] is not None
                         else float("nan"), e2e_s=r["e2e_s"] if r["e2e_s"] is not None else float("nan"),
                         itl_s=list(r["itl_s"]), prompt_tokens=r["input_tokens"], output_tokens=r["output_tokens"],
                         error=r["error"]) for r in recs]
    return vllm_result({k: v for k, v in row.items() if k != "records"}, res, model_id)
