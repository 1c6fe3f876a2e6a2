"""What the decode-step chapter reads off a step measurement (helpers.model.measured.StepMeasurement):
the bytes it reads, the step against batch, its split by component with achieved bandwidth, graphs against
eager, its kernels beside SGLang's, and what each tuning the investigation tried could at most have
changed. Every pick raises MeasuredBudgetError (or helpers.core.pick.PickError) naming the
row it could not find. Functions named `*_values` return the glue keys the chapter's prose cites (the
fields of the dataclasses in helpers.chapters.decode_step.values); the sentences that depend on the
machine (`check_text`, `cpu_text`) are chosen here as whole variants."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from helpers.core.pick import one, rows
from helpers.model import arith as ma
from helpers.model import budget as bd
from helpers.model import measured as mb
from helpers.model import step as stp
from helpers.model import steptime

CHAPTER = mb.STEP_CHAPTER
#: the batches the bytes table and its sentences cite
BYTES_BATCHES = (1, 64)

SPLIT = ("attention", "indexer", "moe", "shared/dense MLP", "norms and small ops", "lm_head")


def steps(meas: mb.StepMeasurement, attention: str = "dense") -> pd.DataFrame:
    """Whole-step rows: batch, context, mode, median/p10/p90 (ms), tokens/s (aggregate and per stream)."""
    t = meas.timings
    s = t[(t["what"] == "step") & (t["attention"] == attention)].copy()
    if not len(s):
        raise mb.MeasuredBudgetError(f"{meas.where}: no whole-step rows (what = 'step', attention {attention})")
    out = pd.DataFrame({"batch": s["batch"].astype(int), "context": s["context"].astype(int), "mode": s["mode"],
                        "step_ms": s["median_us"] / 1e3, "p10_ms": s["p10_us"] / 1e3, "p90_ms": s["p90_us"] / 1e3,
                        "kernels": s["kernels"]})
    out["tok_s"] = out["batch"] * 1e3 / out["step_ms"]
    out["tok_s_per_stream"] = 1e3 / out["step_ms"]
    return out.sort_values(["context", "mode", "batch"]).reset_index(drop=True)


def step_ms(meas: mb.StepMeasurement, batch: int, context: int, mode: str = "graph") -> float:
    return float(meas.row(batch, context, "step", mode)["median_us"]) / 1e3


def split(meas: mb.StepMeasurement, batch: int, context: int, peak_GBps: float | None = None) -> pd.DataFrame:
    """Each component alone (graphs): time, share of the sum of components, kernels, launch floor
    (kernels x the floor, measured), bytes read (emulated precision, derived), achieved GB/s and the share
    of `peak_GBps` that is."""
    floor = meas.floor_us()
    rows = []
    for c in SPLIT:
        r = meas.row(batch, context, c)
        by = meas.component_bytes(batch, context, c)
        us = float(r["median_us"])
        k = float(r["kernels"]) if pd.notna(r["kernels"]) else np.nan
        rows.append({"component": c, "time_us": us, "kernels": k, "launch_floor_us": k * floor,
                     "bytes_read_MiB": float(by["bytes_emulated"]) / 2**20,
                     "bytes_checkpoint_MiB": float(by["bytes_checkpoint"]) / 2**20,
                     "achieved_GBps": float(by["bytes_emulated"]) / us / 1e3})
    df = pd.DataFrame(rows)
    df["share"] = df["time_us"] / df["time_us"].sum()
    if peak_GBps:
        df["share_of_peak"] = df["achieved_GBps"] / peak_GBps
    return df


def graphs_vs_eager(meas: mb.StepMeasurement, context: int) -> pd.DataFrame:
    s = steps(meas)
    s = s[s["context"] == context]
    g = s[s["mode"] == "graph"].set_index("batch")["step_ms"]
    e = s[s["mode"] == "eager"].set_index("batch")["step_ms"]
    if not len(g) or not len(e):
        raise mb.MeasuredBudgetError(f"{meas.where}: needs both graph and eager steps at context {context}")
    out = pd.DataFrame({"graph_ms": g, "eager_ms": e}).dropna().reset_index()
    out["launch_gap_ms"] = out["eager_ms"] - out["graph_ms"]
    out["gap_share_of_eager"] = out["launch_gap_ms"] / out["eager_ms"]
    return out


#: the CUDA-graph bound's row at the launch costs the diagnosis assumes for the recorded host (site-read6 R2)
GRAPHS_ASSUMED = "CUDA graphs (assumed launch costs)"
#: the same bound at the launch costs measured on this run's host (the decode-step measurement's)
GRAPHS_HERE = "CUDA graphs (this host's launch costs)"


def tuning_bounds(meas: mb.StepMeasurement, moe_ms: float, kernels_per_step: int, observed_step_ms: float,
                  assumed_launch_us: tuple[float, float] | None = None) -> pd.DataFrame:
    """The most each tuning the investigation tried could have sped up a step of `observed_step_ms` (the
    recorded VM's), derived: the MoE runner acts on the MoE block only (`moe_ms`, its time on the
    recorded GPU); CUDA graphs on launch costs only (`kernels_per_step` x the eager-minus-graph cost per
    kernel measured here, this host's); the memory fraction on none of a step's work (it sizes the KV cache).
    `assumed_launch_us` (eager, graph): the per-kernel costs the diagnosis assumes for the recorded host; the same
    bound at those is a row of its own (site-read6 R2: the diagnosis does not put this host's in)."""
    if observed_step_ms <= 0:
        raise mb.MeasuredBudgetError(f"observed step {observed_step_ms} ms: expected a positive time")
    eager = meas.meta.get("eager_us_per_kernel")
    if not eager:
        raise mb.MeasuredBudgetError(f"{meas.where}: no eager launch cost (meta eager_us_per_kernel)")
    launch_ms = kernels_per_step * (float(eager) - meas.floor_us()) / 1e3
    rows = [
        {"tuning": "MoE runner", "acts_on": "the MoE block", "removable_ms": moe_ms,
         "basis": "the MoE block's time on the recorded GPU (measured kernels)"},
        {"tuning": GRAPHS_HERE, "acts_on": "kernel launch costs", "removable_ms": launch_ms,
         "basis": "kernels per step x (eager - graph) cost per kernel measured here (this host's)"},
        {"tuning": "--mem-fraction-static", "acts_on": "KV-cache capacity, not a step's work", "removable_ms": 0.0,
         "basis": "no term of the step depends on it"},
    ]
    if assumed_launch_us is not None:
        eager_a, graph_a = assumed_launch_us
        rows.insert(2, {"tuning": GRAPHS_ASSUMED, "acts_on": "kernel launch costs",
                        "removable_ms": kernels_per_step * (eager_a - graph_a) / 1e3,
                        "basis": "kernels per step x (eager - graph) cost per kernel the diagnosis assumes for the "
                                 "recorded host"})
    df = pd.DataFrame(rows)
    left = (observed_step_ms - df["removable_ms"]).clip(lower=1e-9)
    df["max_speedup"] = observed_step_ms / left
    df["share_of_observed_step"] = df["removable_ms"] / observed_step_ms
    return df


# --------------------------------------------------------------------------------------------------
# The chapter's sweep, and what its prose cites


def sweep_config(p: Mapping, gpu: bool) -> steptime.SweepConfig:
    """The chapter's sweep from its parameters `p`: on a GPU the model at its TP degree, every batch and
    context, op by op at the first context's smallest and largest batch, DSA sparse at the longest context;
    on a CPU the scaled-down model over 2 ranks' shapes, eagerly."""
    if gpu:
        ctx, bmax = p["contexts"][0], max(p["batches"])
        return steptime.SweepConfig(model=p["model"], tp=p["tp"], batches=tuple(p["batches"]),
                                    contexts=tuple(p["contexts"]), device="cuda", time_limit_s=p["time_limit_s"],
                                    op_level=((1, ctx), (bmax, ctx)),
                                    sparse_points=tuple((b, max(p["contexts"])) for b in (1, bmax)),
                                    shared_overlap=p.get("shared_overlap", "auto"),
                                    fusion=p.get("fusion", "fused"),
                                    modes=("graph", "eager") if p.get("eager", "on") == "on" else ("graph",))
    return steptime.SweepConfig(model=p["cpu_model"], tp=2, batches=tuple(p["cpu_batches"]),
                                contexts=tuple(p["cpu_contexts"]), modes=("eager",), device="cpu", repeats=3,
                                eager_repeats=3, time_limit_s=p["time_limit_s"], op_level=(),
                                fusion=p.get("fusion", "fused"))


def shape_values(m: ma.ModelConfig, tp: int) -> dict:
    """The model's shapes and one rank's share of them."""
    sh = stp.shard_sizes(m, tp)
    return {"dense_layers": m.dense_layers, "heads": m.heads, "heads_rank": sh.heads, "inter": m.moe_intermediate,
            "inter_rank": sh.moe_inter, "moe_layers": m.moe_layers}


def dense_bytes(meas: mb.StepMeasurement, context: int, batches=BYTES_BATCHES) -> pd.DataFrame:
    by = rows(meas.bytes, f"{meas.where}: the step's bytes", context=context, attention="dense")
    missing = sorted(set(batches) - set(by["batch"]))
    if missing:
        raise mb.MeasuredBudgetError(f"{meas.where}: no byte rows for batch(es) {missing} at context {context}; "
                                     f"batches there: {sorted(by['batch'].unique())}")
    return by


def bytes_table(meas: mb.StepMeasurement, context: int, batches=BYTES_BATCHES) -> pd.DataFrame:
    """GiB one rank reads per component (and in total) at `batches`, emulated and at checkpoint precision."""
    by = dense_bytes(meas, context, batches)
    b = by.pivot_table(index="component", columns="batch", values=["bytes_emulated", "bytes_checkpoint"], sort=False)
    out = pd.DataFrame({f"{k} GiB @{n}": b[(k, n)] / ma.GiB for k in ("bytes_emulated", "bytes_checkpoint")
                        for n in batches})
    out.loc["total"] = out.sum()
    return out


def bytes_values(meas: mb.StepMeasurement, context: int, batches=BYTES_BATCHES) -> dict:
    """Total GiB read (emulated, checkpoint), the datasheet time of the emulated bytes (a bound), the
    experts the batch touched, the GPU's datasheet bandwidth, and the memory plan (MoE layers held)."""
    by = dense_bytes(meas, context, batches)
    peak = meas.peak()
    tot = by.groupby("batch")[["bytes_emulated", "bytes_checkpoint"]].sum()
    plan = meas.meta_value("plan")
    out = {"ctx": context, "peak_name": mb.spec_name(meas.device), "peak_GBps": peak.value,
           "moe_held": int(plan["moe_held"]), "held_gib": float(plan["needed_bytes"]) / ma.GiB}
    for b in batches:
        out[f"gib_emul_{b}"] = float(tot.loc[b, "bytes_emulated"]) / ma.GiB
        out[f"gib_ckpt_{b}"] = float(tot.loc[b, "bytes_checkpoint"]) / ma.GiB
        out[f"bound_ms_{b}"] = float(tot.loc[b, "bytes_emulated"]) / (peak.value * 1e9) * 1e3
        out[f"experts_{b}"] = float(by.loc[by["batch"] == b, "distinct_experts"].iloc[0])
    return out


CHECK_NOT_RUN = ("This run did not execute the two-rank check (it runs on CPU machines in mode auto, and in the "
                 "test suite: tests/test_step.py).")
CHECK_RAN = ("On this CPU, two gloo ranks gave the unsharded logits to a relative error of {rel:.1e} (tolerance "
             "{tol:.0e}, greedy tokens {tokens}): {verdict}; the naive gate/up split was off by {wrong:.2f} and "
             "{caught}.")


def check_text(check: pd.DataFrame | None) -> str:
    """The two-rank check's sentence (step.sharding_check's table), or that this run did not make it."""
    if check is None:
        return CHECK_NOT_RUN
    r = one(check, "the sharding check", variant="right")
    w = one(check, "the sharding check", variant="naive gate_up")
    return CHECK_RAN.format(rel=r.rel_err, tol=r.tolerance, tokens="equal" if r.tokens_agree else "different",
                            verdict="pass" if r.ok else "FAIL", wrong=w.rel_err,
                            caught="was caught" if not w.ok else "was NOT caught")


CPU_TEXT = ("On this machine ({device}) the scaled-down model's step took {points} (eager, {sweep_s:.1f} s for the "
            "sweep), and {rank_ms:.1f} ms on each of two gloo ranks at batch {batch}, {coll_ms:.1f} ms of it in the "
            "collectives: these exercise the code, not GLM-5's speed.")


def cpu_text(sweep: "steptime.SweepResult | None", rank_timing: list[dict] | None, batch: int) -> str:
    """What the scaled-down model's CPU sweep (steptime.sweep's result) and the two gloo ranks' timing
    (step.sharding_check's) took; empty where this run timed no CPU."""
    if sweep is None or rank_timing is None:
        return ""
    meta = sweep.meta
    cs = steps(mb.StepMeasurement(sweep.timings, sweep.bytes, meta, "this run", meta["device_name"], ""))
    two = pd.DataFrame(rank_timing).set_index("what")["median_us"]
    missing = [w for w in ("step", "collectives") if w not in two.index]
    if missing:
        raise mb.MeasuredBudgetError(f"the two-rank timing has no row for {missing}; it has {sorted(two.index)}")
    return CPU_TEXT.format(device=meta["device_name"], sweep_s=float(meta["sweep_s"]),
                           points=", ".join(f"{r.step_ms:.1f} ms at batch {r.batch}" for r in cs.itertuples()),
                           rank_ms=float(two["step"]) / 1e3, batch=batch, coll_ms=float(two["collectives"]) / 1e3)


SPARSE_TEXT = ("it {verb} {saved:.0f} ms ({saved_pct:.0f} %). Its attention reads {bytes_pct:.0f} % fewer bytes and "
               "takes {att_pct:.0f} % less time{why}")
#: the clause after the sparse sentence, by whether attention's time fell less than its bytes (the rule)
SPARSE_WHY = {True: ": gathering the selected entries costs part of what skipping the rest saves.",
              False: ", as much as its skipped reads suggest."}


def sparse_text(meas: mb.StepMeasurement, batch: int, context: int) -> str:
    """What DSA's sparse path saved against the dense step at (`batch`, `context`), and why it saves less
    than its skipped reads suggest where it does (attention's time falls by a smaller share than its bytes)."""
    dense, sparse = step_ms(meas, batch, context), float(meas.row(batch, context, "step", attention="sparse")["median_us"]) / 1e3
    att = [float(meas.row(batch, context, "attention", attention=a)["median_us"]) for a in ("dense", "sparse")]
    by = [float(meas.component_bytes(batch, context, "attention", a)["bytes_emulated"]) for a in ("dense", "sparse")]
    bytes_pct, att_pct = 100 * (1 - by[1] / by[0]), 100 * (1 - att[1] / att[0])
    saved = dense - sparse
    return SPARSE_TEXT.format(verb="saves" if saved >= 0 else "costs", saved=abs(saved), saved_pct=100 * abs(saved) / dense,
                              bytes_pct=bytes_pct, att_pct=att_pct, why=SPARSE_WHY[att_pct < bytes_pct])


EAGER_TEXT = ("eagerly, one sequence takes {ms:.0f} ms. That eager path is this emulation's, each operator issued "
              "from Python: about {per_kernel:.0f} µs a kernel (derived: eager minus graph time over the graph's "
              "{kernels} kernels), not SGLang's eager cost")
EAGER_TEXT_NONE = "this measurement timed no eager step (the chapter's eager parameter was off)"


def measurement_values(meas: mb.StepMeasurement, batch_max: int, context: int, long_context: int) -> dict:
    """The step at 1 and `batch_max` sequences (graphs; eager at 1), at the long context dense and sparse,
    the sweep's time, the kernels a step launches and the launch and copy figures measured beside it.
    `eager_kernel_us` (derived) is the eager step's cost per kernel over the graph's, at one sequence: this
    emulation's Python-issued path, far above `eager_us`, the one-element add's floor (launch_floor)."""
    g1, gmax = step_ms(meas, 1, context), step_ms(meas, batch_max, context)
    sparse = meas.row(batch_max, long_context, "step", attention="sparse")
    t = meas.timings
    timed_eager = bool(((t["what"] == "step") & (t["mode"] == "eager") & (t["batch"] == 1)
                        & (t["context"] == context)).any())
    eager_1 = step_ms(meas, 1, context, "eager") if timed_eager else float("nan")
    k1 = int(meas.row(1, context, "step")["kernels"]) if timed_eager else 0
    eager_kernel_us = (eager_1 - g1) * 1e3 / k1 if timed_eager else float("nan")
    eager_text = (EAGER_TEXT.format(ms=eager_1, per_kernel=eager_kernel_us, kernels=k1) if timed_eager
                  else EAGER_TEXT_NONE)
    return {"where": meas.where, "device": meas.device, "step_1": g1, "step_64": gmax, "tok_1": 1e3 / g1,
            "tok_64": batch_max * 1e3 / gmax, "eager_1": eager_1, "eager_kernel_us": eager_kernel_us, "eager_text": eager_text, "long_ctx": long_context,
            "step_64_long": step_ms(meas, batch_max, long_context), "sparse_64_long": float(sparse["median_us"]) / 1e3,
            "sweep_s": float(meas.meta_value("sweep_s")),
            "kernels_step": int(meas.row(batch_max, context, "step")["kernels"]), "floor_us": meas.floor_us(),
            "eager_us": float(meas.meta_value("eager_us_per_kernel")), "copy_GBps": float(meas.meta_value("copy_GBps"))}


#: the columns of split_table the chapter shows
SPLIT_SHOWN = ["batch", "component", "time_us", "share", "kernels", "launch_floor_us", "bytes_read_MiB",
               "achieved_GBps", "share_of_peak"]


def split_table(meas: mb.StepMeasurement, batches, context: int) -> pd.DataFrame:
    """`split` (against the GPU's datasheet bandwidth) at each of `batches`, one table with a batch column."""
    peak = meas.peak().value
    return pd.concat([split(meas, b, context, peak).assign(batch=b) for b in batches])


def split_by_batch(meas: mb.StepMeasurement, context: int) -> pd.DataFrame:
    """Each component alone (graphs, dense attention) in ms, one row per batch: the split figure's bars."""
    t = rows(meas.timings, f"{meas.where}: the step's timings", context=context, mode="graph", attention="dense")
    return t.pivot_table(index="batch", columns="what", values="median_us")[list(SPLIT)] / 1e3


#: the split's takeaway, by the measurement's fusion path
SPLIT_TAKEAWAY = {
    "unfused": ("torch operators one by one issue many small kernels where a serving engine fuses them; the step's "
                "weight-reading kernels are close to SGLang's, its small operators are not."),
    "fused": ("fused as an engine fuses them, the small operators cost a few kernels a layer; the rest of the "
              "step is the kernels that read the weights and the KV cache."),
}

SHARE_KEYS = (("moe", "moe"), ("attention", "att"), ("indexer", "idx"), ("norms and small ops", "small"))


def split_values(table: pd.DataFrame, batch_max: int, step_1_ms: float, step_max_ms: float) -> dict:
    """Shares of the step by component at 1 and `batch_max`, the launch floor's share at 1, the achieved
    bandwidth of the experts and lm_head at `batch_max`, and the components' sum against the whole step
    (`step_1_ms`, `step_max_ms`) at each."""
    s1 = rows(table, "the split", batch=1).set_index("component")
    sx = rows(table, "the split", batch=batch_max).set_index("component")
    missing = [c for c in SPLIT if c not in s1.index or c not in sx.index]
    if missing:
        raise mb.MeasuredBudgetError(f"the split lacks the component(s) {missing}; it has {sorted(s1.index)}")
    out = {}
    for c, key in SHARE_KEYS:
        out[f"share1_{key}"] = 100 * float(s1.loc[c, "share"])
        out[f"share64_{key}"] = 100 * float(sx.loc[c, "share"])
    # the launch floor's share of the whole one-sequence step (the answer's "of it"), not of the components' sum
    # (which runs a few % above the step): the components' kernels, which add up to the step's, times the floor,
    # over the step's own time; the kernel count is the measurement's own (issue 47 item 9)
    out.update({"floor_share_1": 100 * float(s1["launch_floor_us"].sum()) / (1e3 * step_1_ms),
                "moe_GBps_64": float(sx.loc["moe", "achieved_GBps"]), "moe_peak_64": 100 * float(sx.loc["moe", "share_of_peak"]),
                "lm_GBps": float(sx.loc["lm_head", "achieved_GBps"]),
                "lm_peak_64": 100 * float(sx.loc["lm_head", "share_of_peak"]),
                "sum_vs_step_1": float(s1["time_us"].sum()) / 1e3 / step_1_ms,
                "sum_vs_step_64": float(sx["time_us"].sum()) / 1e3 / step_max_ms})
    return out


#: how the measured step ran its routed experts (its sweep's meta `moe_impl`), in words for the page
EXPERTS_IMPL = {
    "triton": "this book's Triton fused-MoE kernel (helpers.model.moe_triton) after a separate permutation",
    "grouped_mm": "torch's grouped GEMM (torch._grouped_mm) after a separate permutation",
    "loop": "one torch product per expert",
}


def experts_impl_words(moe_impl: str | None) -> str:
    """How the measured step ran its routed experts (its meta's `moe_impl`), in words for the page."""
    if not moe_impl:
        return "an implementation the measurement does not record"
    return EXPERTS_IMPL.get(moe_impl, f"an implementation the measurement names {moe_impl!r}")


def fidelity_values(fid: pd.DataFrame, batch_max: int, moe_impl: str | None = None) -> dict:
    """This step's GEMMs and experts against SGLang's kernels on the same GPU class (op_fidelity's
    `op_kind` column: 'gemm', 'experts'); `moe_impl` is the measurement's meta entry (how its experts ran)."""
    gemms = rows(fid, "the op fidelity table", op_kind="gemm")
    ex = lambda b: float(one(fid, "the op fidelity table", op_kind="experts", batch=b)["ratio_here"])  # noqa: E731
    return {"gemm_ratio_lo": float(gemms["ratio_here"].min()), "gemm_ratio_hi": float(gemms["ratio_here"].max()),
            "gemm_ratio_hi_op": str(gemms.loc[gemms["ratio_here"].idxmax(), "op"]),
            "gemm_ratio_med": float(gemms["ratio_here"].median()), "experts_ratio_1": ex(1),
            "experts_ratio_64": ex(batch_max),
            "experts_impl": experts_impl_words(moe_impl)}


def fidelity_texts(fid: pd.DataFrame, batch_max: int, moe_impl: str | None, device: str) -> dict:
    """The page's two sentences on this step against SGLang's kernels on the same GPU class: the ratios
    (fidelity_values) where aiconfigurator's kernel tables cover this GPU, else what is not compared and why."""
    v = fidelity_values(fid, batch_max, moe_impl) if fid["ratio_here"].notna().any() else None
    impl = experts_impl_words(moe_impl)
    if v is None:
        why = mb.no_engine_here(device)
        return {"experts_impl": impl, "experts_vs": f"have no SGLang fused-MoE time on {device} to stand beside ({why})",
                "gemm_vs": f"This step's GEMMs have no SGLang time for the same shape to stand beside ({why})."}
    return {"experts_impl": impl,
            "experts_vs": (f"take {v['experts_ratio_1']:.2f} and {v['experts_ratio_64']:.2f} times SGLang's fused MoE kernel "
                           f"on {device}"),
            "gemm_vs": (f"This step's GEMMs take {v['gemm_ratio_lo']:.2f} to {v['gemm_ratio_hi']:.2f} times SGLang's time "
                        f"for the same shape in bf16 (median {v['gemm_ratio_med']:.2f}; the largest, the "
                        f"{v['gemm_ratio_hi_op']}).")}


def tuning(meas: mb.StepMeasurement, m: ma.ModelConfig, context: int) -> tuple[pd.DataFrame, dict]:
    """tuning_bounds for the original VM's observed one-stream step, with the MoE block's time on the
    recorded GPU from aiconfigurator's measured kernels, and the numbers the text cites."""
    prim = bd.primary_observations()
    vm_step_ms = 1e3 / float(one(prim, "the primary observations", system="original VM", concurrency=1)["observed"])
    kt1 = mb.kernel_terms(m, 1, context, meas.floor_us(), collectives=False)
    moe_ms = float(rows(kt1, "the measured-kernel terms", component="moe")["us_step"].sum()) / 1e3
    # the diagnosis's first budget prices the recorded host's launches at these assumed costs (its section 1 and 3)
    base = bd.baseline_scenario(m)
    assumed = (float(base.launch_eager.value), float(base.launch_graph.value))
    tab = tuning_bounds(meas, moe_ms, bd.kernels_per_step(m), vm_step_ms, assumed_launch_us=assumed)
    t = lambda tn, col: float(one(tab, "the tuning bounds", tuning=tn)[col])  # noqa: E731
    return tab, {"vm_step_ms": vm_step_ms, "moe_ms": moe_ms, "moe_gain": t("MoE runner", "max_speedup"),
                 "graph_ms": t(GRAPHS_HERE, "removable_ms"), "graph_gain": t(GRAPHS_HERE, "max_speedup"),
                 "graph_assumed_ms": t(GRAPHS_ASSUMED, "removable_ms"),
                 "graph_assumed_gain": t(GRAPHS_ASSUMED, "max_speedup"),
                 "eager_assumed_us": assumed[0], "graph_floor_assumed_us": assumed[1],
                 "n_kernels_engine": bd.kernels_per_step(m)}
