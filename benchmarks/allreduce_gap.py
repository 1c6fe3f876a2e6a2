"""Where a small all-reduce's time goes when torch.distributed and nccl-tests disagree (issue 4, fidelity).

    python3 benchmarks/allreduce_gap.py --build BUILD --out OUTDIR      # on a host with >= 2 GPUs

BUILD is benchmarks/fidelity/build.sh's output (all_reduce_perf and all_reduce_perf_mpi). On two H200s
our graph harness (torch.distributed all_reduce captured in one CUDA graph, host timer) came out ~3 us
per call slower than nccl-tests `-t 2 -g 1 -G 1` below 1 MiB. The suspects, each measured here on the
same sizes (--min to --max bytes, x2) for each block length (--iters: collectives per CUDA graph):

  start skew      every rank of ours launches at one shared deadline (`aligned`); each point records the
                  measured launch skew between ranks. Skew s adds about s / (2 n) us per call to a
                  rank-averaged block of n calls.
  graph mixing    NCCL_GRAPH_MIXING_SUPPORT=0 for ours and the tool: NCCL then stops serializing each
                  captured collective against the communicator's other work.
  launch shape    nccl-tests with one thread per GPU in one process (-t N -g 1) and with one process
                  per GPU (-np N: built against benchmarks/fidelity/mpishim), which is ours (--shapes).
  the stream      ours with the graph launched on the legacy default stream (what a torch program does
                  unless it picks a stream, and what our worker did before) and on a stream created
                  non-blocking, as nccl-tests creates its streams.
  the call        ours issuing ncclAllReduce itself on a communicator of its own (helpers.interconnect.nccl, as
                  sglang's pynccl does) instead of torch.distributed's all_reduce.
  the idle GPU    an aligned start keeps the GPU idle for the deadline's lead (2 ms in the arms above,
                  helpers.interconnect.method.LEGACY_LEAD_US, so runs stay comparable) before each
                  timed block, which a barrier start and nccl-tests do not: ours with leads --leads us
                  apart, and ours launched as each rank's barrier returns (torch.distributed, default
                  setting, non-blocking stream). If the time per call grows with the lead, the idle gap
                  is what an aligned start pays.

Both sides rotate buffers within --max bytes and time in place; the tool runs --tool-repeats times and
its median is used. Writes OUTDIR/allreduce_gap.csv (one row per size, block length, method and NCCL
setting: median time, p10, p90, and for ours the launch skew; each of our rows carries its
helpers.interconnect.method.Method, label and fields: helpers.interconnect.fidelity.GAP_COLUMNS) and the
tool's raw outputs; prints the median per-call gap to the one-process-per-GPU tool at sizes below 64 KiB.
Run it with the package importable (`pip install -e . --no-deps`, or PYTHONPATH=src). The committed runs
are under data/measured/ (data/sources.yaml, roles allreduce-gap-*); the first one (start skew and launch
shape, 2.4 us of skew against 0.2 us and no change in the gap) is in git history at d508f9b.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from helpers.interconnect import collectives, copies as copybench, fidelity, settings
from helpers.interconnect.method import COLUMNS as METHOD_COLUMNS, LEGACY_LEAD_US, Method

SETTINGS = ("default", "GRAPH_MIXING_SUPPORT=0")    # names of helpers.interconnect.settings.VARIANTS


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="benchmarks/fidelity/build.sh's build directory")
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", default="20,200", help="block lengths (collectives per CUDA graph)")
    ap.add_argument("--min", default="8")
    ap.add_argument("--max", default="1MiB")
    ap.add_argument("--repeats", type=int, default=7, help="timed blocks per point (ours)")
    ap.add_argument("--tool-repeats", type=int, default=3)
    ap.add_argument("--leads", default="200,2000,20000",
                    help="aligned start: deadline leads in us, each one an arm of ours besides the other aligned "
                         "arms' (helpers.interconnect.method.LEGACY_LEAD_US)")
    ap.add_argument("--shapes", default="procs", help="nccl-tests launch shapes: procs (-np N -g 1), threads "
                                                       "(-t N -g 1), or both, comma-separated")
    a = ap.parse_args(argv)
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        print(f"allreduce_gap: needs two GPUs or more; torch sees {n}", file=sys.stderr)
        return 2
    bins = {"threads": Path(a.build) / "nccl-tests" / "all_reduce_perf",
            "procs": Path(a.build) / "nccl-tests" / "all_reduce_perf_mpi"}
    shapes = [x.strip() for x in a.shapes.split(",") if x.strip()]
    if not shapes or set(shapes) - set(bins):
        print(f"allreduce_gap: --shapes {a.shapes!r}: choose from {sorted(bins)}", file=sys.stderr)
        return 2
    missing = [str(bins[x]) for x in shapes if not bins[x].is_file()]
    if missing:
        print(f"allreduce_gap: {missing} missing; build them with benchmarks/fidelity/build.sh", file=sys.stderr)
        return 2
    try:
        iters_list = [int(x) for x in a.iters.split(",") if x.strip()]
        leads = [int(x) for x in a.leads.split(",") if x.strip()]
        sizes = copybench.sweep_sizes(a.min, a.max, 2, multiple_of=4)
    except (ValueError, copybench.SizeError) as e:
        print(f"allreduce_gap: {e}", file=sys.stderr)
        return 2
    if leads and min(leads) < 1:
        print(f"allreduce_gap: --leads {a.leads!r} must list leads of 1 us or more, e.g. 200,2000", file=sys.stderr)
        return 2
    if not iters_list or min(iters_list) < 1:
        print(f"allreduce_gap: --iters {a.iters!r} must list block lengths >= 1, e.g. 20,200", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rot = max(sizes)
    rows, t_all = [], time.perf_counter()

    def add(it, setting, size, times, skew=None, method: Method | None = None, shape: str = ""):
        t = np.asarray(times, float)
        who = {"who": "ours", "tool_shape": None, **method.as_row()} if method is not None else {
            "who": "nccl-tests", "tool_shape": shape, **{c: None for c in METHOD_COLUMNS}, "method": f"nccl-tests {shape}"}
        rows.append({"iters": it, **who, "nccl_setting": setting, "size_bytes": int(size),
                     "time_us": float(np.median(t)), "time_us_p10": float(np.percentile(t, 10)),
                     "time_us_p90": float(np.percentile(t, 90)),
                     "start_skew_us": float(np.median(skew)) if skew else np.nan})

    # every arm of ours: one CUDA graph of `it` all-reduces, nccl-tests' host clock, buffers rotating within
    # the largest size; (NCCL setting, method)
    g = Method(harness="graph", timer="host", rotate_bytes=rot, start="aligned", start_lead_us=LEGACY_LEAD_US)
    arms = [("default", g.but(stream="legacy")), ("default", g), ("GRAPH_MIXING_SUPPORT=0", g),
            ("default", g.but(api="nccl")), ("GRAPH_MIXING_SUPPORT=0", g.but(api="nccl"))]
    arms += [("default", g.but(start_lead_us=lead)) for lead in leads if lead != LEGACY_LEAD_US]
    arms += [("default", g.but(start="barrier"))]
    for it in iters_list:
        for setting, m in arms:
            t0 = time.perf_counter()
            r = collectives.run_collectives("nccl", n, sizes, ops=("all_reduce",), warmup=5, iters=it,
                                            repeats=a.repeats, timeout_s=300, env=settings.env(setting, settings.VARIANT_SWEEP),
                                            workdir=out / "points", method=m)
            print(f"ours {m.label} {setting} iters={it}: {r.status}, {len(r.rows)} points in "
                  f"{time.perf_counter() - t0:.1f} s {r.message[-600:]}", flush=True)
            for p in r.rows:
                add(it, setting, p["size_bytes"], p["times_us"], p.get("start_skew_us"), method=m)
        for shape, setting in [(s, x) for s in shapes for x in SETTINGS]:
            args = ["-b", str(min(sizes)), "-e", str(rot), "-f", "2", "-g", "1", "-G", "1", "-n", str(it), "-w", "5"]
            runs = []
            for k in range(a.tool_repeats):
                env = {**os.environ, **settings.TOOL_ENV, **settings.env(setting, settings.VARIANT_SWEEP)}
                if shape == "threads":
                    p = subprocess.run([str(bins[shape]), "-t", str(n)] + args, capture_output=True, text=True,
                                       timeout=300, env=env)
                    rc, text = p.returncode, p.stdout + p.stderr
                else:
                    rc, text = fidelity.run_processes([str(bins[shape])] + args, n, 300, env)
                name = f"nccl_tests_{shape}_{collectives.slug(setting)}_n{it}_r{k + 1}.txt"
                (out / name).write_text(text)
                print(f"nccl-tests {shape} {setting} -n {it} run {k + 1}: rc {rc}", flush=True)
                try:
                    runs.append(fidelity.parse_nccl_tests(text).set_index("size_bytes")["ip_time_us"])
                except fidelity.ToolOutputError as e:
                    print(f"  {e}", flush=True)
            if runs:
                tool_shape = f"-t {n} -g 1" if shape == "threads" else f"-np {n} -g 1"
                for size, v in pd.concat(runs, axis=1).iterrows():
                    add(it, setting, size, v.to_numpy(float), shape=tool_shape)
    df = pd.DataFrame(rows)
    df["gpus"] = n
    df["device"] = f"{n}x {torch.cuda.get_device_name(0)}"
    df["kind"] = "measured"
    df.to_csv(out / "allreduce_gap.csv", index=False)
    pd.set_option("display.width", 200)
    print(fidelity.gap_summary(df).to_string(index=False))
    print(f"allreduce_gap: {len(df)} rows in {time.perf_counter() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
