"""The decode-step budget on measured compute, for the recorded GPUs (8x RTX PRO 6000, TP8).

Two ways to price one decode step of GLM-5 on the recorded GPU class, neither fitted to the observations
they are checked against:

1. **Measured kernels** (`kernel_terms`): every operation SGLang runs for which aiconfigurator ships a
   kernel time measured on RTX PRO 6000 Blackwell Server Edition takes that time (GEMMs by dtype, the
   flashinfer_cutlass NVFP4 MoE kernel, MLA decode attention and its two bmms, NCCL all-reduce and
   all-gather over 8 GPUs), interpolated between grid points where the shape falls between them. The
   small operations the tables do not cover (norms, rotary embedding, KV stores, the indexer's scores
   and top-k, top-k routing, activations, residual adds, embedding, sampling) cost one kernel each of the
   graph-replay floor measured on this run's GPU (measured floor x assumed count, labelled so). As SGLang
   does under CUDA graphs, the shared expert runs beside the routed experts (time = the longer of the
   two, aiconfigurator's own rule).
2. **Projection of this run's emulated step** (`projected_terms`, derived): each component's time on
   the recorded GPU = its launch floor (its kernels x the floor, both measured here) + the rest of its
   measured time x (its bytes at the checkpoint's precision / the bytes the emulation read) x (this GPU's
   datasheet bandwidth / the recorded GPU's). Stated in words: the component reaches the same fraction of
   the datasheet bandwidth on the recorded GPU as it did here, at the same shape and batch.

`op_fidelity` sets this run's per-op times beside aiconfigurator's for the same operation: on the same
GPU class (H200, like for like in bf16) and, projected, on the recorded one.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from helpers.core import layout, recorded
from helpers.model import arith as ma
from helpers.model import budget as bd
from helpers.model import kernels as kt
from helpers.model import step as stp

STEP_CHAPTER = "07_decode_step"
STEP_ROLE = "decode-step"     # the measured study (data/sources.yaml role) used where this run has none
FUSED_ROLE = "decode-step-fused"   # the fused step beside the unfused one, bf16 and FP8 (device-step-fused.sh)
PRECISION_ROLE = "decode-step-fp8"   # the bf16-against-FP8 study (and the overlap on and off), likewise
TP = 8


class MeasuredBudgetError(LookupError):
    """A measurement or table row the budget needs is missing."""


# --------------------------------------------------------------------------------------------------
# The step measurement the projection uses


@dataclass(frozen=True)
class StepMeasurement:
    timings: pd.DataFrame
    bytes: pd.DataFrame
    meta: dict
    where: str            # "this run" or the data/ folder
    device: str
    source: str

    def floor_us(self) -> float:
        v = self.meta.get("graph_us_per_kernel")
        if not v:
            raise MeasuredBudgetError(f"{self.where}: no graph launch floor (meta graph_us_per_kernel): the "
                                      f"measurement was not made with CUDA graphs")
        return float(v)

    def meta_value(self, key: str):
        """One entry of the measurement's meta.json; MeasuredBudgetError naming it where it is absent."""
        if key not in self.meta:
            raise MeasuredBudgetError(f"{self.where}: the measurement's meta has no '{key}' (it has "
                                      f"{sorted(self.meta)})")
        return self.meta[key]

    @property
    def fusion(self) -> str:
        """The step's implementation path (helpers.model.step.FUSIONS): the timings' `fusion` column, or
        "unfused" for studies made before the fused path existed (they have no such column)."""
        t = self.timings
        if "fusion" not in t.columns:
            return "unfused"
        found = sorted(set(t["fusion"].dropna().astype(str)))
        if len(found) != 1:
            raise MeasuredBudgetError(f"{self.where}: timings of {found or 'no'} fusion paths (expected one; "
                                      f"keep one sweep's rows per measurement)")
        return found[0]

    def has_op(self, name: str) -> bool:
        """Whether the measurement timed an op of this name alone (op names differ between fusion paths)."""
        return bool((self.timings["what"] == f"op:{name}").any())

    def peak(self) -> bd.Quantity:
        """The datasheet memory bandwidth of the GPU this was measured on (data/reference/gpu_specs.csv)."""
        return gpu_bandwidth(spec_name(self.device))

    def row(self, batch: int, context: int, what: str, mode: str = "graph", attention: str = "dense") -> pd.Series:
        t = self.timings
        r = t[(t["batch"] == batch) & (t["context"] == context) & (t["what"] == what) & (t["mode"] == mode)
              & (t["attention"] == attention)]
        if len(r) != 1:
            raise MeasuredBudgetError(f"{self.where}: {len(r)} timing rows for batch {batch}, context {context}, "
                                      f"'{what}', {mode}, {attention} (expected one)")
        return r.iloc[0]

    def component_bytes(self, batch: int, context: int, component: str, attention: str = "dense") -> pd.Series:
        b = self.bytes
        r = b[(b["batch"] == batch) & (b["context"] == context) & (b["component"] == component)]
        if "attention" in b.columns:
            r = r[r["attention"] == attention]
        if len(r) != 1:
            raise MeasuredBudgetError(f"{self.where}: {len(r)} byte rows for batch {batch}, context {context}, "
                                      f"component '{component}'")
        return r.iloc[0]


def _real_model(t: pd.DataFrame, model_name: str) -> bool:
    return len(t) and (t["model"] == model_name).all() and t["device"].astype(str).str.startswith("cuda").all() \
        and (t["tp"] == TP).all()


def step_measurement(run_dir: str | Path | None, model: str = "glm5") -> StepMeasurement:
    """This run's decode-step measurement (07_decode_step's results) where it timed the real model's TP8
    shapes on a GPU with graphs; otherwise the committed fused study's bf16 fused sweep (role FUSED_ROLE,
    where one holds the chapter's whole sweep: FusionStudy.full), else the committed study of role STEP_ROLE
    (the unfused step) under data/measured/."""
    name = ma.load_model(model).name
    if run_dir:
        t = layout.load_if_present(run_dir, STEP_CHAPTER, "step_times")
        if t is not None and _real_model(t, name) and (t["mode"] == "graph").any():
            b = layout.load(run_dir, STEP_CHAPTER, "step_bytes")
            meta = layout.load(run_dir, STEP_CHAPTER, "step_meta")
            return StepMeasurement(t, b, meta, "this run", str(meta.get("device_name", "")), "this run")
    import json

    fs = fusion_study()
    if fs is not None and fs.full():
        return fs.measurement("bf16", "fused")
    return unfused_measurement()


def unfused_measurement() -> StepMeasurement:
    """The committed study of role STEP_ROLE: the unfused step in bf16, every batch, context and mode."""
    import json

    s = recorded.study(STEP_ROLE)
    rel = f"measured/{s.id}"
    t = recorded.load(f"{rel}/timings.csv")
    b = recorded.load(f"{rel}/bytes.csv")
    meta = json.loads((recorded.data_dir() / rel / "meta.json").read_text())
    return StepMeasurement(t, b, meta, f"data/{rel}", str(meta.get("device_name", "")), s.id)


@dataclass(frozen=True)
class FusionStudy:
    """The step fused and unfused, in bf16 and FP8, as scripts/device-step-fused.sh merges it
    (steptime.merge_sweeps): every timing row with its `dtype` and `fusion`, the bytes per precision, and
    each sweep's meta under meta["sweeps"]."""

    timings: pd.DataFrame
    bytes: pd.DataFrame
    meta: dict
    where: str
    device: str
    id: str

    def sweep_meta(self, dtype: str, fusion: str) -> dict:
        """The meta of the sweep that timed `dtype` `fusion` with its components (the full one)."""
        found = [m for m in self.meta.get("sweeps", {}).values()
                 if m["config"].get("dtype") == dtype and m["config"].get("fusion", "unfused") == fusion]
        found.sort(key=lambda m: (not m["config"].get("components", True), -len(m["config"].get("batches", []))))
        if not found:
            raise MeasuredBudgetError(f"{self.where}: no {dtype} {fusion} sweep (it has "
                                      f"{sorted(self.meta.get('sweeps', {}))})")
        return found[0]

    def full(self, dtype: str = "bf16") -> bool:
        """Whether the fused sweep in `dtype` holds what the decode-step chapter reads of its measurement:
        graphs and eager, two contexts or more, op by op, DSA sparse points (a QUICK run does not)."""
        try:
            c = self.sweep_meta(dtype, "fused")["config"]
        except MeasuredBudgetError:
            return False
        return ({"graph", "eager"} <= set(c.get("modes", ())) and bool(c.get("op_level"))
                and bool(c.get("sparse_points")) and len(c.get("contexts", ())) > 1)

    def measurement(self, dtype: str = "bf16", fusion: str = "fused") -> StepMeasurement:
        """One sweep's rows as a StepMeasurement (its meta: that sweep's)."""
        t = self.timings[(self.timings["dtype"] == dtype) & (self.timings["fusion"] == fusion)]
        b = self.bytes[self.bytes["dtype"] == dtype] if "dtype" in self.bytes.columns else self.bytes
        if not len(t):
            raise MeasuredBudgetError(f"{self.where}: no {dtype} {fusion} timings")
        return StepMeasurement(t.reset_index(drop=True), b.reset_index(drop=True), self.sweep_meta(dtype, fusion),
                               self.where, self.device, self.id)

    def step(self, dtype: str, fusion: str, batch: int, context: int, what: str = "step",
             mode: str = "graph") -> pd.Series | None:
        """The one row of `what` at that point, or None where the study did not time it."""
        t = self.timings
        r = t[(t["dtype"] == dtype) & (t["fusion"] == fusion) & (t["batch"] == batch) & (t["context"] == context)
              & (t["what"] == what) & (t["mode"] == mode) & (t["attention"] == "dense")]
        if len(r) > 1:
            raise MeasuredBudgetError(f"{self.where}: {len(r)} rows for {dtype} {fusion} batch {batch} context "
                                      f"{context} '{what}' {mode} (expected at most one)")
        return r.iloc[0] if len(r) else None


def fusion_study() -> FusionStudy | None:
    """The committed study of role FUSED_ROLE: the last one registered in data/sources.yaml that holds the
    chapter's whole sweep (FusionStudy.full), else the last registered; None where there is none."""
    import json

    found = recorded.measured_studies(FUSED_ROLE)
    if not found:
        return None
    studies = []
    for s in found:
        rel = f"measured/{s.id}"
        meta = json.loads((recorded.data_dir() / rel / "meta.json").read_text())
        name = next((m.get("device_name") for m in meta.get("sweeps", {}).values()), "")
        studies.append(FusionStudy(recorded.load(f"{rel}/timings.csv"), recorded.load(f"{rel}/bytes.csv"), meta,
                                   f"data/{rel}", str(name), s.id))
    return pick_fusion_study(studies)


def pick_fusion_study(studies: list[FusionStudy]) -> FusionStudy | None:
    """Of studies in registration order: the last that holds the chapter's whole sweep, else the last."""
    full = [f for f in studies if f.full()]
    return (full or studies)[-1] if studies else None


@dataclass(frozen=True)
class PrecisionStudy:
    """The step timed in bf16 and in FP8, with the shared expert overlapped and not (steptime.merge_sweeps'
    shape): every timing row with its `dtype` and `overlap`, the bytes per precision, each sweep's meta."""

    timings: pd.DataFrame
    bytes: pd.DataFrame
    meta: dict
    where: str
    device: str

    def precisions(self) -> list[str]:
        return sorted(set(self.timings["dtype"].astype(str)))

    def row(self, dtype: str, batch: int, context: int, what: str = "step", mode: str = "graph",
            overlap: bool | None = None, attention: str = "dense") -> pd.Series:
        t = self.timings
        m = ((t["dtype"] == dtype) & (t["batch"] == batch) & (t["context"] == context) & (t["what"] == what)
             & (t["mode"] == mode) & (t["attention"] == attention))
        if overlap is not None:
            m &= t["overlap"].astype(bool) == bool(overlap)
        r = t[m]
        if len(r) != 1:
            raise MeasuredBudgetError(f"{self.where}: {len(r)} timing rows for {dtype}, batch {batch}, context "
                                      f"{context}, '{what}', {mode}, overlap {overlap} (expected one)")
        return r.iloc[0]

    def component_bytes(self, dtype: str, batch: int, context: int, component: str) -> float:
        b = self.bytes
        r = b[(b["dtype"] == dtype) & (b["batch"] == batch) & (b["context"] == context)
              & (b["component"] == component) & (b["attention"] == "dense")]
        if len(r) != 1:
            raise MeasuredBudgetError(f"{self.where}: {len(r)} byte rows for {dtype}, batch {batch}, context "
                                      f"{context}, '{component}'")
        return float(r["bytes_emulated"].iloc[0])

    def main_overlap(self) -> bool:
        """The overlap setting of the full sweeps (the ones that timed components): True where both
        precisions have component rows with the shared expert overlapped."""
        t = self.timings[self.timings["what"] == "moe"]
        on = t[t["overlap"].astype(bool)]
        return bool(len(on) and set(on["dtype"]) >= set(self.precisions()))


def precision_study(run_dir: str | Path | None) -> PrecisionStudy | None:
    """This run's bf16-against-FP8 timings (07_decode_step's `precision_times`) where it made them, else
    the committed study of role PRECISION_ROLE, else None (no FP8 measurement exists)."""
    import json

    if run_dir:
        t = layout.load_if_present(run_dir, STEP_CHAPTER, "precision_times")
        if t is not None and (t["dtype"] == "fp8").any():
            meta = layout.load(run_dir, STEP_CHAPTER, "precision_meta")
            name = next((m.get("device_name") for m in meta.get("sweeps", {}).values()), "")
            return PrecisionStudy(t, layout.load(run_dir, STEP_CHAPTER, "precision_bytes"), meta, "this run",
                                  str(name))
    found = recorded.measured_studies(PRECISION_ROLE)
    if not found:
        return None
    s = found[0]
    rel = f"measured/{s.id}"
    meta = json.loads((recorded.data_dir() / rel / "meta.json").read_text())
    name = next((m.get("device_name") for m in meta.get("sweeps", {}).values()), "")
    return PrecisionStudy(recorded.load(f"{rel}/timings.csv"), recorded.load(f"{rel}/bytes.csv"), meta,
                          f"data/{rel}", str(name))


def gpu_bandwidth(system: str) -> bd.Quantity:
    return bd.mem_bandwidth(system)


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


def kernel_terms(m: ma.ModelConfig, batch: int, context: int, floor_us: float, system: str = kt.RTX,
                 distribution: str = kt.AIC_DISTRIBUTION, overlap_shared: bool = True,
                 collectives: bool = True) -> pd.DataFrame:
    """The step on measured kernels, one row per operation kind: component, op, count per step, us per
    call, us per step, and the kind of each figure."""
    sh = stp.shard_sizes(m, TP)
    b, h = int(batch), m.hidden
    att_fmt = m.fmt("attention")
    rows = []

    def add(component, op, count, us, kind, source):
        rows.append({"component": component, "op": op, "count": count, "us_each": us, "us_step": count * us,
                     "kind": kind, "source": source})

    tab = f"aiconfigurator {system}"
    L, Lm, Ld = m.layers, m.moe_layers, m.dense_layers
    for op, n, k in (("fused q_a + kv_a", m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim, h),
                     ("q_b", sh.heads * m.qk_head_dim, m.q_lora_rank), ("o_proj", h, sh.heads * m.v_head_dim)):
        add("attention", op, L, kt.gemm_us(system, att_fmt, b, n, k), "measured", f"{tab} GEMM {att_fmt}")
    add("attention", "absorbed k (bmm)", L, kt.mla_bmm_us(system, "mla_gen_pre", b), "measured",
        f"{tab} mla_gen_pre bf16 (DeepSeek head dims)")
    add("attention", "attention", L, kt.mla_us(system, b, context, "bfloat16"), "measured",
        f"{tab} MLA decode, bf16 KV (latent 512 + 64)")
    add("attention", "absorbed v (bmm)", L, kt.mla_bmm_us(system, "mla_gen_post", b), "measured",
        f"{tab} mla_gen_post bf16 (DeepSeek head dims)")
    if m.has_indexer:
        for op, n, k in (("indexer wq_b", m.index_n_heads * m.index_head_dim, m.q_lora_rank),
                         ("indexer wk", m.index_head_dim, h), ("indexer weights_proj", m.index_n_heads, h)):
            add("indexer", op, L, kt.gemm_us(system, att_fmt, b, n, k), "measured", f"{tab} GEMM {att_fmt}")
    small = small_op_counts(m)
    add("norms and small ops", "attention small ops (norms, rope, KV store, residual)", L * small["attention"],
        floor_us, "measured floor x assumed count", "graph floor of this run's GPU x budget op list")
    if m.has_indexer:
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
        experts = kt.moe_us(system, ef, b, distribution)
        shared = kt.gemm_us(system, sf, b, 2 * sh.shared_inter, h) + kt.gemm_us(system, sf, b, h, sh.shared_inter)
        add("moe", "router", Lm, router, "measured", f"{tab} GEMM bf16")
        add("moe", "routed experts (fused MoE kernel)", Lm, experts, "measured",
            f"{tab} {kt.moe_kernel(system, ef)} {ef}, {distribution}")
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
                        "kind": "measured kernels", "source": f"aiconfigurator {target} (kernel_terms): this "
                        f"component took {ratio:.2f}x the engine composite on {meas.device}, over {tolerance:g}x"})
        rows.append(row)
    if collectives:
        for c in ma.collective_schedule(m):
            us = kt.comm_us(target, c.kind, TP, batch * c.bytes_per_token)
            rows.append({"component": "collectives", "measured_us": np.nan, "kernels": np.nan, "launch_us": np.nan,
                         "bytes_ratio": np.nan, "bandwidth_ratio": np.nan, "engine_ratio": np.nan, "us": c.per_step * us,
                         "priced_by": f"aiconfigurator {target} tables",
                         "kind": "measured", "source": f"aiconfigurator {target} NCCL {c.kind} x{TP}"})
    return pd.DataFrame(rows)


def spec_name(device_name: str) -> str:
    """The gpu_specs.csv system for a device name torch reports."""
    specs = recorded.load("reference/gpu_specs.csv")
    for s in specs["system"].unique():
        if str(s).lower() in device_name.lower() or device_name.lower() in str(s).lower():
            return str(s)
    raise MeasuredBudgetError(f"no data/reference/gpu_specs.csv row for the device '{device_name}'; known: "
                              f"{sorted(specs['system'].unique())}")


# --------------------------------------------------------------------------------------------------
# Per-op fidelity: this run's ops against aiconfigurator's


def _gemm_ops(m: ma.ModelConfig, fusion: str = "unfused", precision: str = "bf16") -> list[tuple]:
    """(op name in helpers.model.step, layers it runs in, n, k, precision group, step weight names). The fused
    path's q_a + kv_a product also carries the indexer's wk and, where it is held in the same format (not
    in fp8), its weights_proj (helpers.model.step._x_projection): n and the weights grow by theirs."""
    sh = stp.shard_sizes(m, TP)
    h = m.hidden
    xn, xw = m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim, ["qkv_a"]
    wp_alone = True
    if fusion == "fused" and m.has_indexer:
        xn, xw = xn + m.index_head_dim, xw + ["idx_wk"]
        if precision != "fp8":
            xn, xw, wp_alone = xn + m.index_n_heads, xw + ["idx_weights_proj"], False
    out = [("fused q_a + kv_a", m.layers, xn, h, "attention", xw),
           ("q_b", m.layers, sh.heads * m.qk_head_dim, m.q_lora_rank, "attention", ["q_b"]),
           ("o_proj", m.layers, h, sh.heads * m.v_head_dim, "attention", ["o_proj"]),
           ("lm_head", 1, sh.vocab, h, "embeddings", ["lm_head"])]
    if m.has_indexer:
        out += [("indexer wq_b", m.layers, m.index_n_heads * m.index_head_dim, m.q_lora_rank, "attention", ["idx_wq_b"])]
        if wp_alone:
            out += [("indexer weights_proj", m.layers, m.index_n_heads, h, "attention", ["idx_weights_proj"])]
    if m.moe_layers:
        out += [("router", m.moe_layers, m.n_routed, h, "router", ["router"]),
                ("shared gate_up", m.moe_layers, 2 * sh.shared_inter, h, "shared_experts", ["s_w13"]),
                ("shared down", m.moe_layers, h, sh.shared_inter, "shared_experts", ["s_w2"])]
    if m.dense_layers:
        out += [("dense gate_up", m.dense_layers, 2 * sh.dense_inter, h, "dense_mlp", ["d_w13"]),
                ("dense down", m.dense_layers, h, sh.dense_inter, "dense_mlp", ["d_w2"])]
    return out


EXPERT_OPS = ("permute", "grouped gemm 1", "expert activation", "grouped gemm 2", "combine")
#: the unfused FP8 step's quantizations of the experts' inputs (aiconfigurator's FP8 MoE kernel times include
#: its own; the fused step quantizes inside the producing ops, so it has no such ops)
FP8_EXPERT_OPS = ("quantize MLP input (fp8)", "quantize expert activation (fp8)")


def op_fidelity(meas: StepMeasurement, m: ma.ModelConfig, batch: int, context: int, target: str = kt.RTX
                ) -> pd.DataFrame:
    """Per operation, per layer: this run's time (measured, graphs, the op alone over every layer divided by
    its layers), aiconfigurator's time for the same operation on this run's GPU class where it has one
    (like for like: bf16), the projection of this run's time to `target` and aiconfigurator's time there
    (at the checkpoint's precision)."""
    floor = meas.floor_us()
    here_sys = spec_name(meas.device)
    aic_here = kt.H200 if here_sys == kt.H200 else None
    bw = gpu_bandwidth(here_sys).value / gpu_bandwidth(target).value
    specs = {s.name: s for s in stp.attention_specs(m) + stp.mlp_specs(m, True) + stp.mlp_specs(m, False)
             + stp.head_specs(m)}
    prec = str(meas.timings["dtype"].iloc[0])
    nb = stp.BYTES[prec]
    fusion = meas.fusion
    rows = []

    def op_time(name):
        r = meas.row(batch, context, f"op:{name}")
        return float(r["median_us"]), float(r["kernels"]) if pd.notna(r["kernels"]) else np.nan

    def project(t, kernels, layers, emul_bytes, ckpt_bytes):
        launch = (kernels / layers) * floor if np.isfinite(kernels) else 0.0
        return launch + max(0.0, t - launch) * (ckpt_bytes / emul_bytes) * bw

    for name, layers, n, k, group, wnames in _gemm_ops(m, fusion, prec):
        t, kern = op_time(name)
        t /= layers
        vals = sum(float(np.prod(stp.local_shape(specs[w], TP))) for w in wnames)
        fmt = m.fmt(group)
        ckpt = vals * ma.FORMATS[fmt]["bytes_per_value"]
        emul = sum(stp.stored_bytes(specs[w], TP, prec) for w in wnames)
        # like for like on this GPU class: SGLang's bf16 GEMM, or its FP8 W8A8 one where the step holds the
        # weight in FP8 (H200 only: aic_h200_gemm_fp8.csv)
        here_dtype = "fp8" if stp.held_in_fp8(wnames[0], prec) else "bf16"
        rows.append({"op": name, "op_kind": "gemm",
                     "ours_us": t, "aic_here_us": kt.gemm_us(aic_here, here_dtype, batch, n, k)
                     if aic_here else np.nan,
                     "projected_us": project(t, kern, layers, emul, ckpt),
                     "aic_target_us": kt.gemm_us(target, fmt if group != "router" else "bf16", batch, n, k),
                     "target_dtype": fmt if group != "router" else "bf16", "bytes_emulated": emul})
    # attention core and its two bmms
    t, kern = op_time("attention")
    kvb = batch * context * (m.kv_lora_rank + m.qk_rope_head_dim)
    rows.append({"op": "attention", "op_kind": "attention", "ours_us": t / m.layers,
                 "aic_here_us": kt.mla_us(aic_here, batch, context) if aic_here else np.nan,
                 "projected_us": project(t / m.layers, kern, m.layers, kvb * nb,
                                         kvb * ma.FORMATS[m.fmt("kv_cache")]["bytes_per_value"]),
                 "aic_target_us": kt.mla_us(target, batch, context), "target_dtype": "bf16 KV",
                 "bytes_emulated": kvb * nb})
    for name, aop, w in (("absorbed k (bmm)", "mla_gen_pre", "w_kc"), ("absorbed v (bmm)", "mla_gen_post", "w_vc")):
        t, kern = op_time(name)
        vals = float(np.prod(stp.local_shape(specs[w], TP)))
        rows.append({"op": name, "op_kind": "bmm", "ours_us": t / m.layers,
                     "aic_here_us": kt.mla_bmm_us(aic_here, aop, batch) if aic_here else np.nan,
                     "projected_us": project(t / m.layers, kern, m.layers, vals * nb, vals * 2),
                     "aic_target_us": kt.mla_bmm_us(target, aop, batch), "target_dtype": "bf16",
                     "bytes_emulated": vals * nb})
    if m.moe_layers:
        names = EXPERT_OPS + tuple(o for o in FP8_EXPERT_OPS if prec == "fp8" and meas.has_op(o))
        ts = [op_time(o) for o in names]
        t = sum(x[0] for x in ts) / m.moe_layers
        kern = sum(x[1] for x in ts)
        dist = float(meas.component_bytes(batch, context, "moe")["distinct_experts"])
        vals = dist * 3 * m.hidden * stp.shard_sizes(m, TP).moe_inter
        emul = dist * sum(stp.stored_bytes(specs[w], TP, prec) for w in ("w13", "w2")) / m.n_routed
        ef = m.fmt("routed_experts")
        # like for like on this GPU class: SGLang's bf16 fused MoE, or its FP8 (block-scaled) one for FP8
        aic_dtype = "fp8_block" if prec == "fp8" else "bf16"
        rows.append({"op": "routed experts (permute .. combine)", "op_kind": "experts", "ours_us": t,
                     "aic_here_us": kt.moe_us(aic_here, aic_dtype, batch) if aic_here else np.nan,
                     "projected_us": project(t, kern, m.moe_layers, emul, vals * ma.FORMATS[ef]["bytes_per_value"]),
                     "aic_target_us": kt.moe_us(target, ef, batch), "target_dtype": ef, "bytes_emulated": emul})
    df = pd.DataFrame(rows)
    df.insert(0, "batch", batch)
    df.insert(1, "context", context)
    df["ours_GBps"] = df["bytes_emulated"] / df["ours_us"] / 1e3
    df["ratio_here"] = df["ours_us"] / df["aic_here_us"]
    df["ratio_projected"] = df["projected_us"] / df["aic_target_us"]
    return df


def op_fidelity_table(meas: StepMeasurement, m: ma.ModelConfig, batches, context: int, target: str = kt.RTX
                      ) -> pd.DataFrame:
    """op_fidelity at each of `batches`, one table."""
    return pd.concat([op_fidelity(meas, m, b, context, target) for b in batches], ignore_index=True)


# --------------------------------------------------------------------------------------------------
# The comparison the diagnosis shows


#: aiconfigurator's estimates the budgets table carries, by budget id: the DeepSeek-V3 substitution (the
#: "aiconfigurator" row the diagnosis has always compared with) and GLM-5's own graph with only its
#: attention swapped for dense MLA decode (helpers.model.kernels.GLM5_GRAPH)
AIC_BUDGETS = {"aiconfigurator": kt.DSV3_GRAPH, "aiconfigurator glm5 graph": kt.GLM5_GRAPH}


def budgets_table(m: ma.ModelConfig, old_pred: pd.DataFrame, meas: StepMeasurement, context: int,
                  tolerance: float = 0.25) -> pd.DataFrame:
    """Predicted and observed output tokens/s at concurrency 1 (per stream) and 64 (aggregate), per system
    and budget: the old budget (assumed compute), measured kernels, the projection of this run, and
    aiconfigurator's own estimates (AIC_BUDGETS); with the relative error against the observation."""
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
        pj = projected_terms(meas, m, b, context, collectives=bare)
        entries.append(("measured kernels", "measured kernels (aiconfigurator RTX PRO 6000)"
                        + ("" if bare else ", compute only"), float(kt_["us_step"].sum()), "measured"))
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
        try:
            aic = pick_budget(table, system, c, "aiconfigurator")
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


# --------------------------------------------------------------------------------------------------
# The fused step against an engine on the same GPU (H200): aiconfigurator's SGLang kernels for the same op list

#: fused-step op (helpers.model.step, fusion "fused") -> (component, how aiconfigurator's H200 tables price it)
ENGINE_STAND_INS = {
    "fused q_a + kv_a": ("attention", "GEMM of q_a + kv_a + indexer wk (+ weights_proj in bf16), one product"),
    "q_b": ("attention", "GEMM"),
    "absorbed k (bmm)": ("attention", "mla_gen_pre (torch bmm, bf16)"),
    "attention": ("attention", "mla_generation (FlashAttention MLA decode, bf16 KV)"),
    "absorbed v (bmm)": ("attention", "mla_gen_post (torch bmm, bf16)"),
    "o_proj": ("attention", "GEMM"),
    "indexer wq_b": ("indexer", "GEMM"),
    "indexer weights_proj": ("indexer", "GEMM bf16 (fp8 step only: bf16 weight)"),
    "index scores + top-k": ("indexer", "glm5_mqa_logits_module (DeepGEMM FP8) + glm5_topk_module (flat)"),
    "router": ("moe", "GEMM bf16"),
    "routed experts": ("moe", "fused MoE (Triton; bf16 or fp8_block), power_law_1.01 routing; "
                              "includes permute, both grouped GEMMs, activation, finalize"),
    "shared expert": ("shared/dense MLP", "GEMMs gate_up + down, alone (what the second stream hides of it in "
                                          "the whole step is a row of its own)"),
    "dense MLP": ("shared/dense MLP", "GEMMs gate_up + down"),
    "lm_head": ("lm_head", "GEMM bf16"),
}
#: small fused ops no aiconfigurator table prices: kernels per layer (or per step for the head), each at the
#: graph-replay floor measured beside the step (assumed count: one kernel each, as an engine runs them)
ENGINE_SMALL_OPS = {"attention": ("input norm", "q_a + kv_a norms + k rotary", "q rotary", "kv-cache store",
                                  "residual + norm"),
                    "indexer": ("k_norm + rope", "key store"),
                    "moe": ("top-k select", "shared/expert activation", "add shared"),
                    "head": ("embedding", "final norm", "sampling")}


#: engine_composite's row for what the second stream hides: counted in the whole step, set beside no component
OVERLAP = "overlap (shared expert beside the routed path)"


def engine_composite(m: ma.ModelConfig, batch: int, context: int, precision: str, floor_us: float,
                     system: str = kt.H200, distribution: str = kt.AIC_DISTRIBUTION) -> pd.DataFrame:
    """The fused step's op list priced with aiconfigurator's SGLang 0.5.14 kernels measured on `system` (H200
    SXM): one row per op with component, count per step, us each and per step, and what stands in for it
    (ENGINE_STAND_INS; small ops: the floor x ENGINE_SMALL_OPS). `precision` "bf16" or "fp8" (the products
    whose weights the fp8 step holds in FP8 priced with SGLang's FP8 W8A8 GEMM, the experts with its
    fp8_block fused MoE; the bmms, router, weights_proj and lm_head stay bf16 as in the step). Derived."""
    if precision not in ("bf16", "fp8"):
        raise MeasuredBudgetError(f"precision {precision!r}: the engine composite prices 'bf16' or 'fp8'")
    sh = stp.shard_sizes(m, TP)
    b, h, L, Lm, Ld = int(batch), m.hidden, m.layers, m.moe_layers, m.dense_layers
    g = "fp8" if precision == "fp8" else "bf16"
    rows = []

    def add(op, count, us, how=None):
        comp, what = ENGINE_STAND_INS.get(op, ("norms and small ops", how or "graph floor (measured) x 1 kernel"))
        rows.append({"op": op, "component": comp, "count": count, "us_each": us, "us_step": count * us,
                     "stand_in": what if how is None else how, "kind": "measured" if how is None else "derived"})

    xn = m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim + (m.index_head_dim if m.has_indexer else 0)
    if m.has_indexer and precision != "fp8":
        xn += m.index_n_heads
    add("fused q_a + kv_a", L, kt.gemm_us(system, g, b, xn, h))
    add("q_b", L, kt.gemm_us(system, g, b, sh.heads * m.qk_head_dim, m.q_lora_rank))
    add("absorbed k (bmm)", L, kt.mla_bmm_us(system, "mla_gen_pre", b))
    add("attention", L, kt.mla_us(system, b, context))
    add("absorbed v (bmm)", L, kt.mla_bmm_us(system, "mla_gen_post", b))
    add("o_proj", L, kt.gemm_us(system, g, b, h, sh.heads * m.v_head_dim))
    if m.has_indexer:
        add("indexer wq_b", L, kt.gemm_us(system, g, b, m.index_n_heads * m.index_head_dim, m.q_lora_rank))
        if precision == "fp8":
            add("indexer weights_proj", L, kt.gemm_us(system, "bf16", b, m.index_n_heads, h))
        scores = kt.indexer_us(system, "glm5_mqa_logits_module", b, context)
        top = kt.indexer_us(system, "glm5_topk_module", b, context) if context > m.index_topk else 0.0
        add("index scores + top-k", L, scores + top)
    for comp, ops in ENGINE_SMALL_OPS.items():
        n = {"attention": L, "indexer": L if m.has_indexer else 0, "moe": Lm, "head": 1}[comp]
        for op in ops:
            if n:
                add(op, n, floor_us, "graph floor (measured) x 1 kernel (assumed)")
    if Lm:
        router = kt.gemm_us(system, "bf16", b, m.n_routed, h)
        experts = kt.moe_us(system, "fp8_block" if precision == "fp8" else "bf16", b, distribution)
        shared = kt.gemm_us(system, g, b, 2 * sh.shared_inter, h) + kt.gemm_us(system, g, b, h, sh.shared_inter)
        add("router", Lm, router)
        add("routed experts", Lm, experts)
        # the shared expert's own time (its component, as the step times it alone) and, apart, what running it
        # beside the routed path hides of it in the whole step (component OVERLAP: no component of its own)
        add("shared expert", Lm, shared)
        add("shared expert beside the routed path", Lm, -min(shared, router + experts + floor_us),
            "hidden on a second stream: the longer of the two paths counts (aiconfigurator's rule)")
        rows[-1]["component"] = OVERLAP
    if Ld:
        add("dense MLP", Ld, kt.gemm_us(system, g, b, 2 * sh.dense_inter, h) + kt.gemm_us(system, g, b, h, sh.dense_inter)
            + floor_us)
    add("lm_head", 1, kt.gemm_us(system, "bf16", b, sh.vocab, h))
    return pd.DataFrame(rows)


def engine_fidelity(meas_timings: pd.DataFrame, m: ma.ModelConfig, batch: int, context: int, precision: str,
                    floor_us: float, fusion: str = "fused", where: str = "the study") -> pd.DataFrame:
    """Each component of the measured step (graphs, dense attention, `precision`, `fusion`) beside the engine
    composite (engine_composite) for the same op list, and the whole step: ratio = measured / engine."""
    t = meas_timings
    sel = t[(t["batch"] == batch) & (t["context"] == context) & (t["mode"] == "graph") & (t["attention"] == "dense")
            & (t["dtype"] == precision)]
    if "fusion" in sel.columns:
        sel = sel[sel["fusion"] == fusion]
    eng = engine_composite(m, batch, context, precision, floor_us)
    comp = eng.groupby("component")["us_step"].sum()
    rows = []
    for c in [c for c in comp.index if c != OVERLAP] + ["step"]:
        r = sel[sel["what"] == c]
        if len(r) != 1:
            raise MeasuredBudgetError(f"{where}: {len(r)} timing rows for '{c}', {precision} {fusion}, batch "
                                      f"{batch}, context {context} (expected one)")
        ours = float(r["median_us"].iloc[0])
        engine = float(comp.sum()) if c == "step" else float(comp[c])
        rows.append({"precision": precision, "batch": batch, "context": context, "component": c,
                     "measured_us": ours, "engine_us": engine, "ratio": ours / engine,
                     "kernels": float(r["kernels"].iloc[0]) if pd.notna(r["kernels"].iloc[0]) else np.nan})
    return pd.DataFrame(rows)
