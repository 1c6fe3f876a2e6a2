"""Correctness checks of the emulated step (computed on the CPU, not measured): the sharded step over gloo
processes against the unsharded one (split rightly and with a classic sharding bug), and the FP8 step
against fp32 (products, whole step, a deliberately wrong scale, and sharded)."""
from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import torch

from .. import arith as ma
from .. import fp8
from .build import RankModel, build_full, convert_model, shard_model
from .decode import DecodeStep
from .shapes import FP8_WEIGHTS, StepError
from .timing import time_point

@dataclass(frozen=True)
class LogitCheck:
    """Two steps' logits against each other: max |got - ref| relative to max |ref| (`rel_err`, metric
    "max": also needs every greedy token equal), or the relative L2 error ||got - ref|| / ||ref||
    (`rel_l2`, metric "l2": for FP8, whose rounding moves near-tied greedy tokens), against `tolerance`."""

    max_abs_err: float
    ref_scale: float
    rel_err: float
    tolerance: float
    tokens_agree: bool
    rel_l2: float = float("nan")
    token_agreement: float = float("nan")    # share of sequences whose greedy token is the same
    metric: str = "max"

    @property
    def ok(self) -> bool:
        if self.metric == "l2":
            return bool(self.rel_l2 <= self.tolerance)
        return bool(self.rel_err <= self.tolerance and self.tokens_agree)


#: tolerance of the sharded-vs-unsharded check in fp32 (summation order differs between the two)
FP32_TOLERANCE = 1e-4
#: tolerance of the FP8 checks: relative L2 error of the logits, with the reference's expert choice
#: (DecodeStep.forced_routing). Measured on the scaled-down model (glm5-mini, batches 4 and 8, context
#: 96, seeds 0-7, torch 2.13 CPU): FP8 against fp32 0.21 to 0.31 (bf16 against fp32: 0.026 to 0.036;
#: one FP8 product alone 0.035 to 0.038, bf16 0.003: six random layers amplify a product's error about
#: eightfold), two gloo ranks in FP8 against one 0.18 to 0.23 (each rank quantizes its own part of a
#: row-parallel input); deliberately wrong scales (each column's scale on its neighbour, one weight's
#: scales doubled) 0.63 to 1.13, a naive gate/up split 1.37.
FP8_TOLERANCE = 0.4
#: tolerance of one FP8 product against fp32 (relative L2 error; measured 0.035 to 0.038, see above)
FP8_PRODUCT_TOLERANCE = 0.05


def compare_logits(ref: torch.Tensor, got: torch.Tensor, tolerance: float = FP32_TOLERANCE,
                   metric: str = "max") -> LogitCheck:
    if tuple(ref.shape) != tuple(got.shape):
        raise StepError(f"logits shapes differ: unsharded {tuple(ref.shape)} vs sharded {tuple(got.shape)}")
    if metric not in ("max", "l2"):
        raise StepError(f"metric {metric!r}: expected 'max' or 'l2'")
    r, g = ref.double(), got.double()
    if not (torch.isfinite(r).all() and torch.isfinite(g).all()):
        return LogitCheck(float("inf"), float(r.abs().max()), float("inf"), tolerance, False, float("inf"), 0.0,
                          metric)
    err = float((r - g).abs().max())
    scale = float(r.abs().max()) or 1.0
    same = r.argmax(-1) == g.argmax(-1)
    l2 = float((r - g).norm() / (r.norm() or 1.0))
    return LogitCheck(err, scale, err / scale, tolerance, bool(same.all()), l2, float(same.double().mean()), metric)


def unsharded_logits(m: ma.ModelConfig, batch: int, context: int, seed: int = 0, moe_held: int | None = None,
                     attention: str = "dense", precision: str = "fp32", act: str | None = None,
                     forced_routing: list[torch.Tensor] | None = None, routing: list | None = None) -> torch.Tensor:
    """The unsharded step's logits in `precision` (the same seeded weights whatever the precision: see
    convert_model); with `forced_routing`, the experts chosen there; `routing` (a list) receives the
    expert ids each MoE layer chose."""
    full = build_full(m, batch, context, "fp32", seed, moe_held)
    if precision != "fp32":
        full = convert_model(full, precision, act)
    st = DecodeStep(full, batch, context, attention=attention)
    st.forced_routing = forced_routing
    st.record_routing = routing is not None
    st.run()
    if routing is not None:
        routing.extend(r.clone() for r in st.routing)
    return st.logits().float().clone()


def _rank_main(rank: int, world: int, init_file: str, out_dir: str, model_key: str, batch: int, context: int,
               seed: int, moe_held, variants, timing, precision: str = "fp32", act: str | None = None,
               forced_routing=None) -> None:
    import torch.distributed as dist

    from helpers.core import procs

    procs.die_with_parent()   # a rank dies with the process that started it (kill -9 included)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        m = ma.load_model(model_key)
        full = build_full(m, batch, context, "fp32", seed, moe_held)
        if precision != "fp32":
            full = convert_model(full, precision, act)
        out = {}
        for name, overrides in variants:
            rm = shard_model(full, world, rank, overrides)
            st = DecodeStep(rm, batch, context, group=dist.group.WORLD)
            st.forced_routing = forced_routing
            st.run()
            out[name] = st.logits().float().clone()
            if timing and name == variants[0][0]:
                dist.barrier()
                out["timing"] = time_point(st, graphs=False, repeats=timing, warmup=1, components=True,
                                           barrier=dist.barrier)
        if rank == 0:
            torch.save(out, Path(out_dir) / "rank0.pt")
        dist.barrier()
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    # No teardown: on gloo (torch 2.13, CPU) a rank leaving through the interpreter's exit after
    # destroy_process_group died one run in several with "terminate called without an active exception"
    # (SIGABRT). Every result is written and every rank is past the barrier, so each leaves at once.
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)


def rank_context(mp):
    """The ranks' start method: a fork server that has imported this package (torch and the step) once, so
    each launch forks ranks that start at once instead of two fresh interpreters importing torch on the
    same cores (seconds each launch on the 2-core machine; issue 37). The server is the interpreter's one
    fork server, started at the first launch; it runs no torch op, so its forks start with a clean thread
    pool. Where the platform has none, spawn."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["helpers.model.step"])
    return ctx


def run_sharded(model_key: str, tp: int, batch: int, context: int, seed: int = 0, moe_held: int | None = None,
                variants: list[tuple[str, dict | None]] | None = None, timing_repeats: int = 0,
                timeout_s: float = 120.0, precision: str = "fp32", act: str | None = None,
                forced_routing: list[torch.Tensor] | None = None) -> dict:
    """The step over `tp` real processes on the CPU (torch.multiprocessing, gloo), each cutting its shard
    from the same seeded full model (in `precision`: see convert_model); returns rank 0's gathered logits
    per variant (and, with `timing_repeats`, its eager timings with the collectives in)."""
    import torch.multiprocessing as mp

    variants = variants or [("sharded", None)]
    with tempfile.TemporaryDirectory(prefix="step-ranks-") as tmp:
        init = os.path.join(tmp, "init")
        ctx = rank_context(mp)
        procs = [ctx.Process(target=_rank_main, args=(r, tp, init, tmp, model_key, batch, context, seed, moe_held,
                                                      variants, timing_repeats, precision, act, forced_routing)) for r in range(tp)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout_s)
        alive = [p for p in procs if p.is_alive()]
        for p in alive:
            p.kill()
        bad = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode != 0]
        if alive or bad:
            raise StepError(f"the {tp}-rank step over gloo failed: ranks still running after {timeout_s:.0f} s: "
                            f"{[procs.index(p) for p in alive]}; exit codes {bad}")
        return torch.load(Path(tmp) / "rank0.pt")


#: A classic sharding bug: the fused gate/up weights split as one block (gate and up cut apart) instead of
#: each half on its own (shard_model's overrides, per weight name).
NAIVE_GATE_UP = {"w13": ("dim", 2), "s_w13": ("dim", 1), "d_w13": ("dim", 1)}


def sharding_check(model_key: str, batch: int, context: int, tp: int = 2, timing_repeats: int = 3
                   ) -> tuple[pd.DataFrame, list[dict]]:
    """The sharded step over `tp` gloo processes against the unsharded one, split rightly and with
    NAIVE_GATE_UP: one row per variant ('right', 'naive gate_up') with the LogitCheck fields and `ok`, and
    rank 0's eager timings of the right split (step.timing.time_point rows, collectives included)."""
    ref = unsharded_logits(ma.load_model(model_key), batch, context)
    ranks = run_sharded(model_key, tp, batch, context, variants=[("right", None), ("naive gate_up", NAIVE_GATE_UP)],
                        timing_repeats=timing_repeats)
    checks = {v: compare_logits(ref, ranks[v]) for v in ("right", "naive gate_up")}
    return pd.DataFrame([{"variant": v, **c.__dict__, "ok": c.ok} for v, c in checks.items()]), ranks["timing"]


# --------------------------------------------------------------------------------------------------
# Correctness of the FP8 step: against fp32, and a deliberately wrong scale


def shift_scales(rm: RankModel) -> RankModel:
    """A deliberately wrong FP8 model: every FP8 weight's column scales moved one column on (the scale of
    column n applied to column n + 1), the values untouched."""
    def shift(d):
        return {k: fp8.QWeight(v.q, v.scale.roll(1, -1).contiguous()) if isinstance(v, fp8.QWeight) else v
                for k, v in d.items()}
    if rm.dtype != "fp8":
        raise StepError(f"shift_scales needs an FP8 model; this one is {rm.dtype}")
    return replace(rm, layers=[shift(L) for L in rm.layers])


def _routing_flips(ref: list[torch.Tensor], got: list[torch.Tensor]) -> float:
    """Share of (sequence, MoE layer) pairs whose set of chosen experts differs."""
    diff = [(a.sort(-1).values != b.sort(-1).values).any(-1).double().mean() for a, b in zip(ref, got)]
    return float(torch.stack(diff).mean()) if diff else 0.0


#: the variants fp8_check compares with fp32: (name, precision, activation dtype, wrong scales)
FP8_CHECK_VARIANTS = (("bf16", "bf16", "bf16", False), ("fp8", "fp8", "bf16", False),
                      ("fp8, fp32 activations", "fp8", "fp32", False),
                      ("fp8, scales shifted one column", "fp8", "bf16", True))


def fp8_check(model_key: str, batch: int, context: int, seed: int = 0) -> pd.DataFrame:
    """The unsharded step in bf16 and in FP8 against fp32, on the CPU (computed, not measured): one row per
    FP8_CHECK_VARIANTS entry with the LogitCheck fields (metric "l2", the reference's expert choice forced,
    tolerance FP8_TOLERANCE; bf16's row holds it to the same), `ok`, and `routing_flips`: with its own
    routing, the share of (sequence, MoE layer) choices of experts that differ from fp32's."""
    m = ma.load_model(model_key)
    full = build_full(m, batch, context, "fp32", seed)

    def run(rm, forced=None):
        st = DecodeStep(rm, batch, context)
        st.forced_routing, st.record_routing = forced, True
        st.run()
        return st.logits().float().clone(), [r.clone() for r in st.routing]

    ref, ref_routing = run(full)
    rows = []
    for name, precision, act, wrong in FP8_CHECK_VARIANTS:
        rm = convert_model(full, precision, act)
        if wrong:
            rm = shift_scales(rm)
        got, _ = run(rm, ref_routing)
        _, own = run(rm)
        chk = compare_logits(ref, got, FP8_TOLERANCE, metric="l2")
        rows.append({"variant": name, "precision": precision, "activations": act, **chk.__dict__, "ok": chk.ok,
                     "routing_flips": _routing_flips(ref_routing, own)})
    return pd.DataFrame(rows)


def fp8_product_errors(model_key: str, rows: int = 16, seed: int = 0) -> pd.DataFrame:
    """Each FP8 weight of the model's first dense and first MoE layer (an expert's: the first) times random
    activation rows: the relative L2 error of the FP8 product (weights and rows quantized) and of the bf16
    product against fp32 (computed, on the CPU)."""
    m = ma.load_model(model_key)
    full = build_full(m, 1, 1, "fp32", seed, moe_held=1)
    g = torch.Generator().manual_seed(seed)
    out = []
    seen = set()
    for L in full.layers:
        for name in sorted(FP8_WEIGHTS & set(L) - seen):
            seen.add(name)
            w = L[name][0] if L[name].dim() == 3 else L[name]
            x = torch.randn(rows, w.shape[0], generator=g)
            ref = x @ w
            xq, s = fp8.quantize_rows(x)
            y8 = fp8.linear(xq, s, fp8.quantize(w, name), torch.float32)
            y16 = (x.bfloat16() @ w.bfloat16()).float()
            err = lambda y: float((y - ref).norm() / ref.norm())  # noqa: E731
            out.append({"weight": name, "k": int(w.shape[0]), "n": int(w.shape[1]), "fp8_rel_l2": err(y8),
                        "bf16_rel_l2": err(y16), "tolerance": FP8_PRODUCT_TOLERANCE,
                        "ok": err(y8) <= FP8_PRODUCT_TOLERANCE})
    return pd.DataFrame(out)


def fp8_sharding_check(model_key: str, batch: int, context: int, tp: int = 2, seed: int = 0) -> pd.DataFrame:
    """The sharded FP8 step over `tp` gloo processes (fp32 activations, so that only FP8 and the split
    differ) against the unsharded FP8 step, both with the unsharded step's expert choice: one row per
    variant ('right', 'naive gate_up') with the LogitCheck fields (metric "l2", FP8_TOLERANCE) and `ok`.
    Each rank quantizes its own part of a row-parallel input, as a serving engine does, so the right split
    differs from one rank by FP8 rounding, not by 1e-4."""
    m = ma.load_model(model_key)
    routing: list = []
    ref = unsharded_logits(m, batch, context, seed, precision="fp8", act="fp32", routing=routing)
    ranks = run_sharded(model_key, tp, batch, context, seed, precision="fp8", act="fp32", forced_routing=routing,
                        variants=[("right", None), ("naive gate_up", NAIVE_GATE_UP)])
    checks = {v: compare_logits(ref, ranks[v], FP8_TOLERANCE, metric="l2") for v in ("right", "naive gate_up")}
    return pd.DataFrame([{"variant": v, **c.__dict__, "ok": c.ok} for v, c in checks.items()])
