"""The environment probe's speed (issue 48: a speed target is a benchmark's printed figure, not a timed test).

    python benchmarks/bench_probe.py [--repeats 5]

Runs `helpers.machine.probe.probe()` in a fresh Python process each time (the chapter's kernel calls it once,
imports included) and prints each run's wall time, the minimum, median and maximum, the machine's load average
before and after, and the goal: under 2 s on a host without a GPU (NVML answers at once that there is none; on a
GPU host it reads every device, and the goal does not apply).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

RUN = "import time; t0 = time.perf_counter(); from helpers.machine import probe; probe.probe(); " \
      "print(time.perf_counter() - t0)"
GOAL_S = 2.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    load0 = os.getloadavg()
    times = []
    for i in range(args.repeats):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, check=True).stdout
        inside = float(out.split()[-1])
        times.append(inside)
        print(f"run {i + 1}: probe {inside:.2f} s (import and call), process {time.perf_counter() - t0:.2f} s")
    load1 = os.getloadavg()
    print(f"probe: min {min(times):.2f} s, median {statistics.median(times):.2f} s, max {max(times):.2f} s "
          f"over {len(times)} runs; goal under {GOAL_S:g} s without a GPU")
    print(f"load average before {' '.join(f'{x:.2f}' for x in load0)}, after {' '.join(f'{x:.2f}' for x in load1)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
