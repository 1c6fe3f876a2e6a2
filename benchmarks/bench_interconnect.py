"""Wall time of the interconnect suite on this machine, and its headline figures (not a timed test).

    python benchmarks/bench_interconnect.py                 # quick preset on CPU, full on a GPU
    python benchmarks/bench_interconnect.py --preset full --out /tmp/ic

Goals: the CPU suite (`quick`) within 60 s; the whole suite (`full`) within 2 minutes on one H200.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path


def main(argv=None) -> int:
    import torch

    from helpers.core.results import save_table
    from helpers.interconnect import suite as ic

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=list(ic.PRESETS), default=None)
    ap.add_argument("--out", default="", help="folder for the CSV tables")
    ap.add_argument("--variants", default="all")
    ap.add_argument("--timeout", type=float, default=180)
    a = ap.parse_args(argv)
    preset = a.preset or ("full" if torch.cuda.is_available() else "quick")
    goal = 120 if preset == "full" else 60
    t0 = time.perf_counter()
    save = (lambda name, df: save_table(Path(a.out), name, df)) if a.out else None
    out = ic.run_suite(preset, Path(a.out) / "collective_points" if a.out else None, variants=a.variants,
                       timeout_s=a.timeout, save=save)
    wall = time.perf_counter() - t0
    m = out.machine
    print(f"machine: {m.label}; preset {preset}")
    cs, fits = out.copy_sweep, out.fits
    one = int(ic.copybench.decode_message_sizes().size_bytes.iloc[0])
    small = cs[cs.size_bytes == one].pivot_table(index="path", columns="harness", values="time_us")
    print(f"\ntime per copy at {one} B (one token), us (median):\n{small.round(3).to_string()}")
    big = cs[cs.size_bytes == cs.size_bytes.max()].pivot_table(index="path", columns="harness",
                                                               values="bandwidth_GBps")
    print(f"\nbandwidth at {cs.size_bytes.max()} B, GB/s:\n{big.round(1).to_string()}")
    print("\nalpha-beta fits:")
    print(fits[["scope", "path", "harness", "variant", "backend", "world_size", "alpha_us", "beta_GBps",
                "median_rel_err", "max_rel_err"]].round(3).to_string(index=False))
    print("\ncollective runs:")
    print(out.collective_runs.drop(columns="message").to_string(index=False))
    for r in out.collective_results:
        if r.status != "ok":
            print(f"  {r.variant}: {r.status}: {r.message[-600:]}")
    if len(out.copy_skipped):
        print("\nskipped:\n" + out.copy_skipped.to_string(index=False))
    t = out.timings_s
    print(f"\nwall time: copies {t['copies']:.1f} s, collectives {t['collectives']:.1f} s, "
          f"suite {wall:.1f} s (goal {goal} s: {'met' if wall <= goal else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
