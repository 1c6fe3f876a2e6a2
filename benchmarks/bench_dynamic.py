"""How the fused step's compiled functions take their sizes, paired on one GPU (issue 48): the step's own setting
against the two it replaced, each in a fresh process, the settings alternated so that drift hits all alike.

    python benchmarks/bench_dynamic.py [--rounds 2] [--batches 1,64] [--contexts 384] [--precision bf16] [--out DIR]

Settings (helpers.model.fused.DYNAMIC, chosen by $BOOK_STEP_DYNAMIC in each process):
- marked: static sizes but the batch and the context (the book's step, helpers.model.fused.VARYING);
- all: every size symbolic (torch.compile dynamic=True: issue 34's fix for the first call, 6-11 % slower);
- auto: dynamo's automatic dynamic shapes (dynamic=None: the fastest, but its first call differs from the rest).
Each run is `benchmarks/bench_step.py` at GLM-5's TP8 rank shapes, CUDA graphs, no components, no op level and
no sparse points. Printed: each run's median step time per batch; then per setting and batch the median over the
rounds and its ratio to `auto`. The goal: `marked` within 2 % of `auto` at batch 1 and 64.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SETTINGS = ("marked", "all", "auto")
GOAL = 0.02


def one_run(setting: str, a, out: Path) -> dict[int, float]:
    """{batch: median step time in us} of one bench_step.py process under `setting`."""
    cmd = [sys.executable, str(Path(__file__).with_name("bench_step.py")), "--device", a.device,
           "--precision", a.precision, "--batches", a.batches, "--contexts", a.contexts,
           "--modes", "graph" if a.device.startswith("cuda") else "eager", "--no-components", "--op-level", "none",
           "--sparse", "none", "--out", str(out)] + (["--moe-held", str(a.moe_held)] if a.moe_held else [])
    r = subprocess.run(cmd, env={**os.environ, "BOOK_STEP_DYNAMIC": setting}, capture_output=True, text=True,
                       timeout=a.timeout)
    if r.returncode != 0:
        raise SystemExit(f"bench_step ({setting}) exited {r.returncode}:\n{r.stderr[-3000:]}")
    with open(out / "timings.csv") as f:
        rows = [x for x in csv.DictReader(f) if x["what"] == "step"]
    return {int(x["batch"]): float(x["median_us"]) for x in rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--contexts", default="384")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--timeout", type=float, default=400.0, help="seconds for one run")
    ap.add_argument("--device", default="cuda", help="cuda (the comparison); cpu only checks the harness (nothing "
                    "is compiled there, so the settings do not differ)")
    ap.add_argument("--moe-held", type=int, default=8, help="distinct MoE layers bench_step holds (default 8)")
    ap.add_argument("--out", default=None, help="also write the runs as CSV (runs.csv) here")
    a = ap.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(a.rounds):
            order = SETTINGS[rnd % len(SETTINGS):] + SETTINGS[:rnd % len(SETTINGS)]   # rotated each round
            for setting in order:
                got = one_run(setting, a, Path(tmp) / f"{rnd}-{setting}")
                for b, us in sorted(got.items()):
                    runs.append({"round": rnd, "setting": setting, "batch": b, "median_us": us})
                    print(f"round {rnd} {setting:6s} batch {b:3d}: {us / 1e3:.2f} ms", flush=True)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        with open(Path(a.out) / "runs.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(runs[0]))
            w.writeheader()
            w.writerows(runs)
    med = {(s, b): statistics.median(r["median_us"] for r in runs if (r["setting"], r["batch"]) == (s, b))
           for s in SETTINGS for b in sorted({r["batch"] for r in runs})}
    mode = "CUDA graphs" if a.device.startswith("cuda") else "eager"
    print(f"\nstep (ms, median over {a.rounds} rounds; {a.precision}, {mode}, context {a.contexts}) and ratio to auto")
    ok = True
    for b in sorted({b for _, b in med}):
        line = f"batch {b:3d}: " + "  ".join(f"{s} {med[s, b] / 1e3:.2f} ({med[s, b] / med['auto', b]:.3f})"
                                           for s in SETTINGS)
        ok &= med["marked", b] / med["auto", b] <= 1 + GOAL
        print(line)
    print(f"marked within {GOAL:.0%} of auto at every batch: {'yes' if ok else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
