"""Byte accounting: what one rank reads per decode step, per component, in the emulated precision and in the
checkpoint's formats."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import arith as ma
from .build import check_shape_args
from .precision import check_precision, stored_bytes
from .shapes import BYTES, COMPONENTS, attention_specs, head_specs, local_shape, mlp_specs

def component_bytes(m: ma.ModelConfig, tp: int, batch: int, context: int, distinct_experts: float,
                    dtype: str = "bf16", attention: str = "dense") -> pd.DataFrame:
    """Bytes one rank reads per decode step, per component: weights and KV cache, in the emulated
    precision (`bytes_emulated`: `dtype`, one of PRECISIONS; for "fp8" 1 byte a value plus a float32 scale
    per output column for FP8_WEIGHTS, 2 for the rest, see stored_bytes) and in the checkpoint's formats from
    the model file (`bytes_checkpoint`, derived; NVFP4 at 4.5 bits a value plus per-tensor scales as in
    helpers.model.arith). Activations are left out (at decode they are a few MiB at most)."""
    check_shape_args(batch, context)
    check_precision(dtype)
    nb = BYTES[dtype]

    def fmt_bytes(group: str) -> float:
        return ma.FORMATS[m.fmt(group)]["bytes_per_value"]

    rows = {c: [0.0, 0.0] for c in COMPONENTS}

    def add(comp, values, group):
        """`values` read at BYTES[dtype] each (activation-typed data: KV cache, embedding rows)."""
        rows[comp][0] += values * nb
        rows[comp][1] += values * fmt_bytes(group)

    def add_specs(comp, specs, times: float = 1.0, per: int = 1):
        """Weights `specs` read `times` over (each its `1/per` part: one expert of `per`)."""
        for sp in specs:
            rows[comp][0] += times * stored_bytes(sp, tp, dtype) / per
            rows[comp][1] += times * float(np.prod(local_shape(sp, tp))) / per * fmt_bytes(sp.group)

    att = attention_specs(m)
    att_specs = [s for s in att if s.group == "attention" and not s.name.startswith("idx_")]
    idx_specs = [s for s in att if s.name.startswith("idx_") and s.group == "attention"]
    norm_specs = [s for s in att if s.group == "norms"]
    L = m.layers
    add_specs("attention", att_specs, L)
    read_ctx = min(context, m.index_topk) if (attention == "sparse" and m.has_indexer) else context
    kv_values = L * batch * read_ctx * (m.kv_lora_rank + m.qk_rope_head_dim)
    rows["attention"][0] += kv_values * nb
    rows["attention"][1] += kv_values * fmt_bytes("kv_cache")
    if m.has_indexer:
        add_specs("indexer", idx_specs, L)
        ik = L * batch * context * m.index_head_dim
        rows["indexer"][0] += ik * nb
        rows["indexer"][1] += ik * fmt_bytes("kv_cache")
    add_specs("norms and small ops", norm_specs, L)
    add_specs("norms and small ops", [s for s in head_specs(m) if s.name == "final_norm"])
    add("norms and small ops", batch * m.hidden, "embeddings")   # embedding rows
    if m.moe_layers:
        moe = {s.name: s for s in mlp_specs(m, False)}
        add_specs("moe", [moe["router"]], m.moe_layers)
        add_specs("moe", [moe["w13"], moe["w2"]], m.moe_layers * distinct_experts, per=m.n_routed)
        if m.n_shared:
            add_specs("shared/dense MLP", [moe["s_w13"], moe["s_w2"]], m.moe_layers)
    if m.dense_layers:
        add_specs("shared/dense MLP", mlp_specs(m, True), m.dense_layers)
    add_specs("lm_head", [s for s in head_specs(m) if s.name == "lm_head"])
    return pd.DataFrame([{"component": c, "bytes_emulated": v[0], "bytes_checkpoint": v[1]} for c, v in rows.items()])
