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
"""
from __future__ import annotations

import argparse
import json
import os
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
    from helpers.serving.client import Workload
    from helpers.serving.loadspec import ClosedLoop, LoadSpec
    from helpers.serving.openloop import run_spec

    row, _ = run_spec(url, "standin", LoadSpec(Workload(in_tokens, out_tokens), ClosedLoop(c), num_requests=n))
    return {"ttft_ms": row["median_ttft_ms"], "itl_ms": row["median_itl_ms"], "tpot_ms": row["median_tpot_ms"],
            "e2e_ms": row["median_e2e_latency_ms"], "completed": row["completed"]}


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--guidellm", required=True, help="the guidellm executable (its own virtual environment)")
    ap.add_argument("--tokenizer", required=True, help="a local Hugging Face tokenizer folder for GuideLLM's prompts")
    ap.add_argument("--concurrencies", default="1,4")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--input-tokens", type=int, default=16)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--ttft-s", type=float, default=0.02)
    ap.add_argument("--interval-s", type=float, default=0.01)
    a = ap.parse_args(argv)
    proc, url = start_standin(a.ttft_s, a.interval_s)
    print(f"stand-in at {url}: first chunk after {a.ttft_s * 1e3:g} ms, then a token every {a.interval_s * 1e3:g} ms "
          f"(scheduled E2E {(a.ttft_s + (a.output_tokens - 1) * a.interval_s) * 1e3:g} ms); {a.requests} requests of "
          f"{a.input_tokens}/{a.output_tokens} tokens per point; load average {os.getloadavg()[0]:.2f}")
    try:
        for c in (int(x) for x in a.concurrencies.split(",")):
            t0 = time.time()
            book = book_medians(url, c, a.requests, a.input_tokens, a.output_tokens)
            ref = guidellm_medians(a.guidellm, a.tokenizer, url, c, a.requests, a.input_tokens, a.output_tokens)
            print(f"\nconcurrency {c} ({time.time() - t0:.0f} s): completed book {book['completed']}, "
                  f"guidellm {ref['completed']} (guidellm median output tokens {ref['output_tokens']:.0f})")
            print(f"{'median':<8} {'book (ms)':>10} {'guidellm (ms)':>14} {'book / guidellm':>16}")
            for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
                print(f"{k[:-3]:<8} {book[k]:>10.2f} {ref[k]:>14.2f} {book[k] / ref[k]:>16.3f}")
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
