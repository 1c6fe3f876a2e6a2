"""The step priced two ways for the recorded GPUs (see helpers.model.measured): on aiconfigurator's measured
kernels (kernel_terms) and as this run's emulated step projected there (projected_terms); and the budgets
table, the goal and aiconfigurator's own shares the diagnosis shows."""
from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.model import arith as ma
from helpers.model import budget as bd
from helpers.model import kernels as kt

from .fidelity import engine_fidelity
from .studies import TP, MeasuredBudgetError, StepMeasurement, gpu_bandwidth, spec_name

# helpers.model.step (which imports torch) is imported inside the functions that use it, not at the top: the chapter
# modules that read measured studies import this module, and a recorded-mode kernel of chapter 08 (and any process
# that imports it for its tables) otherwise paid torch's import, about 2 s of CPU, for shapes it never computes.

# --------------------------------------------------------------------------------------------------
# What SGLang runs per decode step on one rank, and the kernel each op is priced with

#: ops the aiconfigurator tables price (name in helpers.model.budget's op lists -> pricing)
PRICED = {"fused q_a + kv_a projection", "q_b projection", "absorbed k (bmm)", "attention", "absorbed v (bmm)",
          "o_proj", "all-reduce", "indexer wq_b", "indexer wk", "indexer weights_proj", "gate_up", "down",
          "router", "shared gate_up", "shared down", "quantize input", "permute", "grouped gemm 1",
          "activation + quantize", "grouped gemm 2", "unpermute + reduce", "embedding all-reduce", "lm_head",
          "logits all-gather"}


def small_op_counts(m: ma.ModelConfig) -> dict[str, int]:
    """Kernels per layer (and for the head) that no aiconfigurator table prices: the budget's op lists
    (one kernel per listed operation, assumed) minus the priced ones."""
    att = [o for o in bd.ATTENTION_OPS if o not in PRICED]
    idx = [o for o in bd.INDEXER_OPS if o not in PRICED] if m.has_indexer else []
    return {"attention": len(att), "indexer": len(idx),
            "dense": len([o for o in bd.DENSE_MLP_OPS if o not in PRICED]),
            "moe": len([o for o in bd.MOE_OPS if o not in PRICED]),
            "head": len([o for o in bd.HEAD_OPS if o not in PRICED])}


def _attention_rows(add, m: ma.ModelConfig, sh, system: str, b: int, context: int, dsa: bool, tab: str) -> None:
    """kernel_terms' attention rows: the whole DSA module, or dense MLA decode with its projections."""
    att_fmt, h, L = m.fmt("attention"), m.hidden, m.layers
    if dsa:
        if att_fmt not in DSA_TABLE_MODEL:
            raise MeasuredBudgetError(f"no DSA module table for attention weights in {att_fmt}; known: "
                                      f"{sorted(DSA_TABLE_MODEL)}")
        kv = kt.DTYPE.get(m.fmt("kv_cache"), m.fmt("kv_cache"))
        add("attention", "attention", L, kt.dsa_module_us(b, max(int(context), 2), system, DSA_TABLE_MODEL[att_fmt],
                                                          att_fmt, kv), "measured",
            f"{tab} DSA module ({DSA_TABLE_MODEL[att_fmt]}: projections, indexer, sparse attention, o_proj)")
    else:
        for op, n, k in (("fused q_a + kv_a", m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim, h),
                         ("q_b", sh.heads * m.qk_head_dim, m.q_lora_rank), ("o_proj", h, sh.heads * m.v_head_dim)):
            add("attention", op, L, kt.gemm_us(system, att_fmt, b, n, k), "measured", f"{tab} GEMM {att_fmt}")
        add("attention", "absorbed k (bmm)", L, kt.mla_bmm_us(system, "mla_gen_pre", b), "measured",
            f"{tab} mla_gen_pre bf16 (DeepSeek head dims)")
        add("attention", "attention", L, kt.mla_us(system, b, context, "bfloat16"), "measured",
            f"{tab} MLA decode, bf16 KV (latent 512 + 64)")
        add("attention", "absorbed v (bmm)", L, kt.mla_bmm_us(system, "mla_gen_post", b), "measured",
            f"{tab} mla_gen_post bf16 (DeepSeek head dims)")


#: the attention paths kernel_terms prices: SGLang's dense MLA decode (GLM-5 on SM120, as the bare-metal reference
#: ran it) from the MLA tables, or its whole DSA module (projections, indexer, sparse attention, o_proj) from
#: aiconfigurator's dsa_generation_module table (H200, B200)
ATTENTION_PATHS = ("dense", "dsa")
#: the DSA module table's checkpoint for the attention precision of a model configuration
DSA_TABLE_MODEL = {"bf16": "zai-org/GLM-5", "fp8_block": "zai-org/GLM-5-FP8"}


def kernel_terms(m: ma.ModelConfig, batch: int, context: int, floor_us: float, system: str = kt.RTX,
                 distribution: str = kt.AIC_DISTRIBUTION, overlap_shared: bool = True,
                 collectives: bool = True, attention: str = "dense", moe_kernel: str | None = None) -> pd.DataFrame:
    """The step on measured kernels, one row per operation kind: component, op, count per step, us per
    call, us per step, and the kind of each figure. `attention` is one of ATTENTION_PATHS; `moe_kernel` picks the
    fused-MoE kernel where the table times several for the routed experts' precision (None: every row)."""
    if attention not in ATTENTION_PATHS:
        raise MeasuredBudgetError(f"attention path {attention!r} is not one of {ATTENTION_PATHS}")
    from helpers.model import step as stp   # not at the top: see the note under the imports
    sh = stp.shard_sizes(m, TP)
    b, h = int(batch), m.hidden
    att_fmt = m.fmt("attention")
    rows = []

    def add(component, op, count, us, kind, source):
        rows.append({"component": component, "op": op, "count": count, "us_each": us, "us_step": count * us,
                     "kind": kind, "source": source})

    tab = f"aiconfigurator {system}"
    L, Lm, Ld = m.layers, m.moe_layers, m.dense_layers
    dsa = attention == "dsa"
    _attention_rows(add, m, sh, system, b, context, dsa, tab)
    if m.has_indexer and not dsa:
        for op, n, k in (("indexer wq_b", m.index_n_heads * m.index_head_dim, m.q_lora_rank),
                         ("indexer wk", m.index_head_dim, h), ("indexer weights_proj", m.index_n_heads, h)):
            add("indexer", op, L, kt.gemm_us(system, att_fmt, b, n, k), "measured", f"{tab} GEMM {att_fmt}")
    small = small_op_counts(m)
    add("norms and small ops", "attention small ops (norms, rope, KV store, residual)", L * small["attention"],
        floor_us, "measured floor x assumed count", "graph floor of this run's GPU x budget op list")
    if m.has_indexer and not dsa:
        add("indexer", "indexer small ops (k_norm, rope, key store, scores, top-k)", L * small["indexer"],
            floor_us, "measured floor x assumed count", "graph floor of this run's GPU x budget op list")
    if Ld:
        f = m.fmt("dense_mlp")
        add("shared/dense MLP", "dense gate_up", Ld, kt.gemm_us(system, f, b, 2 * sh.dense_inter, h), "measured",
            f"{tab} GEMM {f}")
        add("shared/dense MLP", "dense down", Ld, kt.gemm_us(system, f, b, h, sh.dense_inter), "measured",
            f"{tab} GEMM {f}")
        add("norms and small ops", "dense activation", Ld * small["dense"], floor_us,
            "measured floor x assumed count", "graph floor x budget op list")
    if Lm:
        ef, sf = m.fmt("routed_experts"), m.fmt("shared_experts")
        router = kt.gemm_us(system, "bf16", b, m.n_routed, h)
        experts = kt.moe_us(system, ef, b, distribution, kernel_source=moe_kernel)
        shared = kt.gemm_us(system, sf, b, 2 * sh.shared_inter, h) + kt.gemm_us(system, sf, b, h, sh.shared_inter)
        add("moe", "router", Lm, router, "measured", f"{tab} GEMM bf16")
        add("moe", "routed experts (fused MoE kernel)", Lm, experts, "measured",
            f"{tab} {moe_kernel or kt.moe_kernel(system, ef)} {ef}, {distribution}")
        add("shared/dense MLP", "shared expert (gate_up + down)", Lm, shared, "measured", f"{tab} GEMM {sf}")
        add("norms and small ops", "MoE small ops (top-k, activation, add)", Lm * small["moe"], floor_us,
            "measured floor x assumed count", "graph floor x budget op list")
        if overlap_shared:
            hidden = min(shared, router + experts)
            add("shared/dense MLP", "shared expert beside the routed ones (overlap)", Lm, -hidden, "derived",
                "SGLang runs the shared expert on a second stream: time = the longer path (aiconfigurator's rule)")
    add("lm_head", "lm_head", 1, kt.gemm_us(system, m.fmt("embeddings"), b, sh.vocab, h), "measured",
        f"{tab} GEMM {m.fmt('embeddings')}")
    add("norms and small ops", "head small ops (embedding, final norm, sampling)", small["head"], floor_us,
        "measured floor x assumed count", "graph floor x budget op list")
    if collectives:
        for c in ma.collective_schedule(m):
            tokens = b
            op = c.kind
            us = kt.comm_us(system, op, TP, tokens * c.bytes_per_token)
            add("collectives", c.name, c.per_step, us, "measured", f"{tab} NCCL {op} x{TP}")
    return pd.DataFrame(rows)


def components(terms: pd.DataFrame) -> pd.DataFrame:
    """us per step by component (rows summed)."""
    return terms.groupby("component", sort=False)["us_step"].sum().rename("us").reset_index()


# --------------------------------------------------------------------------------------------------
# The projection of this run's emulated step to the recorded GPU


#: a component of the emulated step is projected only where its time on its own GPU is within this factor of
#: the engine composite for the same op list on that GPU class (engine_fidelity; issue 22's per-component bound)
FIDELITY_TOLERANCE = 1.5
PROJECTED = ("attention", "indexer", "moe", "shared/dense MLP", "norms and small ops", "lm_head")


def component_fidelity(meas: StepMeasurement, m: ma.ModelConfig, batch: int, context: int) -> dict[str, float] | None:
    """Each component's measured time over the engine composite on the measurement's own GPU class
    (engine_fidelity, the measurement's precision and fusion path); None where aiconfigurator has no SGLang
    tables for that GPU class (only H200 among the classes a measurement comes from)."""
    if spec_name(meas.device) != kt.H200:
        return None
    prec = str(meas.timings["dtype"].iloc[0])
    if prec not in ("bf16", "fp8"):
        return None
    f = engine_fidelity(meas.timings, m, batch, context, prec, meas.floor_us(), meas.fusion, meas.where)
    return {str(r.component): float(r.ratio) for r in f.itertuples() if r.component != "step"}


def projected_terms(meas: StepMeasurement, m: ma.ModelConfig, batch: int, context: int, target: str = kt.RTX,
                    collectives: bool = True, tolerance: float | None = FIDELITY_TOLERANCE) -> pd.DataFrame:
    """Each component of this run's emulated step moved to `target` (see the module docstring). With a
    `tolerance`, only the components whose measured time is within that factor of the engine composite on
    the measurement's own GPU class (component_fidelity) are projected; each of the others takes its time
    from aiconfigurator's kernels measured on `target` (kernel_terms, the same component), and says so in
    `priced_by`. Where no engine tables exist for the measurement's GPU every component is projected."""
    floor = meas.floor_us()
    here = gpu_bandwidth(spec_name(meas.device))
    there = gpu_bandwidth(target)
    ratio_bw = here.value / there.value
    fid = component_fidelity(meas, m, batch, context) if tolerance is not None else None
    table = None
    rows = []
    for comp in PROJECTED:
        r = meas.row(batch, context, comp)
        kernels = float(r["kernels"]) if pd.notna(r["kernels"]) else float("nan")
        launch = kernels * floor if np.isfinite(kernels) else 0.0
        rest = max(0.0, float(r["median_us"]) - launch)
        by = meas.component_bytes(batch, context, comp)
        br = float(by["bytes_checkpoint"]) / float(by["bytes_emulated"]) if float(by["bytes_emulated"]) else 1.0
        proj = launch + rest * br * ratio_bw
        ratio = fid.get(comp, np.nan) if fid is not None else np.nan
        row = {"component": comp, "measured_us": float(r["median_us"]), "kernels": kernels,
               "launch_us": launch, "bytes_ratio": br, "bandwidth_ratio": ratio_bw, "engine_ratio": ratio,
               "us": proj, "priced_by": "projection", "kind": "derived",
               "source": f"{meas.where}: projected to {target}"}
        if fid is not None and not (ratio <= tolerance):
            if table is None:
                table = kernel_terms(m, batch, context, floor, target, collectives=False)
            us = float(table.loc[table["component"] == comp, "us_step"].sum())
            row.update({"us": us, "priced_by": f"aiconfigurator {target} tables",
                        "kind": "reference kernels", "source": f"aiconfigurator {target} (kernel_terms): this "
                        f"component took {ratio:.2f}x the engine composite on {meas.device}, over {tolerance:g}x"})
        rows.append(row)
    if collectives:
        for c in ma.collective_schedule(m):
            us = kt.comm_us(target, c.kind, TP, batch * c.bytes_per_token)
            rows.append({"component": "collectives", "measured_us": np.nan, "kernels": np.nan, "launch_us": np.nan,
                         "bytes_ratio": np.nan, "bandwidth_ratio": np.nan, "engine_ratio": np.nan, "us": c.per_step * us,
                         "priced_by": f"aiconfigurator {target} tables",
                         "kind": "reference", "source": f"aiconfigurator {target} NCCL {c.kind} x{TP}"})
    return pd.DataFrame(rows)



# --------------------------------------------------------------------------------------------------
# The comparison the diagnosis shows


#: aiconfigurator's estimates the budgets table carries, by budget id: the DeepSeek-V3 substitution (the
#: "aiconfigurator" row the diagnosis has always compared with) and GLM-5's own graph with only its
#: attention swapped for dense MLA decode (helpers.model.kernels.GLM5_GRAPH)
AIC_BUDGETS = {"aiconfigurator": kt.DSV3_GRAPH, "aiconfigurator glm5 graph": kt.GLM5_GRAPH}


def with_indexer(terms: pd.DataFrame, fraction: float) -> pd.DataFrame:
    """kernel_terms with the indexer component's time scaled by `fraction` (0: the indexer does not run, as on
    a deployment that runs GLM-5's attention densely)."""
    t = terms.copy()
    t.loc[t["component"] == "indexer", "us_step"] *= fraction
    return t


def budgets_table(m: ma.ModelConfig, old_pred: pd.DataFrame, meas: StepMeasurement, context: int,
                  tolerance: float = 0.25, bare_indexer: float = 1.0) -> pd.DataFrame:
    """Predicted and observed output tokens/s at concurrency 1 (per stream) and 64 (aggregate), per system
    and budget: the old budget (assumed compute), measured kernels, the projection of this run, and
    aiconfigurator's own estimates (AIC_BUDGETS); with the relative error against the observation.
    `bare_indexer`: the share of the indexer's kernels bare metal's measured-kernel budget prices (the
    verdict's bare-metal indexer input at its middle value)."""
    obs = bd.primary_observations()
    floor = meas.floor_us()
    rows = []
    for r in obs.itertuples():
        b = int(r.concurrency)
        bare = r.system != "original VM"
        old_scen = bd.BAREMETAL_SCENARIO if bare else bd.VM_SCENARIO
        p = old_pred[(old_pred["scenario"] == old_scen) & (old_pred["batch"] == b)
                     & np.isclose(old_pred["prefill_ratio"].astype(float), 0.0)]
        if not len(p):
            raise MeasuredBudgetError(f"the old prediction has no row for '{old_scen}' at batch {b}")
        entries = [("old", "old budget (assumed compute)", float(p["total_ms"].iloc[0]) * 1e3, "assumed compute")]
        kt_ = kernel_terms(m, b, context, floor, collectives=bare)
        kt_ = with_indexer(kt_, bare_indexer) if bare else kt_
        pj = projected_terms(meas, m, b, context, collectives=bare)
        # budget id "measured kernels" is the table's key; what a reader sees names the source: aiconfigurator's
        # kernel tables, timed by aiconfigurator on the recorded GPU (reference in the book's terms)
        entries.append(("measured kernels", "aiconfigurator's kernel tables (RTX PRO 6000, reference)"
                        + ("" if bare else ", compute only"), float(kt_["us_step"].sum()), "reference"))
        entries.append(("projection", f"projection of this run's step ({meas.device})" + ("" if bare else ", compute only"),
                        float(pj["us"].sum()), "derived"))
        if bare:
            for bid, sub in AIC_BUDGETS.items():
                est, status, _ = kt.estimate_step_us(b, sub)
                if est is not None:
                    entries.append((bid, f"aiconfigurator estimate ({status})", est, "reference"))
        for bid, name, us, kind in entries:
            pred = b * 1e6 / us
            rows.append({"system": r.system, "concurrency": b, "budget_id": bid, "budget": name, "kind": kind,
                         "step_ms": us / 1e3, "predicted_tok_s": pred, "observed_tok_s": r.observed,
                         "rel_err": (pred - r.observed) / r.observed,
                         "within_tolerance": abs(pred - r.observed) / r.observed <= tolerance})
    return pd.DataFrame(rows)


#: the budgets of budgets_table, by the id each row carries in its `budget_id` column
BUDGET_IDS = ("old", "measured kernels", "projection", *AIC_BUDGETS)


def pick_budget(table: pd.DataFrame, system: str, concurrency: int, budget_id: str) -> pd.Series:
    """The one row of a budgets_table for `system`, `concurrency` and `budget_id` (one of BUDGET_IDS);
    MeasuredBudgetError naming what is missing and what the table has."""
    if budget_id not in BUDGET_IDS:
        raise MeasuredBudgetError(f"budget id {budget_id!r} is not one of {BUDGET_IDS}")
    r = table[(table["system"] == system) & (table["concurrency"] == concurrency) & (table["budget_id"] == budget_id)]
    if len(r) != 1:
        have = sorted(f"{s} @{c}: {b}" for s, c, b in table[["system", "concurrency", "budget_id"]].drop_duplicates()
                      .itertuples(index=False))
        raise MeasuredBudgetError(f"budgets table: {len(r)} rows for {system!r} at concurrency {concurrency} with "
                                  f"budget_id {budget_id!r} (expected one); the table has {have}")
    return r.iloc[0]


def goal(table: pd.DataFrame, terms: dict[int, pd.DataFrame], tolerance: float = 0.25,
         system: str = "bare metal (reference)") -> pd.DataFrame:
    """The issue's goal per concurrency: the measured-kernel budget within `tolerance` of the observation,
    and at least as close as aiconfigurator's own estimate; where the step misses, how much each of its two
    largest components would have to shrink (or grow) to close the gap alone (derived)."""
    rows = []
    for c in sorted(terms):
        ours = pick_budget(table, system, c, "measured kernels")
        try:   # the fair comparator: aiconfigurator on GLM-5's own graph (the dense attention the reference ran)
            aic = pick_budget(table, system, c, "aiconfigurator glm5 graph")
            aic_err = abs(float(aic["rel_err"]))
        except MeasuredBudgetError:
            aic_err = float("nan")
        comp = components(terms[c]).sort_values("us", ascending=False)
        observed_ms = c / float(ours["observed_tok_s"]) * 1e3
        gap_ms = float(ours["step_ms"]) - observed_ms
        big = comp.iloc[:2]
        rows.append({"concurrency": c, "rel_err": float(ours["rel_err"]), "within": abs(float(ours["rel_err"])) <= tolerance,
                     "aic_rel_err": aic_err, "as_close_as_aic": bool(abs(float(ours["rel_err"])) <= aic_err)
                     if np.isfinite(aic_err) else None,
                     "predicted_ms": float(ours["step_ms"]), "observed_ms": observed_ms, "gap_ms": gap_ms,
                     "largest": str(big.iloc[0]["component"]), "largest_ms": float(big.iloc[0]["us"]) / 1e3,
                     "largest_change": -gap_ms / (float(big.iloc[0]["us"]) / 1e3),
                     "second": str(big.iloc[1]["component"]), "second_ms": float(big.iloc[1]["us"]) / 1e3,
                     "second_change": -gap_ms / (float(big.iloc[1]["us"]) / 1e3)})
    return pd.DataFrame(rows)


def aic_shares(batch: int, substitution: str = kt.DEFAULT_SUBSTITUTION) -> pd.DataFrame:
    """aiconfigurator's estimate split by its own operation names (share of its generation time), for one
    substitution it could run (helpers.model.kernels: DSV3_GRAPH, GLM5_GRAPH, GLM5_GRAPH_INDEXER)."""
    e = kt.estimate(substitution)
    e = e[(e["batch"] == batch) & e["quantity"].str.startswith("share of generation") & (e["status"] == "ok")]
    if not len(e):
        raise MeasuredBudgetError(f"aic_estimate.csv has no per-op shares for batch {batch} with substitution "
                                  f"{substitution!r}")
    step_us, _, _ = kt.estimate_step_us(batch, substitution)
    return pd.DataFrame({"op": e["quantity"].str.replace("share of generation: ", "", regex=False),
                         "share": e["value"].astype(float), "ms": e["value"].astype(float) * step_us / 1e3})
