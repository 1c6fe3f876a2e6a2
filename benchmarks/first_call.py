"""The first decode step in a fresh process against every later one, over a grid (helpers.model.firstcall).

Each configuration runs in a process of its own; one row each: the relative L2 distance of the first call,
the third, a graph replay and a call after another batch from the second call, and a verdict ('same',
'first call differs', 'run to run').

    python benchmarks/first_call.py                               # bf16 and FP8, fused and unfused,
                                                                  # overlap off and on, batches 1 and 64
    python benchmarks/first_call.py --model glm5 --batches 1,64 --contexts 384 --out first_call.csv
    python benchmarks/first_call.py --only dtype=fp8,fusion=fused
    python benchmarks/first_call.py --model glm5 --contexts 384,8192 --only fusion=fused --jobs 4 --moe-held 4

Exits 1 where a first call differs or a configuration fails (run-to-run differences are reported only).
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys

from helpers.model import firstcall

GRID = {"dtype": ("bf16", "fp8"), "fusion": ("fused", "unfused"), "overlap": ("off", "on")}


def configs(model: str, batches, contexts, device: str, only: dict,
            moe_held: int | None = None) -> list[firstcall.FirstCallConfig]:
    out = []
    for vals in itertools.product(*GRID.values()):
        for b, c in itertools.product(batches, contexts):
            cfg = dict(zip(GRID, vals), model=model, batch=b, context=c, device=device, moe_held=moe_held)
            if all(str(cfg.get(k)) == v for k, v in only.items()):
                out.append(firstcall.FirstCallConfig(**cfg))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="glm5-mini")
    ap.add_argument("--batches", default="1,64", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--contexts", default="64", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--only", default="", help="KEY=VALUE,... keep the configurations matching these")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds for one configuration")
    ap.add_argument("--jobs", type=int, default=1, help="configurations in fresh processes at once (default 1)")
    ap.add_argument("--moe-held", type=int, default=None, help="distinct MoE layers each process holds (default: "
                    "as many as fit, which leaves no room for a second process: give it with --jobs above 1)")
    ap.add_argument("--out", help="write the rows as CSV here")
    args = ap.parse_args(argv)
    only = dict(kv.split("=", 1) for kv in args.only.split(",") if kv)
    rows = firstcall.run_fresh_all(configs(args.model, args.batches, args.contexts, args.device, only,
                                           args.moe_held), args.timeout, args.jobs)
    for row in rows:
        print(json.dumps(row), flush=True)
    if args.out:
        import pandas as pd
        pd.DataFrame(rows).to_csv(args.out, index=False)
    bad = [r for r in rows if r["verdict"] not in ("same", "run to run")]
    print(f"{len(rows)} configurations: " + ", ".join(
        f"{v} {sum(r['verdict'] == v for r in rows)}" for v in sorted({r['verdict'] for r in rows})))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
