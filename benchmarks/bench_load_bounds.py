"""The load study's overshoot per path (issue 47, item 2): how far past its own limit each path runs against a
server slower than the limits (the stand-in, helpers.serving.standin: --ttft-s a request, in the client's process).

    python benchmarks/bench_load_bounds.py [--ttft-s 2] [--limit-s 5] [--study-s 20] [--baseline-src DIR]

Paths (each in a fresh process): an open-loop point (openloop.run_spec, OpenLoop 1 request/s, 30 requests,
LoadSpec.time_limit_s = --limit-s), a closed-loop point (ClosedLoop 2, 30 requests, the same limit), the rate
sweep (openloop.rate_sweep, time_limit_s = --limit-s), the concurrency capacity search as the study runs it
(loadstudy._search_concurrency, limit --limit-s, request time limit 10 s) and the whole study (loadstudy.load_study,
load_time_s = --study-s, request time limit 10 s). Printed per path (measured: this machine): its limit, the time
it took, the overshoot (took - limit), the stated bound on the overshoot (one request time limit; for the study,
none: it ends within load_time_s), and the requests run and not run where the path says. `--baseline-src DIR`
runs the same paths with another checkout's src/ (1beba90's: `git archive 1beba90 src | tar -x -C DIR`), whose
calls lack the time arguments added since (it is called the way it can be).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import repo_root

CHILD = textwrap.dedent('''
    import json, sys, tempfile, time
    from helpers.core import layout
    from helpers.serving import client as cl, loadstudy
    from helpers.serving.loadspec import SLO, ClosedLoop, LoadSpec, OpenLoop
    from helpers.serving.openloop import rate_sweep, run_spec
    from helpers.serving.standin import StandIn
    path, ttft, limit, study_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    W, slo = cl.Workload(8, 4), SLO.parse("ttft:%d" % (ttft * 3000))
    P = dict(served_model="standin", load_modes="on", slo="ttft:%d" % (ttft * 3000), slo_share=0.9, burstiness=1.0,
             rate_points=2, load_requests=4, load_time_s=study_s, workloads=["8/4"], concurrencies=[1, 8],
             request_timeout_s=10.0)
    out = {"path": path}
    with StandIn(ttft_s=ttft, interval_s=0.01) as srv, tempfile.TemporaryDirectory() as tmp:
        run = layout.Run(tmp, "03_baselines_tuning")
        t0 = time.monotonic()
        if path in ("open loop", "closed loop"):
            load = OpenLoop(1.0) if path == "open loop" else ClosedLoop(2)
            row, res = run_spec(srv.url, "standin", LoadSpec(W, load, 30, slo=slo, time_limit_s=limit))
            out.update(limit_s=limit, bound_s=limit, ran=sum(r.error_kind != "not-run" for r in res),
                       not_run=sum(r.error_kind == "not-run" for r in res))
        elif path == "rate sweep":
            rows = rate_sweep(srv.url, "standin", W, points=3, slo=slo, requests_per_point=4, max_concurrency_probe=4,
                              time_limit_s=limit)
            out.update(limit_s=limit, bound_s=limit, points=len(rows),
                       not_run=sum(1 for r in rows if r.get("skipped") or r.get("cut_short")))
        elif path == "capacity search":
            try:
                cap = loadstudy._search_concurrency(srv.url, "standin", W, slo, P, 8, run, limit, time.monotonic() + 600)
            except TypeError:   # 1beba90: no study end
                cap = loadstudy._search_concurrency(srv.url, "standin", W, slo, P, 8, run, limit)
            out.update(limit_s=limit, bound_s=P["request_timeout_s"], points=len(cap["points"]),
                       not_run=len(cap.get("not_run", [])), complete=cap["complete"])
        else:
            study = loadstudy.load_study({**P, "server_url": srv.url}, run)
            out.update(limit_s=study_s, bound_s=0.0, failed=study.get("failed", ""))
        out["took_s"] = time.monotonic() - t0
    print(json.dumps(out))
''')
PATHS = ("open loop", "closed loop", "rate sweep", "capacity search", "whole study")


def one(src: Path, path: str, a) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, path, str(a.ttft_s), str(a.limit_s), str(a.study_s)],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(src)}, timeout=900)
    if p.returncode:
        return {"path": path, "error": (p.stderr.strip().splitlines() or ["?"])[-1][:120]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ttft-s", type=float, default=2.0, help="the stand-in's time to first token (s)")
    ap.add_argument("--limit-s", type=float, default=5.0, help="each path's own limit (s)")
    ap.add_argument("--study-s", type=float, default=20.0, help="the whole study's load_time_s")
    ap.add_argument("--baseline-src", type=Path, help="another checkout's src/ to run the same paths with")
    ap.add_argument("--paths", nargs="+", default=list(PATHS))
    a = ap.parse_args(argv)
    trees = [("this", repo_root() / "src")] + ([("baseline", a.baseline_src)] if a.baseline_src else [])
    print(f"measured on this machine ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}): the stand-in at "
          f"{a.ttft_s:g} s a request; limits {a.limit_s:g} s a path, {a.study_s:g} s the study")
    print(f"{'client':9s} {'path':16s} {'limit s':>8s} {'took s':>8s} {'overshoot s':>11s} {'bound s':>8s}  detail")
    for name, src in trees:
        for path in a.paths:
            r = one(src, path, a)
            if "error" in r:
                print(f"{name:9s} {path:16s} error: {r['error']}")
                continue
            detail = ", ".join(f"{k} {r[k]}" for k in ("ran", "not_run", "points", "complete", "failed") if k in r
                               and r[k] != "")
            print(f"{name:9s} {path:16s} {r['limit_s']:8.1f} {r['took_s']:8.1f} {r['took_s'] - r['limit_s']:11.1f} "
                  f"{r['bound_s']:8.1f}  {detail}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
