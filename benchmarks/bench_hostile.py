"""The client's peak memory under each hostile server kind (issue 47, item 1): one streamed request from a fresh
client process against tests/fixtures/hostile_server.py (a real process on 127.0.0.1), per kind.

    python benchmarks/bench_hostile.py [--max-tokens 256] [--timeout 20] [--src DIR] [--kinds ...]

Printed per kind (measured: this machine): the client process's peak resident memory (VmHWM, MiB), its seconds,
the request's error kind and the start of its message. The first row, `good`, is a well-formed stream (the client
at rest). Goal (issue 47): every kind under 100 MiB, and none ending as "timeout" (a bound reached, not a deadline).
`--src DIR` runs the client of another checkout's src/ (e.g. 1beba90's, `git archive 1beba90 src | tar -x -C DIR`)
against the same servers, for the before/after table; each client runs under an address-space cap (--cap-gib, 8)
so an unbounded one fails instead of taking the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from helpers import repo_root
from helpers.serving.server import free_port

KINDS = ("headers-flood", "header-huge", "chunk-huge", "body-endless", "sse-flood", "truncated-length",
         "truncated-chunk", "bad-chunk-size", "bad-status", "html", "usage-one")
CLIENT = textwrap.dedent('''
    import json, resource, sys, time
    cap = int(float(sys.argv[4]) * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    from helpers.serving import client as cl
    t0 = time.monotonic()
    try:
        (r,), _ = cl.run_sync(cl.run_requests(sys.argv[1], "fake", ["p"], int(sys.argv[2]), 1, timeout_s=float(sys.argv[3])))
        kind, error = r.error_kind or "ok", r.error
    except MemoryError:
        kind, error = "MemoryError", "the client ran out of its address-space cap"
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
    print(json.dumps({"kind": kind, "error": error[:300], "peak_mib": int(hwm) / 1024, "s": time.monotonic() - t0}))
''')


def one(kind: str, args, src: Path) -> dict:
    port = free_port()
    server = subprocess.Popen([sys.executable, str(repo_root() / "tests" / "fixtures" / "hostile_server.py"),
                               str(port), "cr-only" if kind == "good" else kind], stdout=subprocess.PIPE, text=True)
    try:
        server.stdout.readline()
        env = {**os.environ, "PYTHONPATH": str(src)}
        p = subprocess.run([sys.executable, "-c", CLIENT, f"http://127.0.0.1:{port}", str(args.max_tokens),
                            str(args.timeout), str(args.cap_gib)], capture_output=True, text=True, env=env,
                           timeout=args.timeout + 120)
        lines = p.stdout.strip().splitlines()
        if p.returncode or not lines:
            return {"kind": f"exit {p.returncode}", "error": p.stderr.strip().splitlines()[-1:] or [""],
                    "peak_mib": float("nan"), "s": float("nan")}
        return json.loads(lines[-1])
    finally:
        server.kill()
        server.wait()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=20.0, help="the request's time limit (s)")
    ap.add_argument("--src", type=Path, default=repo_root() / "src", help="the src/ folder whose client runs")
    ap.add_argument("--cap-gib", type=float, default=8.0, help="the client's address-space cap (GiB)")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS))
    a = ap.parse_args(argv)
    print(f"measured on this machine ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}), client from {a.src}, "
          f"max_tokens {a.max_tokens}, request time limit {a.timeout:g} s, {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'server kind':18s} {'peak MiB':>9s} {'s':>6s}  {'error kind':12s} message")
    worst = 0.0
    for kind in ["good", *a.kinds]:
        r = one(kind, a, a.src)
        worst = max(worst, r["peak_mib"] if kind != "good" and r["peak_mib"] == r["peak_mib"] else 0.0)
        print(f"{kind:18s} {r['peak_mib']:9.1f} {r['s']:6.2f}  {r['kind']:12s} {str(r['error'])[:110]}", flush=True)
    print(f"largest peak under a hostile kind: {worst:.1f} MiB (goal: under 100)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
