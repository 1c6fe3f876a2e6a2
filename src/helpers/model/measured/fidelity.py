"""This run's emulated step set beside an engine's kernels: per op, against aiconfigurator's time for the same
operation on the same GPU class and, projected, on the recorded one (op_fidelity); and the fused step's op
list priced with aiconfigurator's SGLang kernels on H200 (engine_composite), each component beside it
(engine_fidelity)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.model import arith as ma
from helpers.model import kernels as kt

from .studies import TP, MeasuredBudgetError, StepMeasurement, gpu_bandwidth, spec_name

# helpers.model.step (which imports torch) is imported inside the functions that use it, not at the top: the chapter
# modules that read measured studies import this module, and a recorded-mode kernel of chapter 08 (and any process
# that imports it for its tables) otherwise paid torch's import, about 2 s of CPU, for shapes it never computes.


def _gemm_ops(m: ma.ModelConfig, fusion: str = "unfused", precision: str = "bf16") -> list[tuple]:
    """(op name in helpers.model.step, layers it runs in, n, k, precision group, step weight names). The fused
    path's q_a + kv_a product also carries the indexer's wk and, where it is held in the same format (not
    in fp8), its weights_proj (helpers.model.step.x_projection): n and the weights grow by theirs."""
    from helpers.model import step as stp   # not at the top: see the note under the imports
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


def no_engine_here(device: str) -> str:
    """Why a measurement on `device` is set beside no SGLang kernel of its own GPU class, in words."""
    return (f"aiconfigurator's kernel tables, reference timings of SGLang's kernels on aiconfigurator's own collection "
            f"hosts and not this book's, cover {', '.join(sorted(kt.SYSTEMS.values()))}, not {device}: not compared here")


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
    from helpers.model import step as stp   # not at the top: see the note under the imports
    specs = {s.name: s for s in stp.attention_specs(m) + stp.mlp_specs(m, True) + stp.mlp_specs(m, False)
             + stp.head_specs(m)}
    prec = str(meas.timings["dtype"].iloc[0])
    nb = stp.BYTES[prec]
    rows = []

    def op_time(name):
        r = meas.row(batch, context, f"op:{name}")
        return float(r["median_us"]), float(r["kernels"]) if pd.notna(r["kernels"]) else np.nan

    def project(t, kernels, layers, emul_bytes, ckpt_bytes):
        launch = (kernels / layers) * floor if np.isfinite(kernels) else 0.0
        return launch + max(0.0, t - launch) * (ckpt_bytes / emul_bytes) * bw

    for name, layers, n, k, group, wnames in _gemm_ops(m, meas.fusion, prec):
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
    from helpers.model import step as stp   # not at the top: see the note under the imports
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
