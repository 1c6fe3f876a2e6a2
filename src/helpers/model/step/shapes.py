"""The emulated step's vocabulary and one rank's shapes: components, precisions and modes, the errors, each
weight's full shape and how tensor parallelism splits it (WSpec), and cutting a full weight into a rank's
part (plain or FP8). See helpers.model.step for the whole step."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import arith as ma
from .. import fp8

COMPONENTS = ("attention", "indexer", "moe", "shared/dense MLP", "norms and small ops", "lm_head", "collectives")
#: what a step's weights are held in (see the module docstring)
PRECISIONS = ("bf16", "fp32", "fp8")
#: the dtype of activations, KV caches and weights not held in FP8, per precision (or activation name)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp8": torch.bfloat16}
ATTENTION_MODES = ("dense", "sparse")
#: bytes of one activation, KV-cache value or weight not held in FP8, per precision
BYTES = {"bf16": 2, "fp32": 4, "fp8": 2}
#: the weights precision "fp8" holds as E4M3 values with per-column scales
FP8_WEIGHTS = frozenset({"qkv_a", "q_b", "o_proj", "idx_wq_b", "idx_wk", "d_w13", "d_w2", "w13", "w2",
                         "s_w13", "s_w2"})
SHARED_OVERLAP = ("auto", "on", "off")
#: "fused": the small ops as an engine runs them (helpers.model.fused; compiled on CUDA); "unfused": one
#: torch operator chain per op, the reference the fused path is checked against
FUSIONS = ("fused", "unfused")
#: SGLang's DeepseekV2MoE runs the shared expert beside the routed ones for up to this many tokens (CUDA)
DUAL_STREAM_TOKEN_THRESHOLD = 1024


class StepError(ValueError):
    """An argument to the emulated step is unusable."""


class StepMemoryError(StepError):
    """The device cannot hold what the step needs."""



# --------------------------------------------------------------------------------------------------
# Sizes


@dataclass(frozen=True)
class Shard:
    """One rank's sizes at tensor-parallel degree `tp`."""

    tp: int
    heads: int
    moe_inter: int
    shared_inter: int
    dense_inter: int
    vocab: int


def shard_sizes(m: ma.ModelConfig, tp: int) -> Shard:
    tp = ma.check_tp(m, tp)
    for what, n in (("vocab_size", m.vocab), ("dense intermediate_size", m.dense_intermediate),
                    ("shared intermediate (n_shared x moe_intermediate)", m.n_shared * m.moe_intermediate)):
        if n % tp:
            raise StepError(f"tp = {tp} does not divide {what} {n} of {m.name}")
    return Shard(tp, m.heads // tp, m.moe_intermediate // tp, m.n_shared * m.moe_intermediate // tp,
                 m.dense_intermediate // tp, m.vocab // tp)


@dataclass(frozen=True)
class WSpec:
    """One weight: its full shape, how TP splits it, its parameter group (for the checkpoint format)."""

    name: str
    shape: tuple[int, ...]
    split: tuple | None       # None: replicated; ("dim", d); ("fused", d, parts): each of `parts` blocks split
    group: str                # precision key in the model file: attention, routed_experts, ...
    init: str = "normal"      # normal | ones | zeros


def attention_specs(m: ma.ModelConfig) -> list[WSpec]:
    h, qk, r = m.hidden, m.qk_head_dim, m.qk_rope_head_dim
    if not m.q_lora_rank:
        raise StepError(f"{m.name}: the emulated step needs a low-rank query (q_lora_rank > 0)")
    out = [
        WSpec("ln1", (h,), None, "norms", "ones"),
        WSpec("qkv_a", (h, m.q_lora_rank + m.kv_lora_rank + r), None, "attention"),
        WSpec("q_norm", (m.q_lora_rank,), None, "norms", "ones"),
        WSpec("kv_norm", (m.kv_lora_rank,), None, "norms", "ones"),
        WSpec("q_b", (m.q_lora_rank, m.heads * qk), ("dim", 1), "attention"),
        WSpec("w_kc", (m.heads, m.qk_nope_head_dim, m.kv_lora_rank), ("dim", 0), "attention"),
        WSpec("w_vc", (m.heads, m.kv_lora_rank, m.v_head_dim), ("dim", 0), "attention"),
        WSpec("o_proj", (m.heads * m.v_head_dim, h), ("dim", 0), "attention"),
        WSpec("ln2", (h,), None, "norms", "ones"),
    ]
    if m.has_indexer:
        out += [
            WSpec("idx_wq_b", (m.q_lora_rank, m.index_n_heads * m.index_head_dim), None, "attention"),
            WSpec("idx_wk", (h, m.index_head_dim), None, "attention"),
            WSpec("idx_k_norm_w", (m.index_head_dim,), None, "norms", "ones"),
            WSpec("idx_k_norm_b", (m.index_head_dim,), None, "norms", "zeros"),
            WSpec("idx_weights_proj", (h, m.index_n_heads), None, "attention"),
        ]
    return out


def mlp_specs(m: ma.ModelConfig, dense: bool) -> list[WSpec]:
    h = m.hidden
    if dense:
        i = m.dense_intermediate
        return [WSpec("d_w13", (h, 2 * i), ("fused", 1, 2), "dense_mlp"),
                WSpec("d_w2", (i, h), ("dim", 0), "dense_mlp")]
    i, e, si = m.moe_intermediate, m.n_routed, m.n_shared * m.moe_intermediate
    out = [WSpec("router", (h, e), None, "router"),
           WSpec("router_bias", (e,), None, "router", "zeros"),
           WSpec("w13", (e, h, 2 * i), ("fused", 2, 2), "routed_experts"),
           WSpec("w2", (e, i, h), ("dim", 1), "routed_experts")]
    if si:
        out += [WSpec("s_w13", (h, 2 * si), ("fused", 1, 2), "shared_experts"),
                WSpec("s_w2", (si, h), ("dim", 0), "shared_experts")]
    return out


def head_specs(m: ma.ModelConfig) -> list[WSpec]:
    return [WSpec("embed", (m.vocab, m.hidden), ("dim", 0), "embeddings"),
            WSpec("final_norm", (m.hidden,), None, "norms", "ones"),
            WSpec("lm_head", (m.hidden, m.vocab), ("dim", 1), "embeddings")]


def local_shape(s: WSpec, tp: int) -> tuple[int, ...]:
    if s.split is None or tp == 1:
        return s.shape
    d = s.split[1]
    shape = list(s.shape)
    if shape[d] % (tp * (s.split[2] if s.split[0] == "fused" else 1)):
        raise StepError(f"weight {s.name} {s.shape}: dim {d} does not split into {tp} ranks")
    shape[d] //= tp
    return tuple(shape)


def shard_tensor(full: torch.Tensor, split: tuple | None, tp: int, rank: int) -> torch.Tensor:
    """This rank's part of a full weight under `split` (see WSpec)."""
    if split is None or tp == 1:
        return full
    kind, d = split[0], split[1]
    if kind == "dim":
        return full.chunk(tp, d)[rank].contiguous()
    if kind == "fused":
        return torch.cat([b.chunk(tp, d)[rank] for b in full.chunk(split[2], d)], d).contiguous()
    raise StepError(f"unknown split {split!r}")


def shard_weight(w, split: tuple | None, tp: int, rank: int):
    """shard_tensor for a plain weight or an FP8 one (fp8.QWeight). An FP8 weight's values are cut as the
    weight is; its per-column scales go with the columns where the output dim is split (column-parallel:
    q_b, gate_up), stay whole where the contraction dim is split (row-parallel: o_proj, down: every rank
    keeps every output column, each rank's partial sum uses the same scale), and follow a split of a
    leading dim (experts, heads)."""
    if not isinstance(w, fp8.QWeight):
        return shard_tensor(w, split, tp, rank)
    if split is None or tp == 1:
        return w
    nd = w.q.dim()
    d = split[1] % nd
    in_storage = d if d < nd - 2 else 2 * nd - 3 - d          # (..., K, N) is stored as (..., N, K)
    values = shard_tensor(w.storage(), (split[0], in_storage, *split[2:]), tp, rank)
    if d == nd - 1:
        scale = shard_tensor(w.scale, (split[0], w.scale.dim() - 1, *split[2:]), tp, rank)
    elif d == nd - 2:
        scale = w.scale
    else:
        scale = shard_tensor(w.scale, split, tp, rank)
    return fp8.QWeight.from_storage(values, scale)
