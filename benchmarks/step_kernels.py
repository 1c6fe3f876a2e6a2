"""Which kernels each op of the decode step launches: after one step has compiled, each op is run alone
over every layer under torch.profiler and its GPU kernels are listed by name, per step, beside the CUDA
graph's kernel count of the whole step (helpers.model.steptime.graph_kernels). It says where a step's kernel
count comes from, op by op, which the sweep's counts (per component and op, from the graph) do not.

    PYTHONPATH=src python3 benchmarks/step_kernels.py [--precision fp8] [--batch 1] [--context 384]
        [--fusion fused] [--out kernels.csv]

Needs a CUDA GPU (GLM-5's TP8 per-rank shapes, as benchmarks/bench_step.py builds them); about a minute on
the H200, most of it compilation. Kernel names are the profiler's (Triton kernels carry Inductor's or this
repository's function names; cuBLAS kernels their library names); memory copies and sets are listed too.
"""
from __future__ import annotations

import argparse
import collections
import csv
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from helpers.model import steptime  # noqa: E402
from helpers.model.step import DecodeStep  # noqa: E402


def op_kernels(st: DecodeStep, name: str | None) -> collections.Counter:
    """GPU activities (kernels, copies, sets) one run of op `name` (None: the whole step) launches."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        st.run() if name is None else st.run(ops=[name])
        torch.cuda.synchronize()
    return collections.Counter(e.name for e in prof.events() if e.device_type.name == "CUDA")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=384)
    ap.add_argument("--fusion", default="fused")
    ap.add_argument("--out", default=None, help="CSV of op, kernel, launches per step")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("step_kernels: needs a CUDA GPU (the lent nvidia-h200); none here", file=sys.stderr)
        return 2
    cfg = steptime.SweepConfig(dtype=a.precision, batches=(a.batch,), contexts=(a.context,), modes=("graph",),
                               fusion=a.fusion)
    rm, _ = steptime.one_rank(cfg)
    st = DecodeStep(rm, a.batch, a.context, fusion=a.fusion)
    for _ in range(2):          # the first compiles
        st.run()
    g = steptime.capture(st.run)
    graph = steptime.graph_kernels(g)
    whole = op_kernels(st, None)
    rows, total = [], 0
    for name in st.op_names():
        c = op_kernels(st, name)
        n = sum(c.values())
        total += n
        print(f"{name:40s} {n:5d}  " + "; ".join(f"{k[:60]} x{v}" for k, v in c.most_common(4)))
        rows += [{"op": name, "kernel": k, "launches": v} for k, v in sorted(c.items())]
    print(f"step: {sum(whole.values())} GPU activities profiled eagerly ({total} op by op); "
          f"{graph} kernel nodes in its CUDA graph; {a.precision}, batch {a.batch}, context {a.context}, "
          f"{a.fusion}, experts {st.moe_impl}")
    if a.out:
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["op", "kernel", "launches"])
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
