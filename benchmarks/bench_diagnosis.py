"""Time chapter 07_diagnosis (the verdict) as the runbook executes it, in recorded mode, on this machine.

    python benchmarks/bench_diagnosis.py [--repeats 3]

Prints each run's chapter time (papermill, as the runbook's manifest records it) and the in-process time
of building the diagnosis and every section (no kernel start-up), with minimum, median and maximum.
Goal on the 2-core development machine: the chapter under 30 s.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from helpers import repo_root

GOAL_S = 30.0
SECTIONS = ("inputs", "mapping", "baseline", "check", "measured_compute", "projection_check", "bare_metal_band",
            "vm_predicted", "attribution", "decision", "ceilings", "run_link", "collectives", "remedies")


def chapter_once(runs_dir: Path, i: int) -> float:
    run_id = f"bench-diag-{i}"
    proc = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--target", "recorded", "--chapters",
                           "07_diagnosis", "--no-build", "--runs-dir", str(runs_dir), "--run-id", run_id],
                          capture_output=True, text=True, cwd=repo_root())
    m = json.loads((runs_dir / run_id / "manifest.json").read_text())
    rec = next(c for c in m["chapters"] if c["stem"] == "07_diagnosis")
    if rec["status"] != "ok":
        raise SystemExit(f"07_diagnosis {rec['status']}: {rec.get('error')}\n{proc.stdout[-2000:]}")
    return float(rec["duration_s"])


def in_process() -> float:
    from helpers.chapters import diagnosis as dg
    from helpers.model import measured as mb

    t0 = time.perf_counter()
    d = dg.Diagnosis.build("glm5", 0.25, mb.step_measurement(None), live=False, study=mb.precision_study(None))
    for name in SECTIONS:
        getattr(dg, name)(d)
    return time.perf_counter() - t0


def _stats(xs):
    return f"min {min(xs):.1f} s, median {statistics.median(xs):.1f} s, max {max(xs):.1f} s"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        chapter = []
        for i in range(a.repeats):
            chapter.append(chapter_once(Path(tmp), i))
            print(f"run {i + 1}: 07_diagnosis executed in {chapter[-1]:.1f} s (papermill, recorded mode)")
    inproc = [in_process()]
    print(f"in-process build and sections: {inproc[0]:.1f} s (first call, tables loaded cold)")
    print(f"07_diagnosis chapter: {_stats(chapter)}; goal under {GOAL_S:.0f} s: "
          f"{'met' if max(chapter) < GOAL_S else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
