"""Time the book: execute every chapter and build the site, per target; then re-render a run.

    python benchmarks/bench_book.py [--targets recorded,auto] [--repeats 1]

Prints one line per measurement and a summary table (wall-clock seconds on this machine, after
installation). Goals on the 2-core development machine: `auto` execute+build within 60 s,
re-rendering an existing run within 15 s.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from helpers import repo_root

GOALS = {"auto": 60.0, "render": 15.0}


def _runbook(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "helpers.book.runbook", *args], capture_output=True,
                          text=True, cwd=repo_root())
    return time.perf_counter() - t0, proc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="recorded,auto")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for target in [t.strip() for t in args.targets.split(",") if t.strip()]:
            for rep in range(args.repeats):
                run_id = f"bench-{target}-{rep}"
                wall, proc = _runbook("--target", target, "--runs-dir", tmp, "--run-id", run_id)
                if proc.returncode not in (0, 1):
                    print(proc.stdout, proc.stderr, file=sys.stderr)
                    return 2
                m = json.loads((Path(tmp) / run_id / "manifest.json").read_text())
                execute = m["duration_s"]
                build = wall - execute
                slowest = max(m["chapters"], key=lambda c: c["duration_s"])
                rows.append({"what": f"{target}: execute + build", "seconds": wall,
                             "detail": f"execute {execute:.1f} s (slowest {slowest['stem']} "
                                       f"{slowest['duration_s']:.1f} s), build+startup {build:.1f} s, "
                                       f"status {m['status']}", "goal": GOALS.get(target)})
                print(f"{rows[-1]['what']:<28} {wall:6.1f} s   {rows[-1]['detail']}", flush=True)
                wall, proc = _runbook("--render", str(Path(tmp) / run_id))
                if proc.returncode != 0:
                    print(proc.stdout, proc.stderr, file=sys.stderr)
                    return 2
                rows.append({"what": f"{target}: re-render run", "seconds": wall, "detail": "no execution",
                             "goal": GOALS["render"]})
                print(f"{rows[-1]['what']:<28} {wall:6.1f} s", flush=True)
    print(f"\nmachine: {platform.node()}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}")
    print(f"{'measurement':<28} {'seconds':>8} {'goal':>6}  verdict")
    for r in rows:
        goal = r["goal"]
        verdict = "" if goal is None else ("within goal" if r["seconds"] <= goal else "OVER goal")
        print(f"{r['what']:<28} {r['seconds']:8.1f} {goal if goal else '':>6}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
