"""Time one tensor-parallel rank's share of a decode step (helpers.model.step) and print the figures.

On a GPU (default there): the model's real per-rank shapes (GLM-5 at TP8), batches 1-64 at two contexts,
CUDA graphs and eager, each component alone under graphs. On a CPU (default there): the scaled-down
model (data/models/glm5-mini.yaml), eager, plus the two-rank gloo check of the sharded step against the
unsharded one.

    python benchmarks/bench_step.py                         # whatever this machine has
    python benchmarks/bench_step.py --device cuda --out DIR  # write timings.csv, bytes.csv, meta.json
    python benchmarks/bench_step.py --device cpu --check     # CPU, with the sharding and FP8 checks
    python benchmarks/bench_step.py --precision fp8          # FP8 weights (refused where the GPU lacks them)
    python benchmarks/bench_step.py --shared-overlap off     # the shared expert on the same stream
    torchrun --nproc-per-node 8 benchmarks/bench_step.py     # TP8 over 8 GPUs, NCCL inside the step
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from helpers.model import step, steptime


def _ints(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x)


def _points(s: str) -> tuple[tuple[int, int], ...]:
    if s == "none":
        return ()
    return tuple(tuple(int(v) for v in p.split("x")) for p in s.split(","))


def _within(given, default, batches, contexts, flag: str) -> tuple[tuple[int, int], ...]:
    """The batch x context points of `flag`: those given, each refused unless inside the sweep's batches and
    contexts (the caches are built for the largest); or the default ones that are inside (with --contexts 384 the
    default sparse points at 8192 are left out, not run into caches built for 384)."""
    inside = lambda p: p[0] <= max(batches) and p[1] <= max(contexts)  # noqa: E731
    if given is None:
        return tuple(p for p in default if inside(p))
    out = [p for p in given if not inside(p)]
    if out:
        raise ValueError(f"{flag} {','.join(f'{b}x{c}' for b, c in out)}: outside the sweep's largest batch "
                         f"{max(batches)} and context {max(contexts)}; add them to --batches/--contexts or drop them")
    return tuple(given)


def _distributed(device: str):
    """Under torchrun (WORLD_SIZE > 1): one process per rank, NCCL on GPUs, gloo on CPUs."""
    import os

    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None, device
    if device.startswith("cuda"):
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return dist.group.WORLD, device


def main(argv=None) -> int:
    cuda = torch.cuda.is_available()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if cuda else "cpu")
    ap.add_argument("--model", default=None, help="data/models/<name>.yaml (default: glm5 on a GPU, glm5-mini on a CPU)")
    ap.add_argument("--tp", type=int, default=None, help="TP degree whose per-rank shapes are built (default 8; 2 on a CPU)")
    ap.add_argument("--batches", type=_ints, default=None)
    ap.add_argument("--contexts", type=_ints, default=None)
    ap.add_argument("--modes", default=None, help="graph,eager (CPU: eager)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--eager-repeats", type=int, default=3)
    ap.add_argument("--time-limit-s", type=float, default=60.0, help="per point")
    ap.add_argument("--moe-held", type=int, default=None, help="distinct MoE layers to hold (default: as many as fit)")
    ap.add_argument("--no-components", action="store_true")
    ap.add_argument("--op-level", default=None, help="batch x context points timed op by op, e.g. 1x384,64x384 "
                    "(default: those two on a GPU, none on a CPU; 'none' for none)")
    ap.add_argument("--sparse", default=None, help="batch x context points also timed with DSA sparse attention "
                    "(default on a GPU: 1x8192,64x8192; 'none' for none)")
    ap.add_argument("--precision", default="bf16", choices=step.PRECISIONS,
                    help="weights: bf16 (default), fp8 (E4M3 with per-column scales where the device runs "
                         "scaled FP8 products), fp32")
    ap.add_argument("--shared-overlap", default="auto", choices=step.SHARED_OVERLAP,
                    help="the shared expert beside the routed ones on a second CUDA stream (auto: as SGLang, "
                         "on CUDA for up to 1024 tokens)")
    ap.add_argument("--fusion", default="fused", choices=step.FUSIONS,
                    help="fused: the small ops as an engine fuses them (torch.compile on CUDA); unfused: the "
                         "reference chain of torch operators")
    ap.add_argument("--compile", default="auto", choices=("auto", "on", "off"),
                    help="torch.compile the fused ops (auto: on CUDA only)")
    ap.add_argument("--check", action="store_true", help="also run the 2-rank gloo sharding check and the FP8 "
                    "accuracy check on the CPU")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    gpu = a.device.startswith("cuda")
    group, a.device = _distributed(a.device)
    if group is not None and a.tp is None:
        import torch.distributed as dist
        a.tp = dist.get_world_size()
    batches = a.batches or ((1, 2, 4, 8, 16, 32, 64) if gpu else (1, 8))
    contexts = a.contexts or ((384, 8192) if gpu else (96, 384))
    try:
        op_level = _within(_points(a.op_level) if a.op_level else None,
                           ((1, 384), (64, 384)) if gpu else (), batches, contexts, "--op-level")
        sparse = _within(_points(a.sparse) if a.sparse else None,
                         ((1, 8192), (64, 8192)) if gpu else (), batches, contexts, "--sparse")
    except ValueError as e:
        print(f"bench_step: {e}", file=sys.stderr, flush=True)
        return 2
    cfg = steptime.SweepConfig(
        model=a.model or ("glm5" if gpu else "glm5-mini"), tp=a.tp or (8 if gpu else 2),
        batches=batches, contexts=contexts,
        modes=tuple((a.modes or ("graph,eager" if gpu else "eager")).split(",")), device=a.device,
        dtype=a.precision, shared_overlap=a.shared_overlap, fusion=a.fusion, compile=a.compile,
        repeats=a.repeats, eager_repeats=a.eager_repeats, components=not a.no_components,
        time_limit_s=a.time_limit_s, moe_held=a.moe_held,
        op_level=op_level, sparse_points=sparse)
    t0 = time.monotonic()
    try:
        res = steptime.sweep(cfg, a.out, progress=lambda s: print(s, flush=True), group=group)
    except step.StepError as e:          # a precision this device cannot run, a shape, memory: say which
        print(f"bench_step: {e}", file=sys.stderr, flush=True)
        return 2
    # Under torchrun no rank tears its process group down. Measured on two H200s (torch 2.11, NCCL 2.28;
    # helpers.interconnect.worker): once NCCL collectives were captured in CUDA graphs, destroy_process_group
    # never returns; on gloo (CPU, torch 2.13) a rank leaving through the interpreter's exit after the
    # teardown died one run in two with "terminate called without an active exception". Every point is
    # written by then, so after a barrier the other ranks leave at once and rank 0 once it has printed.
    no_teardown = group is not None
    if no_teardown:
        import torch.distributed as dist
        dist.barrier()
        if dist.get_rank():
            sys.stdout.flush(), sys.stderr.flush()
            os._exit(0)
    t = res.timings
    print(f"sweep: {len(t)} rows in {time.monotonic() - t0:.1f} s wall ({res.meta['sweep_s']:.1f} s in sweep), "
          f"precision {cfg.dtype}, experts {res.meta['moe_impl']}, {cfg.fusion}"
          f"{' (compiled)' if res.meta.get('compiled') else ''}: compile {res.meta.get('compile_s', 0):.1f} s "
          f"in {res.meta.get('compiles', 0)} compilations")
    steps = t[t.what == "step"].copy()
    steps["tok_s"] = steps.batch * 1e6 / steps.median_us
    print(steps[["batch", "context", "mode", "attention", "overlap", "median_us", "p10_us", "p90_us", "tok_s",
                 "kernels"]].to_string(index=False))
    by = res.bytes
    if len(by):
        tot = by[by.attention == "dense"].groupby(["context", "batch"])[["bytes_emulated", "bytes_checkpoint"]].sum()
        print(f"MiB read per step ({cfg.dtype} as emulated, and the checkpoint's formats):")
        print((tot / 2**20).round(1).to_string())
    comp = t[(t.what != "step") & ~t.what.str.startswith("op:")]
    if len(comp):
        piv = comp.pivot_table(index=["attention", "context", "batch"], columns="what", values="median_us")
        print("per component, us (alone, " + ("graphs" if gpu else "eager") + "):")
        print(piv.round(1).to_string())
    if a.check:
        t1 = time.monotonic()
        ref = step.unsharded_logits(step.ma.load_model("glm5-mini"), 4, 96)
        out = step.run_sharded("glm5-mini", 2, 4, 96)
        chk = step.compare_logits(ref, out["sharded"])
        print(f"2-rank gloo check: rel err {chk.rel_err:.2e} (tolerance {chk.tolerance:.0e}), tokens agree "
              f"{chk.tokens_agree}: {'ok' if chk.ok else 'FAILED'} in {time.monotonic() - t1:.1f} s")
        t2 = time.monotonic()
        acc = step.fp8_check("glm5-mini", 8, 96)
        print(f"FP8 against fp32 (relative L2 of the logits, fp32's routing; tolerance {step.FP8_TOLERANCE}), "
              f"{time.monotonic() - t2:.1f} s:")
        print(acc[["variant", "rel_l2", "token_agreement", "routing_flips", "ok"]].to_string(index=False))
        if a.out:
            with open(f"{a.out}/check.json", "w") as f:
                json.dump({**chk.__dict__, "ok": chk.ok}, f)
            acc.to_csv(f"{a.out}/fp8_check.csv", index=False)
    if no_teardown:
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
