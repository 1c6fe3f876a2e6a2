"""Parity of the book's client with GuideLLM on one local server and one workload (issue 38): prints the medians
of TTFT, ITL (and TPOT) and E2E latency of both at concurrency 1 and 4, and their ratio (book / GuideLLM).

The server is the stand-in (helpers.serving.standin, started here as its own process: first chunk after
--ttft-s, then one token every --interval-s), so the medians the clients should both report are known. Both
clients use /v1/completions, stream, --requests requests of --output-tokens tokens at each concurrency.

GuideLLM is not a dependency of the book: install it in a separate virtual environment and point --guidellm at
its executable, e.g.

    python -m venv /tmp/gvenv && /tmp/gvenv/bin/pip install guidellm
    PYTHONPATH=src .venv/bin/python benchmarks/bench_parity.py --guidellm /tmp/gvenv/bin/guidellm \
        --tokenizer /tmp/glm5-book-models/tiny-XXXX

GuideLLM's synthetic prompts need a tokenizer: --tokenizer is any local Hugging Face tokenizer folder (the tiny
model chapter 03 builds has one); the stand-in does not read prompts. Definitions differ where the names agree
(data/reference/serving_metric_names.csv): GuideLLM's inter_token_latency_ms is per request (E2E - TTFT) /
(output tokens - 1), the book's TPOT; the book's ITL is the median over every gap between streamed chunks. With
one token per chunk on a steady schedule the two should agree; both are printed.

Where each clock starts (measured, issue 38): GuideLLM 0.8.1 sets request_start at httpcore's first header write
(guidellm/backends/openai/http.py, `_trace_request_start`), after the connection is set up; the book's client,
as sglang's bench_serving, starts before it. The stand-in closes every connection, so each request of both
clients opens one, and the book's TTFT and E2E hold a connection set-up that GuideLLM's do not. Like with like,
the book's figures are also printed from its request's first byte written (`sent_s`, "book from send"), and the
parity ratio is taken on those; the ratio on the book's own definition is printed beside it.

Each point runs --repeats times (the order of the two clients alternating), with the load average before
each; a summary gives every ratio's median and range over the repeats. The machine's load moves the figures (the
stand-in and both clients share its cores; on the 2-core machine of 2026-12-04 one repeat of GuideLLM read a
102 ms TTFT at load 5): run it again if the load average is above the number of cores.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def start_standin(ttft_s: float, interval_s: float):
    proc = subprocess.Popen([sys.executable, "-m", "helpers.serving.standin", str(ttft_s), str(interval_s)],
                            stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        raise SystemExit(f"the stand-in did not start (printed {url!r})")
    return proc, url


def book_medians(url: str, c: int, n: int, in_tokens: int, out_tokens: int) -> dict:
    """The book's medians as it defines them, and TTFT / E2E from each request's first byte written (GuideLLM's
    start); a client without `sent_s` (before issue 38's change) gives NaN there."""
    import numpy as np

    from helpers.serving.client import Workload
    from helpers.serving.loadspec import ClosedLoop, LoadSpec
    from helpers.serving.openloop import run_spec

    row, results = run_spec(url, "standin", LoadSpec(Workload(in_tokens, out_tokens), ClosedLoop(c), num_requests=n))
    ok = [r for r in results if r.ok]
    sent = np.array([getattr(r, "sent_s", float("nan")) for r in ok])
    return {"ttft_ms": row["median_ttft_ms"], "itl_ms": row["median_itl_ms"], "tpot_ms": row["median_tpot_ms"],
            "e2e_ms": row["median_e2e_latency_ms"], "completed": row["completed"],
            "sent_ms": float(np.median(sent)) * 1e3, "sent_max_ms": float(np.max(sent)) * 1e3,
            "ttft_send_ms": float(np.median([r.ttft_s for r in ok] - sent)) * 1e3,
            "e2e_send_ms": float(np.median([r.e2e_s for r in ok] - sent)) * 1e3}


def guidellm_medians(exe: str, tokenizer: str, url: str, c: int, n: int, in_tokens: int, out_tokens: int) -> dict:
    out = os.path.join(tempfile.mkdtemp(prefix="parity-"), "guidellm.json")
    profile = "kind=synchronous" if c == 1 else f"kind=concurrent,streams={c}"
    cmd = [exe, "run", "--backend", f"kind=openai_http,target={url},request_format=/v1/completions",
           "--profile", profile, "--constraint", f"kind=max_requests,count={n}",
           "--data", f"kind=synthetic_text,prompt_tokens={in_tokens},output_tokens={out_tokens}",
           "--tokenizer", f"kind=hf_auto,model={tokenizer}", "--output", f"kind=json,path={out}",
           "--disable-console"]
    subprocess.run(cmd, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600)
    m = json.load(open(out))["benchmarks"][0]["metrics"]

    def med(key, scale=1.0):
        return m[key]["successful"]["median"] * scale
    return {"ttft_ms": med("time_to_first_token_ms"), "itl_ms": med("inter_token_latency_ms"),
            "tpot_ms": med("time_per_output_token_ms"), "e2e_ms": med("request_latency", 1e3),
            "completed": m["request_totals"]["successful"], "output_tokens": med("output_token_count")}


#: (metric, the book's key like with like, the book's key as it defines it)
ROWS = (("ttft", "ttft_send_ms", "ttft_ms"), ("itl", "itl_ms", "itl_ms"), ("tpot", "tpot_ms", "tpot_ms"),
        ("e2e", "e2e_send_ms", "e2e_ms"))


def point_rows(c: int, rep: int, load: float, book: dict, ref: dict) -> list[dict]:
    """One point as tidy rows (one per metric) for --out."""
    return [{"concurrency": c, "repeat": rep, "metric": name, "book_ms": book[own], "book_from_send_ms": book[like],
             "guidellm_ms": ref[f"{name}_ms"], "ratio": book[like] / ref[f"{name}_ms"],
             "ratio_book_as_defined": book[own] / ref[f"{name}_ms"], "book_completed": book["completed"],
             "guidellm_completed": ref["completed"], "load_average_1min": load} for name, like, own in ROWS]


def print_point(c: int, rep: int, load: float, book: dict, ref: dict, secs: float, sched: dict) -> dict:
    """One point's table, with the stand-in's schedule beside it (what both should read, before the server's own
    thread scheduling); returns its ratios (like with like, and on the book's own definition)."""
    print(f"\nconcurrency {c}, repeat {rep} ({secs:.0f} s, load average before {load:.2f}): completed book "
          f"{book['completed']}, guidellm {ref['completed']}; book's connection set-up (start to first byte "
          f"written) median {book['sent_ms']:.2f} ms, max {book['sent_max_ms']:.2f} ms")
    print(f"{'median':<6} {'schedule':>9} {'book (ms)':>10} {'book from send':>15} {'guidellm (ms)':>14} {'ratio':>7} "
          f"{'ratio (book as defined)':>24}")
    out = {}
    for name, like, own in ROWS:
        r, r_own = book[like] / ref[f"{name}_ms"], book[own] / ref[f"{name}_ms"]
        print(f"{name:<6} {sched[name]:>9.2f} {book[own]:>10.2f} {book[like]:>15.2f} {ref[name + '_ms']:>14.2f} {r:>7.3f} {r_own:>24.3f}")
        out[name], out[name + " (as defined)"] = r, r_own
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--guidellm", required=True, help="the guidellm executable (its own virtual environment)")
    ap.add_argument("--tokenizer", required=True, help="a local Hugging Face tokenizer folder for GuideLLM's prompts")
    ap.add_argument("--concurrencies", default="1,4")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--input-tokens", type=int, default=16)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--ttft-s", type=float, default=0.02)
    ap.add_argument("--interval-s", type=float, default=0.01)
    ap.add_argument("--out", help="also write every point's medians and ratios to this CSV (tidy: one row per metric)")
    a = ap.parse_args(argv)
    if a.repeats < 1 or a.requests < 1:
        raise SystemExit(f"--repeats {a.repeats} / --requests {a.requests}: expected 1 or more")
    proc, url = start_standin(a.ttft_s, a.interval_s)
    print(f"stand-in at {url}: first chunk after {a.ttft_s * 1e3:g} ms, then a token every {a.interval_s * 1e3:g} ms "
          f"(scheduled E2E {(a.ttft_s + (a.output_tokens - 1) * a.interval_s) * 1e3:g} ms); {a.requests} requests of "
          f"{a.input_tokens}/{a.output_tokens} tokens per point, {a.repeats} repeats; {os.cpu_count()} CPUs; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ratios: dict = {}
    rows: list = []
    sched = {"ttft": a.ttft_s * 1e3, "itl": a.interval_s * 1e3, "tpot": a.interval_s * 1e3,
             "e2e": (a.ttft_s + (a.output_tokens - 1) * a.interval_s) * 1e3}
    try:
        for rep in range(1, a.repeats + 1):
            for c in (int(x) for x in a.concurrencies.split(",")):
                t0, load = time.time(), os.getloadavg()[0]
                run_book = lambda: book_medians(url, c, a.requests, a.input_tokens, a.output_tokens)  # noqa: E731
                run_ref = lambda: guidellm_medians(a.guidellm, a.tokenizer, url, c, a.requests,  # noqa: E731
                                                   a.input_tokens, a.output_tokens)
                if rep % 2:
                    book, ref = run_book(), run_ref()
                else:
                    ref, book = run_ref(), run_book()
                for k, v in print_point(c, rep, load, book, ref, time.time() - t0, sched).items():
                    ratios.setdefault((c, k), []).append(v)
                rows += [{**r, "scheduled_ms": sched[r["metric"]]} for r in point_rows(c, rep, load, book, ref)]
    finally:
        proc.terminate()
        proc.wait(10)
    if a.out:
        import csv
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    print(f"\nratios book / guidellm over {a.repeats} repeats (median [min - max]); load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for (c, k), v in ratios.items():
        if any(x != x for x in v):   # NaN: a client without sent_s (before issue 38's change)
            print(f"  concurrency {c} {k:<23} n/a (this client does not record its first byte written)")
            continue
        said = "within 10 % in every repeat" if all(0.9 <= x <= 1.1 for x in v) else \
            f"OUTSIDE 10 % in {sum(not 0.9 <= x <= 1.1 for x in v)} of {len(v)} repeats"
        print(f"  concurrency {c} {k:<23} {statistics.median(v):.3f} [{min(v):.3f} - {max(v):.3f}]  {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
