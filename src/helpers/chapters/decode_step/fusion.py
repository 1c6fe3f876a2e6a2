"""The decode-step chapter's fusion section: what fusion bought, kernels beside SGLang's op list, and the
fused step against an engine on the same GPU."""
from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.chapters.decode_step.measurement import SPLIT
from helpers.core.pick import one, rows
from helpers.model import arith as ma
from helpers.model import budget as bd
from helpers.model import measured as mb

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
                                             f"helpers.chapters.decode_step.SGLANG_COMPONENT; add it")
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
        if prec == "bf16":
            out["k_fus_bf16_64"] = int(pick(prec, batch_max, "fused_kernels"))
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
    bad = comp[(comp["ratio"] > tol) | (comp["ratio"] < 1 / tol)]   # either way, as the diagnosis's check
    out["engine_outside"] = ("none" if not len(bad) else
                             "; ".join(f"{r.component} ({r.precision}, batch {r.batch}: {r.ratio:.2f}x)"
                                       for r in bad.itertuples()))
    out["engine_worst"] = float(comp["ratio"].max())
    return out


def kernel_values(tab: pd.DataFrame, fused_at_max: float = float("nan")) -> dict:
    """The kernel comparison's whole-step figures: the op list's kernels on one GPU and its collectives, the
    fused step's kernels over the op list's (the table's batch, one sequence; and `fused_at_max`, the fused step's
    kernels at the largest batch, over the same op list, which does not depend on the batch), and the share of
    the unfused step's kernels fusion removed."""
    st = one(tab, "the kernel comparison", component="step")
    coll = one(tab, "the kernel comparison", component="collectives (not on one GPU)")
    return {"k_sglang": int(st["sglang_op_list"]), "k_sglang_coll": int(coll["sglang_op_list"]),
            "k_vs_sglang": float(st["fused"]) / float(st["sglang_op_list"]),
            "k_vs_sglang_64": float(fused_at_max) / float(st["sglang_op_list"]),
            "k_removed_pct": 100 * (1 - float(st["fused"]) / float(st["unfused"]))}
