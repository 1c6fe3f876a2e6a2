"""The client's own cost, measured against the stand-in server (standin.StandIn) streaming on a known schedule.

A request to the stand-in takes ttft_s + (tokens - 1) * interval_s by construction (plus sleep jitter on the
server side); what the client measures beyond that is its overhead: HTTP, SSE parsing, the event loop, and
the stand-in's own thread scheduling, which this cannot separate from the client's (an upper bound on the
client's share). Reported per request (E2E excess) and per token (excess / output tokens) at each concurrency.
"""
from __future__ import annotations

import numpy as np

from .client import Workload
from .loadspec import ClosedLoop, LoadSpec
from .openloop import run_spec
from .standin import StandIn


def client_overhead(concurrencies=(1, 4, 16), tokens: int = 32, ttft_s: float = 0.02, interval_s: float = 0.005,
                    per_concurrency: int = 4) -> list[dict]:
    """One row per concurrency: scheduled and measured median TTFT/E2E and the excess per request and token."""
    rows = []
    expected_e2e = ttft_s + (tokens - 1) * interval_s
    with StandIn(ttft_s=ttft_s, interval_s=interval_s) as srv:
        for c in concurrencies:
            spec = LoadSpec(Workload(8, tokens), ClosedLoop(c), num_requests=max(c * per_concurrency, 4))
            row, results = run_spec(srv.url, "standin", spec)
            ok = [r for r in results if r.ok]
            e2e = np.array([r.e2e_s for r in ok])
            ttft = np.array([r.ttft_s for r in ok])
            rows.append({"concurrency": c, "requests": len(ok), "tokens": tokens,
                         "scheduled_ttft_ms": ttft_s * 1e3, "median_ttft_ms": float(np.median(ttft)) * 1e3,
                         "scheduled_e2e_ms": expected_e2e * 1e3, "median_e2e_ms": float(np.median(e2e)) * 1e3,
                         "overhead_per_request_ms": float(np.median(e2e) - expected_e2e) * 1e3,
                         "overhead_per_token_ms": float(np.median(e2e) - expected_e2e) * 1e3 / tokens,
                         "ttft_overhead_ms": float(np.median(ttft) - ttft_s) * 1e3})
    return rows
