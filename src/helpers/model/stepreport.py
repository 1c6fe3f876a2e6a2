"""What the decode-step chapter reads off a step measurement (helpers.model.measured.StepMeasurement):
the bytes it reads, the step against batch, its split by component with achieved bandwidth, graphs against
eager, its kernels beside SGLang's, and what each tuning the investigation tried could at most have
changed. Every pick raises MeasuredBudgetError (or helpers.core.pick.PickError) naming the
row it could not find. Functions named `*_values` return the glue keys the chapter's prose cites; the
sentences that depend on the machine (`check_text`, `cpu_text`) are chosen here as whole variants.
"""
from __future__ import annotations

import math

from dataclasses import replace
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


def tuning_bounds(meas: mb.StepMeasurement, moe_ms: float, kernels_per_step: int, observed_step_ms: float
                  ) -> pd.DataFrame:
    """The most each tuning the investigation tried could have sped up a step of `observed_step_ms` (the
    recorded VM's), derived: the MoE runner acts on the MoE block only (`moe_ms`, its time on the
    recorded GPU); CUDA graphs on launch costs only (`kernels_per_step` x the eager-minus-graph cost per
    kernel measured here); the memory fraction on none of a step's work (it sizes the KV cache)."""
    if observed_step_ms <= 0:
        raise mb.MeasuredBudgetError(f"observed step {observed_step_ms} ms: expected a positive time")
    eager = meas.meta.get("eager_us_per_kernel")
    if not eager:
        raise mb.MeasuredBudgetError(f"{meas.where}: no eager launch cost (meta eager_us_per_kernel)")
    launch_ms = kernels_per_step * (float(eager) - meas.floor_us()) / 1e3
    rows = [
        {"tuning": "MoE runner", "acts_on": "the MoE block", "removable_ms": moe_ms,
         "basis": "the MoE block's time on the recorded GPU (measured kernels)"},
        {"tuning": "CUDA graphs", "acts_on": "kernel launch costs", "removable_ms": launch_ms,
         "basis": "kernels per step x (eager - graph) cost per kernel measured here"},
        {"tuning": "--mem-fraction-static", "acts_on": "KV-cache capacity, not a step's work", "removable_ms": 0.0,
         "basis": "no term of the step depends on it"},
    ]
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


def _dense_bytes(meas: mb.StepMeasurement, context: int, batches=BYTES_BATCHES) -> pd.DataFrame:
    by = rows(meas.bytes, f"{meas.where}: the step's bytes", context=context, attention="dense")
    missing = sorted(set(batches) - set(by["batch"]))
    if missing:
        raise mb.MeasuredBudgetError(f"{meas.where}: no byte rows for batch(es) {missing} at context {context}; "
                                     f"batches there: {sorted(by['batch'].unique())}")
    return by


def bytes_table(meas: mb.StepMeasurement, context: int, batches=BYTES_BATCHES) -> pd.DataFrame:
    """GiB one rank reads per component (and in total) at `batches`, emulated and at checkpoint precision."""
    by = _dense_bytes(meas, context, batches)
    b = by.pivot_table(index="component", columns="batch", values=["bytes_emulated", "bytes_checkpoint"], sort=False)
    out = pd.DataFrame({f"{k} GiB @{n}": b[(k, n)] / ma.GiB for k in ("bytes_emulated", "bytes_checkpoint")
                        for n in batches})
    out.loc["total"] = out.sum()
    return out


def bytes_values(meas: mb.StepMeasurement, context: int, batches=BYTES_BATCHES) -> dict:
    """Total GiB read (emulated, checkpoint), the datasheet time of the emulated bytes (a bound), the
    experts the batch touched, the GPU's datasheet bandwidth, and the memory plan (MoE layers held)."""
    by = _dense_bytes(meas, context, batches)
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


def cpu_text(sweep: dict | None, rank_timing: list[dict] | None, batch: int) -> str:
    """What the scaled-down model's CPU sweep (steptime.sweep's result) and the two gloo ranks' timing
    (step.sharding_check's) took; empty where this run timed no CPU."""
    if sweep is None or rank_timing is None:
        return ""
    meta = sweep["meta"]
    cs = steps(mb.StepMeasurement(sweep["timings"], sweep["bytes"], meta, "this run", meta["device_name"], ""))
    two = pd.DataFrame(rank_timing).set_index("what")["median_us"]
    missing = [w for w in ("step", "collectives") if w not in two.index]
    if missing:
        raise mb.MeasuredBudgetError(f"the two-rank timing has no row for {missing}; it has {sorted(two.index)}")
    return CPU_TEXT.format(device=meta["device_name"], sweep_s=float(meta["sweep_s"]),
                           points=", ".join(f"{r.step_ms:.1f} ms at batch {r.batch}" for r in cs.itertuples()),
                           rank_ms=float(two["step"]) / 1e3, batch=batch, coll_ms=float(two["collectives"]) / 1e3)


EAGER_TEXT = "eagerly, one sequence takes {ms:.0f} ms"
EAGER_TEXT_NONE = "this measurement timed no eager step (the chapter's `eager` parameter was off)"


def measurement_values(meas: mb.StepMeasurement, batch_max: int, context: int, long_context: int) -> dict:
    """The step at 1 and `batch_max` sequences (graphs; eager at 1), at the long context dense and sparse,
    the sweep's time, the kernels a step launches and the launch and copy figures measured beside it."""
    g1, gmax = step_ms(meas, 1, context), step_ms(meas, batch_max, context)
    sparse = meas.row(batch_max, long_context, "step", attention="sparse")
    t = meas.timings
    timed_eager = bool(((t["what"] == "step") & (t["mode"] == "eager") & (t["batch"] == 1)
                        & (t["context"] == context)).any())
    eager_1 = step_ms(meas, 1, context, "eager") if timed_eager else float("nan")
    eager_text = (EAGER_TEXT.format(ms=eager_1) if timed_eager else EAGER_TEXT_NONE)
    return {"where": meas.where, "device": meas.device, "step_1": g1, "step_64": gmax, "tok_1": 1e3 / g1,
            "tok_64": batch_max * 1e3 / gmax, "eager_1": eager_1, "eager_text": eager_text, "long_ctx": long_context,
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


def split_values(table: pd.DataFrame, batch_max: int, step_1_ms: float) -> dict:
    """Shares of the step by component at 1 and `batch_max`, the launch floor's share at 1, the achieved
    bandwidth of the experts and lm_head at `batch_max`, and the components' sum against the step."""
    s1 = rows(table, "the split", batch=1).set_index("component")
    sx = rows(table, "the split", batch=batch_max).set_index("component")
    missing = [c for c in SPLIT if c not in s1.index or c not in sx.index]
    if missing:
        raise mb.MeasuredBudgetError(f"the split lacks the component(s) {missing}; it has {sorted(s1.index)}")
    out = {}
    for c, key in SHARE_KEYS:
        out[f"share1_{key}"] = 100 * float(s1.loc[c, "share"])
        out[f"share64_{key}"] = 100 * float(sx.loc[c, "share"])
    out.update({"floor_share_1": 100 * float(s1["launch_floor_us"].sum() / s1["time_us"].sum()),
                "moe_GBps_64": float(sx.loc["moe", "achieved_GBps"]), "moe_peak_64": 100 * float(sx.loc["moe", "share_of_peak"]),
                "lm_GBps": float(sx.loc["lm_head", "achieved_GBps"]),
                "sum_vs_step": float(s1["time_us"].sum()) / 1e3 / step_1_ms})
    return out


def fidelity_values(fid: pd.DataFrame, batch_max: int) -> dict:
    """This step's GEMMs and experts against SGLang's kernels on the same GPU class (op_fidelity's
    `op_kind` column: 'gemm', 'experts')."""
    gemms = rows(fid, "the op fidelity table", op_kind="gemm")
    ex = lambda b: float(one(fid, "the op fidelity table", op_kind="experts", batch=b)["ratio_here"])  # noqa: E731
    return {"gemm_ratio_lo": float(gemms["ratio_here"].min()), "gemm_ratio_hi": float(gemms["ratio_here"].max()),
            "gemm_ratio_hi_op": str(gemms.loc[gemms["ratio_here"].idxmax(), "op"]),
            "gemm_ratio_med": float(gemms["ratio_here"].median()), "experts_ratio_1": ex(1),
            "experts_ratio_64": ex(batch_max)}


def tuning(meas: mb.StepMeasurement, m: ma.ModelConfig, context: int) -> tuple[pd.DataFrame, dict]:
    """tuning_bounds for the original VM's observed one-stream step, with the MoE block's time on the
    recorded GPU from aiconfigurator's measured kernels, and the numbers the text cites."""
    prim = bd.primary_observations()
    vm_step_ms = 1e3 / float(one(prim, "the primary observations", system="original VM", concurrency=1)["observed"])
    kt1 = mb.kernel_terms(m, 1, context, meas.floor_us(), collectives=False)
    moe_ms = float(rows(kt1, "the measured-kernel terms", component="moe")["us_step"].sum()) / 1e3
    tab = tuning_bounds(meas, moe_ms, bd.kernels_per_step(m), vm_step_ms)
    t = lambda tn, col: float(one(tab, "the tuning bounds", tuning=tn)[col])  # noqa: E731
    return tab, {"vm_step_ms": vm_step_ms, "moe_ms": moe_ms, "moe_gain": t("MoE runner", "max_speedup"),
                 "graph_ms": t("CUDA graphs", "removable_ms"), "graph_gain": t("CUDA graphs", "max_speedup"),
                 "n_kernels_engine": bd.kernels_per_step(m)}


# --------------------------------------------------------------------------------------------------
# bf16 against FP8, and the shared expert beside the routed ones


def precision_configs(p: Mapping, device: str = "cuda") -> dict[str, steptime.SweepConfig]:
    """The sweeps the chapter adds to its bf16 one on a GPU (name -> config): the FP8 step with every
    component (and op by op where the bf16 sweep was, for the experts against SGLang's FP8 kernel), and
    where the shared expert overlaps, both precisions' whole step on one stream ("-serial": graphs only).
    On a CPU (tests), eager and without the serial sweeps (no second stream there)."""
    cuda = str(device).startswith("cuda")
    base = sweep_config(p, True) if cuda else sweep_config(p, False)
    base = replace(base, device=device, sparse_points=(), shared_overlap=p.get("shared_overlap", "auto"))
    out = {"fp8": replace(base, dtype="fp8")}
    if cuda and base.shared_overlap != "off":
        for prec in ("bf16", "fp8"):
            out[f"{prec}-serial"] = replace(base, dtype=prec, shared_overlap="off", modes=("graph",),
                                            components=False, op_level=())
    return out


def time_precisions(p: Mapping, bf16_dir, out_root, device: str = "cuda",
                    progress=print) -> tuple[dict | None, str]:
    """On a device with scaled FP8 products: the precision_configs sweeps under `out_root`/sweep-<name>,
    merged with the bf16 sweep already in `bf16_dir` (steptime.merge_sweeps); a sweep that fails is left
    out and named in the merged meta's "failed". Returns (the merged study or None, the FP8 trial's error
    or "")."""
    from pathlib import Path

    from helpers.model import fp8

    sup = fp8.probe(device)
    if not sup.ok:
        return None, str(sup.dense)
    folders, failed = {"bf16": Path(bf16_dir)}, {}
    for name, cfg in precision_configs(p, device).items():
        folder = Path(out_root) / f"sweep-{name}"
        try:
            steptime.sweep(cfg, folder, progress=progress)
            folders[name] = folder
        except (stp.StepError, steptime.TimeLimit, RuntimeError) as e:   # keep what the others measured
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            progress(f"the {name} sweep failed: {failed[name]}")
    merged = steptime.merge_sweeps(folders)
    merged["meta"]["failed"] = failed
    return merged, ""


def precision_source(ps: mb.PrecisionStudy | None) -> str:
    """Where the chapter's bf16-against-FP8 timings come from: this run, a data/ folder, or none."""
    return "none" if ps is None else f"{ps.where} ({ps.device})"


def fp8_weight_table(m: ma.ModelConfig, tp: int) -> pd.DataFrame:
    """Each weight of one layer (a MoE layer's, and the dense MLP's) and the head at `tp`: its per-rank
    shape, what precision "fp8" holds it in, and MiB per layer in bf16 and in FP8."""
    specs = stp.attention_specs(m) + stp.mlp_specs(m, False) + stp.mlp_specs(m, True) + stp.head_specs(m)
    rows = []
    for s in specs:
        if s.group == "norms":
            continue
        rows.append({"weight": s.name, "group": s.group, "per_rank_shape": " x ".join(map(str, stp.local_shape(s, tp))),
                     "held_in": "FP8 E4M3, a float32 scale per column" if s.name in stp.FP8_WEIGHTS else "bf16",
                     "bf16_MiB": stp.stored_bytes(s, tp, "bf16") / 2**20, "fp8_MiB": stp.stored_bytes(s, tp, "fp8") / 2**20})
    return pd.DataFrame(rows)


def precision_bytes(meas: mb.StepMeasurement, m: ma.ModelConfig, tp: int, context: int,
                    batches=BYTES_BATCHES) -> tuple[pd.DataFrame, dict]:
    """GiB one rank reads per component in bf16, in FP8 and at the checkpoint's formats (derived by
    stp.component_bytes, with the experts `meas`'s routing touched at each batch), and the values the
    text cites: totals, FP8's share of bf16, and the datasheet time of the FP8 bytes (a bound)."""
    by = _dense_bytes(meas, context, batches)
    peak = meas.peak().value
    cols, vals = {}, {}
    for b in batches:
        de = float(by.loc[by["batch"] == b, "distinct_experts"].iloc[0])
        for prec in ("bf16", "fp8"):
            cb = stp.component_bytes(m, tp, b, context, de, prec).set_index("component")
            cols[f"{prec} GiB @{b}"] = cb["bytes_emulated"] / ma.GiB
            if prec == "fp8":
                cols[f"checkpoint GiB @{b}"] = cb["bytes_checkpoint"] / ma.GiB
        vals[f"gib_bf16_{b}"] = float(cols[f"bf16 GiB @{b}"].sum())
        vals[f"gib_fp8_{b}"] = float(cols[f"fp8 GiB @{b}"].sum())
        vals[f"fp8_share_{b}"] = 100 * vals[f"gib_fp8_{b}"] / vals[f"gib_bf16_{b}"]
        vals[f"fp8_bound_ms_{b}"] = vals[f"gib_fp8_{b}"] * ma.GiB / (peak * 1e9) * 1e3
    out = pd.DataFrame(cols)
    out = out[[c for c in out.columns if "GiB" in c]]
    out.loc["total"] = out.sum()
    return out, vals


def fp8_accuracy_values(check: pd.DataFrame, products: pd.DataFrame) -> dict:
    """What the text cites from step.fp8_check and step.fp8_product_errors."""
    r = lambda v, col: float(one(check, "the FP8 check", variant=v)[col])  # noqa: E731
    return {"acc_bf16": r("bf16", "rel_l2"), "acc_fp8": r("fp8", "rel_l2"),
            "acc_fp8_act32": r("fp8, fp32 activations", "rel_l2"),
            "acc_wrong": r("fp8, scales shifted one column", "rel_l2"), "acc_tol": r("fp8", "tolerance"),
            "acc_ok": "passes" if bool(one(check, "the FP8 check", variant="fp8")["ok"]) else "FAILS",
            "acc_wrong_caught": "fails it" if not bool(one(check, "the FP8 check",
                                                            variant="fp8, scales shifted one column")["ok"])
            else "PASSES it",
            "flips_bf16": 100 * r("bf16", "routing_flips"), "flips_fp8": 100 * r("fp8", "routing_flips"),
            "tok_fp8": 100 * r("fp8", "token_agreement"),
            "prod_fp8_lo": 100 * float(products["fp8_rel_l2"].min()),
            "prod_fp8_hi": 100 * float(products["fp8_rel_l2"].max()),
            "prod_bf16_hi": 100 * float(products["bf16_rel_l2"].max()),
            "prod_tol": 100 * float(products["tolerance"].iloc[0]),
            "acc_amplification": r("fp8", "rel_l2") / float(products["fp8_rel_l2"].median())}


def precision_steps(ps: mb.PrecisionStudy, context: int, mode: str = "graph") -> pd.DataFrame:
    """The whole step in bf16 and in FP8 per batch, at the full sweeps' overlap setting, with FP8's
    speed-up and each precision's bytes (GiB, derived)."""
    ov = ps.main_overlap()
    out = []
    steps_ = ps.timings[(ps.timings["what"] == "step") & (ps.timings["context"] == context)]
    if not len(steps_):
        raise mb.MeasuredBudgetError(f"{ps.where}: no whole-step rows at context {context}")
    for b in sorted(set(steps_["batch"])):
        r16 = ps.row("bf16", b, context, mode=mode, overlap=ov)
        r8 = ps.row("fp8", b, context, mode=mode, overlap=ov)
        g16 = sum(ps.component_bytes("bf16", b, context, c) for c in stp.COMPONENTS) / ma.GiB
        g8 = sum(ps.component_bytes("fp8", b, context, c) for c in stp.COMPONENTS) / ma.GiB
        out.append({"batch": int(b), "bf16_ms": float(r16["median_us"]) / 1e3, "fp8_ms": float(r8["median_us"]) / 1e3,
                    "bf16_GiB": g16, "fp8_GiB": g8})
    df = pd.DataFrame(out)
    df["fp8_speedup"] = df["bf16_ms"] / df["fp8_ms"]
    return df


def overlap_steps(ps: mb.PrecisionStudy, context: int, mode: str = "graph") -> pd.DataFrame:
    """Per precision and batch: the whole step on one stream and with the shared expert on a second, what
    the overlap saved, and the shared/dense MLP component alone (its upper bound: the shared expert of
    every MoE layer, plus the dense layers' MLP, which nothing overlaps)."""
    out = []
    for prec in ps.precisions():
        t = ps.timings
        t = t[(t["what"] == "step") & (t["context"] == context) & (t["dtype"] == prec) & (t["mode"] == mode)]
        if not len(t):
            raise mb.MeasuredBudgetError(f"{ps.where}: no {prec} whole-step rows at context {context}, {mode}")
        for b in sorted(set(t["batch"])):
            one_s = ps.row(prec, b, context, mode=mode, overlap=False)
            two_s = ps.row(prec, b, context, mode=mode, overlap=True)
            shared = ps.row(prec, b, context, "shared/dense MLP", mode=mode, overlap=True)
            o, w = float(one_s["median_us"]) / 1e3, float(two_s["median_us"]) / 1e3
            out.append({"precision": prec, "batch": int(b), "one_stream_ms": o, "two_streams_ms": w,
                        "saved_ms": o - w, "saved_share": (o - w) / o,
                        "shared_dense_alone_ms": float(shared["median_us"]) / 1e3})
    return pd.DataFrame(out)


def precision_split(ps: mb.PrecisionStudy, batch: int, context: int, mode: str = "graph") -> pd.DataFrame:
    """Each component alone in bf16 and in FP8 at `batch`: time, bytes (MiB, derived) and achieved GB/s."""
    ov = ps.main_overlap()
    out = []
    for c in SPLIT:
        r16 = ps.row("bf16", batch, context, c, mode=mode, overlap=ov)
        r8 = ps.row("fp8", batch, context, c, mode=mode, overlap=ov)
        b16, b8 = ps.component_bytes("bf16", batch, context, c), ps.component_bytes("fp8", batch, context, c)
        u16, u8 = float(r16["median_us"]), float(r8["median_us"])
        out.append({"component": c, "bf16_us": u16, "fp8_us": u8, "fp8_vs_bf16": u8 / u16,
                    "bf16_MiB": b16 / 2**20, "fp8_MiB": b8 / 2**20, "bf16_GBps": b16 / u16 / 1e3,
                    "fp8_GBps": b8 / u8 / 1e3})
    return pd.DataFrame(out)


PRECISION_KEYS = ("fp8_step_x_1", "fp8_step_x_max", "fp8_moe_x_max", "fp8_moe_GBps_max", "bf16_moe_GBps_max",
                  "fp8_att_x_1", "overlap_saved_1", "overlap_saved_max", "overlap_share_max", "prec_bmax")


def precision_values(ps: mb.PrecisionStudy | None, context: int) -> dict[str, float]:
    """The figures 07_decode_step's FP8 takeaway cites: FP8's whole step and its experts as a multiple of
    bf16's time (above 1: slower) at one sequence and at the study's largest batch, the experts' achieved
    GB/s in each precision there, the attention block's multiple at one sequence, and what the second
    stream saved in bf16 (ms and share of the one-stream step). NaN for each where `ps` is None or lacks
    the rows (no FP8 measurement exists), so the page's sentence stays and says nan."""
    vals = {k: float("nan") for k in PRECISION_KEYS}
    if ps is None:
        return vals
    steps_ = precision_steps(ps, context)
    bmax = int(steps_["batch"].max())
    one, top = steps_[steps_["batch"] == 1], steps_[steps_["batch"] == bmax]
    vals["prec_bmax"] = float(bmax)
    if len(one):
        vals["fp8_step_x_1"] = float(1 / one["fp8_speedup"].iloc[0])
        s1 = precision_split(ps, 1, context).set_index("component")
        vals["fp8_att_x_1"] = float(s1.loc["attention", "fp8_vs_bf16"])
    vals["fp8_step_x_max"] = float(1 / top["fp8_speedup"].iloc[0])
    sm = precision_split(ps, bmax, context).set_index("component")
    vals["fp8_moe_x_max"] = float(sm.loc["moe", "fp8_vs_bf16"])
    vals["fp8_moe_GBps_max"], vals["bf16_moe_GBps_max"] = float(sm.loc["moe", "fp8_GBps"]), float(sm.loc["moe", "bf16_GBps"])
    if has_overlap_pair(ps):
        ov = overlap_steps(ps, context)
        ov = ov[ov["precision"] == "bf16"].set_index("batch")
        if 1 in ov.index:
            vals["overlap_saved_1"] = float(ov.loc[1, "saved_ms"])
        if bmax in ov.index:
            vals["overlap_saved_max"] = float(ov.loc[bmax, "saved_ms"])
            vals["overlap_share_max"] = float(100 * ov.loc[bmax, "saved_share"])
    return vals


FP8_VERDICTS = {
    (True, True): "shortens the step both for one sequence and for the largest batch",
    (False, False): "does not shorten the step, for one sequence or for the largest batch",
    (False, True): "shortens the step only for the largest batch",
    (True, False): "shortens the step only for one sequence",
}


def fp8_verdict(vals: dict[str, float]) -> str:
    """Which of FP8_VERDICTS the precision_values say (a step shorter in FP8 than in bf16 at one sequence,
    at the largest batch), or that no FP8 measurement exists to judge from."""
    x1, xm = vals["fp8_step_x_1"], vals["fp8_step_x_max"]
    if math.isnan(x1) or math.isnan(xm):
        return "cannot be judged here: no FP8 measurement exists"
    return FP8_VERDICTS[(x1 < 1, xm < 1)]


def overlap_label(meas: mb.StepMeasurement, context: int) -> str:
    """'on' where the measurement's whole steps at `context` ran the shared expert on a second stream,
    'off' where they ran on one (a study without the `overlap` column, as the committed bf16 one, ran on
    one: it predates the overlap)."""
    t = meas.timings
    s = t[(t["what"] == "step") & (t["context"] == context)]
    if not len(s):
        raise mb.MeasuredBudgetError(f"{meas.where}: no whole-step rows at context {context}")
    if "overlap" not in s.columns or not s["overlap"].fillna(False).astype(bool).any():
        return "off"
    return "on" if s["overlap"].astype(bool).all() else "mixed"


def has_overlap_pair(ps: mb.PrecisionStudy | None) -> bool:
    """Whether `ps` holds whole steps both with the shared expert overlapped and without."""
    if ps is None:
        return False
    s = ps.timings[ps.timings["what"] == "step"]["overlap"].astype(bool)
    return bool(s.any() and (~s).any())


# --------------------------------------------------------------------------------------------------
# What fusion bought, kernels beside SGLang's op list, and the fused step against an engine on the same GPU

#: the budget's op list for SGLang (helpers.model.budget, one kernel per op, assumed) by the step component
#: that runs the same work; all-reduces and the logits all-gather are collectives (not run on one GPU)
SGLANG_COMPONENT = {
    **{o: "attention" for o in ("fused q_a + kv_a projection", "q_b projection", "absorbed k (bmm)", "rope",
                                "kv-cache store", "attention", "absorbed v (bmm)", "o_proj")},
    **{o: "norms and small ops" for o in ("input rmsnorm", "q_a rmsnorm", "kv_a rmsnorm", "residual add + rmsnorm",
                                          "embedding", "final rmsnorm", "sampling")},
    **{o: "indexer" for o in bd.INDEXER_OPS},
    **{o: "shared/dense MLP" for o in ("gate_up", "activation", "down", "shared gate_up", "shared activation",
                                       "shared down")},
    **{o: "moe" for o in ("router", "top-k select", "quantize input", "permute", "grouped gemm 1",
                          "activation + quantize", "grouped gemm 2", "unpermute + reduce", "add shared")},
    "lm_head": "lm_head",
    **{o: "collectives" for o in ("all-reduce", "embedding all-reduce", "logits all-gather")},
}


def sglang_kernels(m: ma.ModelConfig) -> pd.Series:
    """Kernels per decode step by step component from the budget's op lists for SGLang (assumed: one kernel per
    listed op; bd.kernel_table's layer counts). An op the map does not place is an error naming it."""
    parts = [(bd.ATTENTION_OPS, m.layers), (bd.INDEXER_OPS if m.has_indexer else (), m.layers),
             (bd.DENSE_MLP_OPS, m.dense_layers), (bd.MOE_OPS, m.moe_layers), (bd.HEAD_OPS, 1)]
    out: dict[str, int] = {}
    for ops, n in parts:
        for o in ops:
            if o not in SGLANG_COMPONENT:
                raise mb.MeasuredBudgetError(f"the budget's op '{o}' has no step component in "
                                             f"stepreport.SGLANG_COMPONENT; add it")
            out[SGLANG_COMPONENT[o]] = out.get(SGLANG_COMPONENT[o], 0) + n
    s = pd.Series(out)
    if int(s.sum()) != bd.kernels_per_step(m):
        raise mb.MeasuredBudgetError(f"the op map counts {int(s.sum())} kernels, the budget {bd.kernels_per_step(m)}")
    return s


FUSION_COLUMNS = ["precision", "batch", "mode", "unfused_ms", "fused_ms", "speedup", "unfused_kernels",
                  "fused_kernels"]


def fusion_table(fs: mb.FusionStudy, context: int) -> pd.DataFrame:
    """The whole step fused against unfused, per precision, batch and mode, where the study timed both
    (measured, dense attention): times, the unfused over the fused time, kernels per step (graph nodes;
    none eagerly)."""
    rows_ = []
    t = fs.timings
    s = t[(t["what"] == "step") & (t["context"] == context) & (t["attention"] == "dense")]
    for (prec, b, mode), _ in s.groupby(["dtype", "batch", "mode"]):
        fu, un = fs.step(prec, "fused", int(b), context, mode=mode), fs.step(prec, "unfused", int(b), context, mode=mode)
        if fu is None or un is None:
            continue
        rows_.append({"precision": prec, "batch": int(b), "mode": mode, "unfused_ms": float(un["median_us"]) / 1e3,
                      "fused_ms": float(fu["median_us"]) / 1e3,
                      "speedup": float(un["median_us"]) / float(fu["median_us"]),
                      "unfused_kernels": un["kernels"], "fused_kernels": fu["kernels"]})
    if not rows_:
        raise mb.MeasuredBudgetError(f"{fs.where}: no point timed both fused and unfused at context {context}")
    return pd.DataFrame(rows_).sort_values(["precision", "mode", "batch"]).reset_index(drop=True)[FUSION_COLUMNS]


def fusion_values(tab: pd.DataFrame, fs: mb.FusionStudy, batch_max: int) -> dict:
    """The numbers the fusion paragraph cites (bf16 and FP8, graphs, at 1 and `batch_max`), the study's
    compile time, and FP8 against bf16 in the fused step."""
    g = rows(tab, "the fusion table", mode="graph")
    pick = lambda prec, b, col: float(one(g, "the fusion table", precision=prec, batch=b)[col])  # noqa: E731
    out = {"fusion_where": fs.where, "fusion_device": fs.device}
    for prec in ("bf16", "fp8"):
        for b, key in ((1, "1"), (batch_max, "64")):
            out.update({f"fus_{prec}_{key}": pick(prec, b, "fused_ms"), f"unf_{prec}_{key}": pick(prec, b, "unfused_ms"),
                        f"fus_x_{prec}_{key}": pick(prec, b, "speedup")})
        out[f"k_fus_{prec}_1"] = int(pick(prec, 1, "fused_kernels"))
        out[f"k_unf_{prec}_1"] = int(pick(prec, 1, "unfused_kernels"))
        m = fs.sweep_meta(prec, "fused")
        out[f"compile_s_{prec}"] = float(m.get("compile_s", float("nan")))
    out["fp8_vs_bf16_1"] = out["fus_fp8_1"] / out["fus_bf16_1"]
    out["fp8_vs_bf16_64"] = out["fus_fp8_64"] / out["fus_bf16_64"]
    out["fus_bmax"] = int(batch_max)
    out["eager_in_study"] = "and eagerly" if (tab["mode"] == "eager").any() else "only (the study timed no eager step)"
    return out


KERNEL_COLUMNS = ["component", "fused", "unfused", "sglang_op_list"]


def kernel_compare(fs: mb.FusionStudy, unfused: mb.StepMeasurement, m: ma.ModelConfig, context: int,
                   batch: int = 1, precision: str = "bf16") -> pd.DataFrame:
    """Kernels per step by component at `batch`: the fused step's and the unfused one's (measured: kernel nodes
    of each component's own captured graph; the unfused from the fusion study where it timed components, else
    from `unfused`), beside the budget's op list for SGLang (assumed, sglang_kernels), and the whole step."""
    sg = sglang_kernels(m)
    rows_ = []
    for c in SPLIT + ("step",):
        fu = fs.step(precision, "fused", batch, context, c)
        un = fs.step(precision, "unfused", batch, context, c)
        if un is None:
            un = unfused.row(batch, context, c)
        rows_.append({"component": c, "fused": fu["kernels"] if fu is not None else np.nan, "unfused": un["kernels"],
                      "sglang_op_list": int(sg.sum() - sg.get("collectives", 0)) if c == "step" else int(sg.get(c, 0))})
    rows_.append({"component": "collectives (not on one GPU)", "fused": np.nan, "unfused": np.nan,
                  "sglang_op_list": int(sg.get("collectives", 0))})
    return pd.DataFrame(rows_)[KERNEL_COLUMNS]


def engine_table(fs: mb.FusionStudy, m: ma.ModelConfig, context: int, batches) -> pd.DataFrame:
    """The fused step's components and whole step against the engine composite on the same GPU class
    (measured.engine_fidelity), bf16 and FP8, at each of `batches`."""
    out = []
    for prec in ("bf16", "fp8"):
        floor = float(fs.sweep_meta(prec, "fused")["graph_us_per_kernel"])
        for b in batches:
            out.append(mb.engine_fidelity(fs.timings, m, int(b), context, prec, floor, "fused", fs.where))
    return pd.concat(out, ignore_index=True)


def engine_values(tab: pd.DataFrame, batch_max: int, tol: float = mb.FIDELITY_TOLERANCE) -> dict:
    """The whole step's ratio to the engine per precision at 1 and `batch_max`, and the components outside
    `tol` (named with their ratio), as the page says them."""
    out = {"engine_tol": tol}
    for prec in ("bf16", "fp8"):
        for b, key in ((1, "1"), (batch_max, "64")):
            out[f"eng_{prec}_{key}"] = float(one(tab, "the engine table", precision=prec, batch=b,
                                                 component="step")["ratio"])
    comp = tab[tab["component"] != "step"]
    bad = comp[comp["ratio"] > tol]
    out["engine_outside"] = ("none" if not len(bad) else
                             "; ".join(f"{r.component} ({r.precision}, batch {r.batch}: {r.ratio:.2f}x)"
                                       for r in bad.itertuples()))
    out["engine_worst"] = float(comp["ratio"].max())
    return out


def kernel_values(tab: pd.DataFrame) -> dict:
    """The kernel comparison's whole-step figures: the op list's kernels on one GPU and its collectives, the
    fused step's kernels over the op list's, and the share of the unfused step's kernels fusion removed."""
    st = one(tab, "the kernel comparison", component="step")
    coll = one(tab, "the kernel comparison", component="collectives (not on one GPU)")
    return {"k_sglang": int(st["sglang_op_list"]), "k_sglang_coll": int(coll["sglang_op_list"]),
            "k_vs_sglang": float(st["fused"]) / float(st["sglang_op_list"]),
            "k_removed_pct": 100 * (1 - float(st["fused"]) / float(st["unfused"]))}
