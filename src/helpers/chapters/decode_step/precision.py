"""The decode-step chapter's bf16 against FP8 and the shared expert beside the routed ones: the sweeps it
adds on a GPU, the weights and bytes in each precision, FP8's accuracy, and what its prose cites."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Mapping

import pandas as pd

from helpers.chapters.decode_step.measurement import BYTES_BATCHES, EXPERTS_IMPL, SPLIT, dense_bytes, sweep_config
from helpers.chapters.decode_step.values import Fp8NumericsValues
from helpers.core.pick import one
from helpers.model import arith as ma
from helpers.model import measured as mb
from helpers.model.measured import fp8numerics
from helpers.model import step as stp
from helpers.model import steptime

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
                    progress=print) -> tuple[steptime.SweepResult | None, str]:
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
    merged.meta["failed"] = failed
    return merged, ""


def precision_source(ps: mb.PrecisionStudy | None) -> str:
    """Where the chapter's bf16-against-FP8 timings come from: this run, a data/ folder, or none."""
    return "none" if ps is None else f"{ps.where} ({ps.device})"


def precision_experts_impl(ps: mb.PrecisionStudy | None) -> str:
    """How the experts ran in the sweeps whose rows `ps` holds (each sweep's meta `moe_impl`), in words."""
    if ps is None:
        return "no implementation: no FP8 measurement exists"
    fusions = set(ps.timings["fusion"].astype(str)) if "fusion" in ps.timings.columns else {"unfused"}
    impls = sorted({str(m["moe_impl"]) for m in ps.meta.get("sweeps", {}).values()
                    if m.get("moe_impl") and m.get("config", {}).get("fusion", "unfused") in fusions})
    return " and ".join(EXPERTS_IMPL.get(i, repr(i)) for i in impls) or "an implementation the measurement does not record"


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


def fp8_numerics(gpu: bool, p: Mapping) -> tuple[fp8numerics.Fp8Numerics, Fp8NumericsValues]:
    """The FP8 check of the scaled-down model at the chapter's CPU shapes (`cpu_model`, the largest
    `cpu_batches` and `cpu_contexts`): a GPU run computes it; a CPU run presents the committed study where
    its parameters match (data/measured, role fp8-numerics-cpu) and computes it where they do not."""
    num = fp8numerics.select(gpu, p["cpu_model"], max(p["cpu_batches"]), max(p["cpu_contexts"]))
    return num, Fp8NumericsValues(fp8_numerics_where=num.where, fp8_cpu_products=num.cpu_products)


def saved_numerics(run) -> tuple[fp8numerics.Fp8Numerics, Fp8NumericsValues]:
    """The FP8 check a GPU run computed on its machine's CPU and saved (fp8_check, fp8_products), presented again
    by a replay without computing anything."""
    num = fp8numerics.Fp8Numerics(run.load("fp8_check"), run.load("fp8_products"),
                                  "computed in the run on its machine's CPU, presented again from what it saved",
                                  "that machine's CPU: whether by torch._scaled_mm or emulated in float32 from the "
                                  "same E4M3 values and scales, the run did not save")
    return num, Fp8NumericsValues(fp8_numerics_where=num.where, fp8_cpu_products=num.cpu_products)


def precision_bytes(meas: mb.StepMeasurement, m: ma.ModelConfig, tp: int, context: int,
                    batches=BYTES_BATCHES) -> tuple[pd.DataFrame, dict]:
    """GiB one rank reads per component in bf16, in FP8 and at the checkpoint's formats (derived by
    stp.component_bytes, with the experts `meas`'s routing touched at each batch), and the values the
    text cites: totals, FP8's share of bf16, and the datasheet time of the FP8 bytes (a bound)."""
    by = dense_bytes(meas, context, batches)
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
    every MoE layer, plus the dense layers' MLP, which nothing overlaps); and, where the study timed the shared
    expert's own operations, the share it hid as the diagnosis defines it (helpers.model.verdict.overlap_fractions:
    saved over those operations alone; blank elsewhere), so the two pages can be checked against each other."""
    from helpers.model.verdict.ranges import VerdictInputError, overlap_fractions   # the diagnosis's definition
    try:
        hid = overlap_fractions(ps).set_index(["dtype", "batch", "context"])["hidden_fraction"]
    except VerdictInputError:   # a study without the shared expert's own operations has no such point: blank
        hid = pd.Series(dtype=float)
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
                        "shared_dense_alone_ms": float(shared["median_us"]) / 1e3,
                        "hidden_share": float(hid.get((prec, int(b), int(context)), float("nan")))})
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


def precision_values(ps: mb.PrecisionStudy | None, context: int,
                     overlap: mb.PrecisionStudy | None = None) -> dict[str, float]:
    """The figures 07_decode_step's FP8 takeaway cites: FP8's whole step and its experts as a multiple of
    bf16's time (above 1: slower) at one sequence and at the study's largest batch, the experts' achieved
    GB/s in each precision there, the attention block's multiple at one sequence, and what the second
    stream saved in bf16 (ms and share of the one-stream step: from `overlap` where given, else `ps`). NaN
    for each where the study is None or lacks the rows (no FP8 measurement exists), so the page's sentence
    stays and says nan."""
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
    ovs = overlap if overlap is not None else ps
    if has_overlap_pair(ovs):
        ov = overlap_steps(ovs, context)
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
