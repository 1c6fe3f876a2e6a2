"""The book's client's overhead per request and per token at each concurrency, against the stand-in server
(helpers.serving.standin) streaming on a known schedule (issue 38, item 4). Prints one line per concurrency
(measured: this machine; the stand-in's own thread scheduling is counted in, so it is an upper bound).

    python benchmarks/bench_client_overhead.py [--concurrency 1 4 16 64] [--tokens 32]
"""
from __future__ import annotations

import argparse

from helpers.serving.overhead import client_overhead


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--interval-ms", type=float, default=5.0)
    a = ap.parse_args()
    for r in client_overhead(a.concurrency, a.tokens, interval_s=a.interval_ms / 1e3):
        print(f"concurrency {r['concurrency']:4d}: E2E median {r['median_e2e_ms']:8.2f} ms vs scheduled "
              f"{r['scheduled_e2e_ms']:.2f} -> overhead {r['overhead_per_request_ms']:7.2f} ms/request, "
              f"{r['overhead_per_token_ms']:6.3f} ms/token; TTFT +{r['ttft_overhead_ms']:.2f} ms")


if __name__ == "__main__":
    main()
