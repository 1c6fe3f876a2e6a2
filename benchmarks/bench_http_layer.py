"""Paired benchmark of two clients' HTTP layers (issue 47): does the library the client streams through distort
TTFT at 64 in flight, and what does a request cost in CPU?

    python benchmarks/bench_http_layer.py --baseline-src DIR [--repeats 8] [--concurrency 64] [--requests 512]

One stand-in server (helpers.serving.standin, its own process: first chunk after --ttft-ms, then a token every
--interval-ms) serves both clients: this checkout's (aiohttp, helpers.serving.fetch) and the one under
--baseline-src (e.g. 1beba90's hand-written HTTP/1.1: `git archive 1beba90 src | tar -x -C DIR`, then
--baseline-src DIR/src). Each repeat runs both, in alternating order, each in a fresh process sending
--requests streamed requests with --concurrency in flight. Printed per run (measured: this machine): median TTFT,
median E2E, median time to the first byte written (sent_s), and the client process's CPU per request (user +
system, its own process only; the server runs apart). The summary gives each figure's median over the repeats
and the median and range of the per-pair ratio new / baseline. Goal (issue 47): the median TTFT ratio within
1.05 (5 %), the CPU per request near the baseline's. The machine's load moves every figure (the server and the
client share its cores): the load average is printed with each pair.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import repo_root

CLIENT = textwrap.dedent('''
    import json, resource, sys
    import numpy as np
    from helpers.serving import client as cl
    url, n, c, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    cl.run_sync(cl.run_requests(url, "standin", ["p"] * 32, tokens, min(c, 32), timeout_s=120))   # warm-up
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    res, dur = cl.run_sync(cl.run_requests(url, "standin", ["p"] * n, tokens, c, timeout_s=120))
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    ok = [r for r in res if r.ok]
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(json.dumps({"ok": len(ok), "n": n, "ttft_ms": float(np.median([r.ttft_s for r in ok])) * 1e3,
                      "e2e_ms": float(np.median([r.e2e_s for r in ok])) * 1e3,
                      "sent_ms": float(np.median([r.sent_s for r in ok])) * 1e3, "cpu_ms": cpu * 1e3 / max(len(ok), 1),
                      "duration_s": dur}))
''')


def start_standin(ttft_s: float, interval_s: float):
    proc = subprocess.Popen([sys.executable, "-m", "helpers.serving.standin", str(ttft_s), str(interval_s)],
                            stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        raise SystemExit(f"the stand-in did not start (printed {url!r})")
    return proc, url


def run_client(src: Path, url: str, a) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    p = subprocess.run([sys.executable, "-c", CLIENT, url, str(a.requests), str(a.concurrency), str(a.tokens)],
                       capture_output=True, text=True, env=env, timeout=600)
    if p.returncode:
        raise SystemExit(f"the client from {src} failed: {p.stderr[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-src", type=Path, required=True, help="the src/ folder of the baseline client")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--interval-ms", type=float, default=10.0)
    a = ap.parse_args(argv)
    new_src = repo_root() / "src"
    proc, url = start_standin(a.ttft_ms / 1e3, a.interval_ms / 1e3)
    runs = {"baseline": [], "new": []}
    print(f"measured on this machine ({os.cpu_count()} CPUs): stand-in TTFT {a.ttft_ms:g} ms, a token every "
          f"{a.interval_ms:g} ms, {a.requests} requests of {a.tokens} tokens, {a.concurrency} in flight")
    print(f"{'pair':>4s} {'client':9s} {'TTFT ms':>8s} {'E2E ms':>8s} {'sent ms':>8s} {'CPU ms/req':>10s} {'load':>5s}")
    try:
        for i in range(a.repeats):
            order = ("baseline", "new") if i % 2 == 0 else ("new", "baseline")
            for who in order:
                r = run_client(a.baseline_src if who == "baseline" else new_src, url, a)
                runs[who].append(r)
                print(f"{i:4d} {who:9s} {r['ttft_ms']:8.2f} {r['e2e_ms']:8.2f} {r['sent_ms']:8.3f} {r['cpu_ms']:10.3f} "
                      f"{os.getloadavg()[0]:5.1f}  ({r['ok']}/{r['n']} ok)", flush=True)
    finally:
        proc.kill()
        proc.wait()
    print("summary (median over the repeats; ratio new / baseline per pair: median [min, max])")
    for k, name in (("ttft_ms", "TTFT ms"), ("e2e_ms", "E2E ms"), ("cpu_ms", "CPU ms/request")):
        b, n = [r[k] for r in runs["baseline"]], [r[k] for r in runs["new"]]
        ratios = [y / x for x, y in zip(b, n) if x > 0]
        print(f"  {name:15s} baseline {statistics.median(b):8.3f}  new {statistics.median(n):8.3f}  ratio "
              f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
