"""One tensor-parallel rank's share of a decode step of an MLA + MoE model, built from torch operators.

From a model file in data/models/ (GLM-5 by default) and a TP degree, `build_rank` makes one rank's
weights (random, nothing downloaded) and `DecodeStep` runs one decode step of `batch` sequences whose
context is `context` tokens, the way a serving engine runs it:

    embedding (vocab-parallel) -> all-reduce
    per layer:  rmsnorm -> fused q_a + kv_a projection -> q_a / kv_a rmsnorm -> q_b -> absorbed k (bmm)
                -> rotary embedding -> KV-cache store -> attention over the cache -> absorbed v (bmm)
                -> o_proj -> all-reduce -> residual + rmsnorm
                DSA indexer: wq_b, wk + layernorm, rotary, weights_proj, key store, index scores, top-k
                dense layers: gate_up -> SiLU x up -> down
                MoE layers: router -> sigmoid top-k -> permute -> grouped GEMM 1 -> SiLU x up -> grouped
                GEMM 2 -> weighted combine; shared expert; -> all-reduce -> residual
    final rmsnorm -> lm_head (vocab-parallel) -> all-gather -> greedy sampling

Sharding follows tensor parallelism as SGLang lays out MLA models: the latent projections (fused
q_a/kv_a), the indexer, norms and the router replicated; q_b, the absorbed k/v up-projections and o_proj
split by heads (o_proj row-parallel); experts, the shared expert and the dense MLP split on their
intermediate size (gate_up column-parallel, down row-parallel); embedding and lm_head split by vocabulary.
The two all-reduces per layer sit after o_proj and after the MLP/MoE. With a process group (one process
per rank: torchrun, or `run_sharded` over gloo) they are real collectives inside the step; without one
they are left out and the step is one rank's compute.

Where the device cannot hold every layer, `build_rank` holds as many distinct MoE layers as fit and
cycles them over the model's MoE positions (the dense layers are held as they are), each with its own KV
cache, so weights are still read from memory, not from a cache.

Every op belongs to one component (`COMPONENTS`); `DecodeStep.run(components=...)` runs only some of
them, which is how steptime.py times each component alone. `component_bytes` says what each component
reads per step, in the emulated precision and in the checkpoint's.

Precisions (`PRECISIONS`): "bf16" (the default), "fp32" (the CPU correctness reference) and "fp8": the
weights of the large matrix products (`FP8_WEIGHTS`: the fused q_a/kv_a projection, q_b, o_proj, the
indexer's wq_b and wk, the dense MLP, the shared expert and the routed experts) as E4M3 values with one
float32 scale per output column, every activation row quantized where it is used (helpers.model.fp8);
everything else in bf16 as SGLang's FP8 checkpoints keep it: norms, the router, embedding and lm_head,
the indexer's weights_proj, the absorbed k/v up-projections (a batched product torch has no scaled form
of) and the KV cache. `build_rank` refuses fp8 where a trial product fails on the device.

Shared-expert overlap (`shared_overlap`): as SGLang's DeepseekV2MoE does on CUDA for up to
DUAL_STREAM_TOKEN_THRESHOLD tokens, the shared expert runs on the current stream while the router, top-k
and routed experts run on a second stream, forked and joined with events (capturable in a CUDA graph).
A component timed alone runs alone, so the components' sum exceeds the overlapped step by about the time
the overlap hides.
"""
from __future__ import annotations

import math
import os
import sys
import tempfile
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterable

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from . import arith as ma
from . import fp8
from . import fused as fz

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


def held_in_fp8(name: str, precision: str) -> bool:
    return precision == "fp8" and name in FP8_WEIGHTS


def stored_bytes(s: WSpec, tp: int, precision: str) -> float:
    """Bytes one rank holds (and a step reads, where it reads all of it) of weight `s`: 1 a value plus a
    float32 scale per output column for the FP8 weights of precision "fp8", else BYTES[precision] a value."""
    shape = local_shape(s, tp)
    values = float(np.prod(shape))
    if held_in_fp8(s.name, precision):
        return values + float(np.prod(shape[:-2])) * shape[-1] * fp8.SCALE_BYTES
    return values * BYTES[precision]


def check_precision(precision: str, m: ma.ModelConfig | None = None, tp: int = 1) -> None:
    """precision one of PRECISIONS; for "fp8", every FP8 weight's per-rank shape usable by the scaled
    products (K and N multiples of 16), else StepError naming the weight."""
    if precision not in PRECISIONS:
        raise StepError(f"precision {precision!r}: expected one of {PRECISIONS}")
    if precision == "fp8" and m is not None:
        specs = attention_specs(m) + (mlp_specs(m, True) if m.dense_layers else []) \
            + (mlp_specs(m, False) if m.moe_layers else [])
        for sp in specs:
            if sp.name in FP8_WEIGHTS:
                try:
                    fp8.check_shape(f"{sp.name} of {m.name} at TP{tp}", local_shape(sp, tp))
                except fp8.Fp8Error as e:
                    raise StepError(str(e)) from e


def _std(s: WSpec) -> float:
    fan_in = s.shape[-2] if len(s.shape) >= 2 else 1
    return 1.0 / math.sqrt(fan_in)


def _fill(t: torch.Tensor, s: WSpec, gen: torch.Generator) -> torch.Tensor:
    if s.init == "ones":
        return t.fill_(1.0)
    if s.init == "zeros":
        return t.zero_()
    return t.normal_(0.0, _std(s), generator=gen)


# --------------------------------------------------------------------------------------------------
# One rank's model


@dataclass
class RankModel:
    """One rank's weights and KV caches. `layers` are the distinct layers held (the dense ones first);
    `layer_of_position[p]` is the held layer that plays model layer p."""

    m: ma.ModelConfig
    tp: int
    rank: int
    dtype: str
    device: str
    layers: list[dict]
    dense_held: int
    layer_of_position: list[int]
    head: dict
    caches: list[dict]
    batch_max: int
    context_max: int
    act: str = ""             # activation dtype (a DTYPES key); empty: that of `dtype`
    fp8_support: dict | None = None   # the trial products' result where dtype is "fp8" (fp8.Support)

    def __post_init__(self):
        if not self.act:
            self.act = "fp32" if self.dtype == "fp32" else "bf16"

    @property
    def moe_held(self) -> int:
        return len(self.layers) - self.dense_held

    @property
    def shard(self) -> Shard:
        return shard_sizes(self.m, self.tp)


def positions(m: ma.ModelConfig, dense_held: int, moe_held: int) -> list[int]:
    """Held layer playing each model layer: the dense layers as they are, the MoE ones cycled."""
    if m.dense_layers and dense_held != m.dense_layers:
        raise StepError(f"{m.name}: hold all {m.dense_layers} dense layers (got {dense_held})")
    if m.moe_layers and moe_held < 1:
        raise StepError(f"{m.name}: hold at least one MoE layer")
    return list(range(m.dense_layers)) + [m.dense_layers + (p % moe_held) for p in range(m.moe_layers)]


def context_limit(m: ma.ModelConfig) -> int | None:
    """The longest context the model file allows (architecture.max_position_embeddings), or None."""
    from helpers.core import recorded

    try:
        v = recorded.model_config(m.key)["architecture"].get("max_position_embeddings")
    except (FileNotFoundError, KeyError, TypeError):
        return None
    return int(v) if v else None


def check_inputs(m: ma.ModelConfig, tp: int, precision: str, batch: int, context: int) -> None:
    """Everything about a step's inputs that can be refused before anything is allocated: the precision, the TP
    degree (it must divide the attention heads, the shared and dense intermediate sizes and the vocabulary;
    the routed experts, split on their intermediate size, need it to divide that too), the batch and the
    context (positive, and the context within the model's max_position_embeddings). StepError (or
    ModelError for the heads) naming the input and the fix; memory is checked by plan_memory."""
    if precision not in PRECISIONS:
        raise StepError(f"precision {precision!r}: expected one of {PRECISIONS}")
    sh = shard_sizes(m, tp)
    if m.moe_layers and m.moe_intermediate % tp:
        raise StepError(f"tp = {tp} does not divide the routed experts' intermediate size {m.moe_intermediate} "
                        f"of {m.name} (each expert is split across the ranks); use a TP degree that divides it")
    _check_shape_args(batch, context)
    lim = context_limit(m)
    if lim is not None and context > lim:
        raise StepError(f"context = {context} tokens is beyond {m.name}'s limit of {lim} "
                        f"(max_position_embeddings in data/models/{m.key}.yaml); use a context of at most {lim}")
    check_precision(precision, m, tp)
    del sh


def _check_shape_args(batch_max: int, context_max: int) -> None:
    for name, v in (("batch", batch_max), ("context", context_max)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise StepError(f"{name} = {v!r}: expected a positive integer")


def _caches(m, nlayers, batch_max, context_max, dtype, device, gen):
    out = []
    lat = m.kv_lora_rank + m.qk_rope_head_dim
    for _ in range(nlayers):
        c = {"kv": torch.empty(batch_max, context_max, lat, dtype=dtype, device=device).normal_(0, 1, generator=gen)}
        if m.has_indexer:
            c["ik"] = torch.empty(batch_max, context_max, m.index_head_dim, dtype=dtype,
                                  device=device).normal_(0, 1, generator=gen)
        out.append(c)
    return out


def build_full(m: ma.ModelConfig, batch_max: int, context_max: int, dtype: str = "fp32", seed: int = 0,
               moe_held: int | None = None) -> RankModel:
    """The unsharded model (tp = 1) on the CPU, every weight drawn from `seed`: the reference the sharded
    step is checked against (`shard_model` cuts the same weights into ranks)."""
    _check_shape_args(batch_max, context_max)
    check_precision(dtype, m)
    if dtype != "fp32":
        return convert_model(build_full(m, batch_max, context_max, "fp32", seed, moe_held), dtype)
    dt = DTYPES[dtype]
    gen = torch.Generator().manual_seed(seed)
    held_moe = m.moe_layers if moe_held is None else min(moe_held, m.moe_layers)
    layers = []
    for i in range(m.dense_layers + held_moe):
        specs = attention_specs(m) + mlp_specs(m, dense=i < m.dense_layers)
        layers.append({s.name: _fill(torch.empty(s.shape, dtype=dt), s, gen) for s in specs})
    head = {s.name: _fill(torch.empty(s.shape, dtype=dt), s, gen) for s in head_specs(m)}
    caches = _caches(m, len(layers), batch_max, context_max, dt, "cpu", gen)
    return RankModel(m, 1, 0, dtype, "cpu", layers, m.dense_layers, positions(m, m.dense_layers, held_moe),
                     head, caches, batch_max, context_max)


def convert_model(rm: RankModel, precision: str, act: str | None = None) -> RankModel:
    """The same weights in `precision`: cast (bf16, fp32), or for "fp8" the FP8_WEIGHTS quantized from
    their values and the rest cast to the activation dtype `act` (default bf16; "fp32" on a CPU isolates
    the FP8 quantization error from bf16's)."""
    check_precision(precision, rm.m, rm.tp)
    act = act or ("fp32" if precision == "fp32" else "bf16")
    if act not in ("bf16", "fp32"):
        raise StepError(f"activation dtype {act!r}: expected 'bf16' or 'fp32'")
    if precision != "fp8" and act != precision:
        raise StepError(f"precision {precision} computes in {precision}; activation dtype {act!r} is for fp8 only")
    dt = DTYPES[act]

    def conv(d):
        out = {}
        for k, v in d.items():
            if isinstance(v, fp8.QWeight):
                v = v.dequantize()
            out[k] = fp8.quantize(v, k) if held_in_fp8(k, precision) else v.to(dt)
        return out
    sup = fp8.probe(rm.device, dt).as_dict() if precision == "fp8" else None
    return replace(rm, dtype=precision, act=act, layers=[conv(L) for L in rm.layers], head=conv(rm.head),
                   caches=[{k: v.to(dt) for k, v in c.items()} for c in rm.caches], fp8_support=sup)


def to_device(rm: RankModel, device: str) -> RankModel:
    """The same model on `device` (FP8 weights keep their column-major layout)."""
    def move(v):
        if isinstance(v, fp8.QWeight):
            return fp8.QWeight.from_storage(v.storage().to(device), v.scale.to(device))
        return v.to(device)
    sup = fp8.probe(device, DTYPES[rm.act]).as_dict() if rm.dtype == "fp8" else None
    return replace(rm, device=str(device), layers=[{k: move(v) for k, v in L.items()} for L in rm.layers],
                   head={k: move(v) for k, v in rm.head.items()},
                   caches=[{k: v.to(device) for k, v in c.items()} for c in rm.caches], fp8_support=sup)


def shard_model(full: RankModel, tp: int, rank: int, overrides: dict[str, tuple | None] | None = None) -> RankModel:
    """Rank `rank` of `tp` cut from the unsharded model. `overrides` replaces the split rule of named
    weights (for testing that a wrong rule is caught)."""
    if full.tp != 1:
        raise StepError("shard_model takes the unsharded model (tp = 1)")
    if not 0 <= rank < tp:
        raise StepError(f"rank {rank} is not in 0..{tp - 1}")
    shard_sizes(full.m, tp)
    overrides = overrides or {}
    rule = {s.name: s.split for s in attention_specs(full.m) + mlp_specs(full.m, True) + mlp_specs(full.m, False)
            + head_specs(full.m)}
    rule.update(overrides)
    check_precision(full.dtype, full.m, tp)
    cut = lambda d: {k: shard_weight(v, rule[k], tp, rank) for k, v in d.items()}  # noqa: E731
    return RankModel(full.m, tp, rank, full.dtype, full.device, [cut(L) for L in full.layers], full.dense_held,
                     list(full.layer_of_position), cut(full.head),
                     [{k: v.clone() for k, v in c.items()} for c in full.caches], full.batch_max, full.context_max,
                     full.act, full.fp8_support)


# --------------------------------------------------------------------------------------------------
# Memory


@dataclass(frozen=True)
class MemoryPlan:
    model: str
    tp: int
    dtype: str
    batch_max: int
    context_max: int
    dense_layer_bytes: float
    moe_layer_bytes: float
    head_bytes: float
    cache_bytes_per_layer: float
    moe_held: int
    needed_bytes: float
    available_bytes: float

    def describe(self) -> str:
        return (f"{self.model} at TP{self.tp} in {self.dtype}, batch {self.batch_max} x {self.context_max} tokens: "
                f"{self.moe_held} distinct MoE layers held, {self.needed_bytes / ma.GiB:.1f} GiB of "
                f"{self.available_bytes / ma.GiB:.1f} GiB usable")


def _spec_bytes(specs: Iterable[WSpec], tp: int, precision: str) -> float:
    return float(sum(stored_bytes(s, tp, precision) for s in specs))


#: memory left free on a GPU for graphs, cuBLAS workspaces and activations (none is kept back on a CPU)
GPU_RESERVE_BYTES = 4 * ma.GiB


def plan_memory(m: ma.ModelConfig, tp: int, dtype: str, batch_max: int, context_max: int, free_bytes: float,
                moe_held: int | None = None, usable_fraction: float = 0.85, reserve_bytes: float = GPU_RESERVE_BYTES
                ) -> MemoryPlan:
    """How many distinct MoE layers one rank can hold in `free_bytes`, with their KV caches; raises
    StepMemoryError naming the model, TP degree and the memory needed when not even one fits."""
    check_inputs(m, tp, dtype, batch_max, context_max)
    nb = BYTES[dtype]
    att = attention_specs(m)
    dense = _spec_bytes(att + mlp_specs(m, True), tp, dtype) if m.dense_layers else 0.0
    moe = _spec_bytes(att + mlp_specs(m, False), tp, dtype) if m.moe_layers else 0.0
    head = _spec_bytes(head_specs(m), tp, dtype)
    lat = m.kv_lora_rank + m.qk_rope_head_dim + (m.index_head_dim if m.has_indexer else 0)
    cache = float(batch_max) * context_max * lat * nb
    usable = max(0.0, free_bytes * usable_fraction - reserve_bytes)
    fixed = head + m.dense_layers * (dense + cache)
    per_moe = moe + cache
    want = m.moe_layers if moe_held is None else moe_held
    fit = int((usable - fixed) // per_moe) if per_moe and usable > fixed else 0
    held = min(want, fit, m.moe_layers)
    needed_min = fixed + per_moe
    if m.moe_layers and held < 1:
        raise StepMemoryError(
            f"{m.name} at TP{tp} in {dtype} for batch {batch_max} x {context_max} tokens needs at least "
            f"{needed_min / ma.GiB:.1f} GiB per rank (lm_head and embedding {head / ma.GiB:.1f} GiB, "
            f"{m.dense_layers} dense layers and one MoE layer of {moe / ma.GiB:.2f} GiB with KV caches of "
            f"{cache / ma.GiB:.2f} GiB each); {usable / ma.GiB:.1f} GiB of this device's "
            f"{free_bytes / ma.GiB:.1f} GiB free are usable. Use a smaller batch or context, a larger TP degree, "
            f"or a smaller model file")
    needed = fixed + held * per_moe
    return MemoryPlan(m.name, tp, dtype, batch_max, context_max, dense, moe, head, cache, held, needed, usable)


def cpu_check_bytes(m: ma.ModelConfig, batch: int, context: int, copies: int = 6) -> float:
    """Estimated peak memory of the CPU checks at `batch` x `context` (derived, not measured): the model in
    float32 (its layers, lm_head and embedding), one latent KV cache per layer and one layer's attention
    scores, times `copies` (assumed 6: the unsharded reference and the two gloo ranks' shares and caches, x 2
    for activations and allocator slack; on the 2-core development machine, glm5-mini at 32 x 512 peaked at
    about 590 MiB beyond the interpreters, against 525 MiB estimated)."""
    att = attention_specs(m)
    weights = (_spec_bytes(head_specs(m), 1, "fp32")
               + m.dense_layers * _spec_bytes(att + mlp_specs(m, True), 1, "fp32")
               + m.moe_layers * _spec_bytes(att + mlp_specs(m, False), 1, "fp32"))
    lat = m.kv_lora_rank + m.qk_rope_head_dim + (m.index_head_dim if m.has_indexer else 0)
    cache = float(batch) * context * lat * 4 * m.layers
    scores = float(batch) * m.heads * context * 4
    return copies * (weights + cache + scores)


def cpu_memory_rule(contexts, batches, model_key) -> str | None:
    """params.depends rule of the decode-step chapter: the CPU checks at the largest batch and context must fit
    in half this machine's memory (estimated with cpu_check_bytes); None where they do, or where the model
    cannot be read (its own check says why)."""
    import os

    try:
        m = ma.load_model(model_key)
    except Exception:  # noqa: BLE001 - the model parameter's own check names the problem
        return None
    need = cpu_check_bytes(m, max(batches), max(contexts))
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have / 2:
        return (f"the CPU checks at batch {max(batches)} x context {max(contexts)} would need about "
                f"{need / ma.GiB:,.1f} GiB (estimated: {m.name} in float32, its KV caches and attention scores, "
                f"x 6), more than half of this machine's {have / ma.GiB:.1f} GiB; use smaller cpu_batches "
                f"or cpu_contexts")
    return None


def reserve_for(device: str) -> float:
    return GPU_RESERVE_BYTES if str(device).startswith("cuda") else 0.0


def device_free_bytes(device: str) -> float:
    if str(device).startswith("cuda"):
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return float(free)
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return float("inf")


def build_rank(m: ma.ModelConfig, tp: int, rank: int, batch_max: int, context_max: int, device: str = "cpu",
               dtype: str = "bf16", seed: int = 0, moe_held: int | None = None,
               plan: MemoryPlan | None = None) -> tuple[RankModel, MemoryPlan]:
    """One rank's weights drawn directly at their local shapes on `device` (no full model is built),
    after checking the device has the memory (see plan_memory). For precision "fp8", a trial product on
    the device first (fp8.probe): where torch._scaled_mm fails, StepError naming the device and the fix;
    each FP8 weight is drawn in bf16 and quantized (helpers.model.fp8)."""
    check_inputs(m, tp, dtype, batch_max, context_max)
    shard_sizes(m, tp)
    if not 0 <= rank < tp:
        raise StepError(f"rank {rank} is not in 0..{tp - 1}")
    support = None
    if dtype == "fp8":
        try:
            support = fp8.require(device).as_dict()
        except fp8.Fp8Error as e:
            raise StepError(str(e)) from e
    plan = plan or plan_memory(m, tp, dtype, batch_max, context_max, device_free_bytes(device), moe_held,
                               reserve_bytes=reserve_for(device))
    dt = DTYPES[dtype]
    gen = torch.Generator(device=device).manual_seed(seed + 1000 * rank)

    def one(s):
        w = _fill(torch.empty(local_shape(s, tp), dtype=dt, device=device), s, gen)
        return fp8.quantize(w, s.name) if held_in_fp8(s.name, dtype) else w

    def make(specs):
        return {s.name: one(s) for s in specs}

    layers = [make(attention_specs(m) + mlp_specs(m, True)) for _ in range(m.dense_layers)]
    layers += [make(attention_specs(m) + mlp_specs(m, False)) for _ in range(plan.moe_held)]
    head = make(head_specs(m))
    caches = _caches(m, len(layers), batch_max, context_max, dt, device, gen)
    rm = RankModel(m, tp, rank, dtype, device, layers, m.dense_layers, positions(m, m.dense_layers, plan.moe_held),
                   head, caches, batch_max, context_max, fp8_support=support)
    return rm, plan


# --------------------------------------------------------------------------------------------------
# The step


#: id of a layer's qkv_a values -> (a weak reference to them, _x_projection's result); dropped with them
_X_PROJ: dict[int, tuple] = {}


def _plain(w) -> torch.Tensor:
    return w.q if isinstance(w, fp8.QWeight) else w


def _x_projection(W: dict) -> tuple:
    """The products that read a layer's normalized input x as one weight, as an engine fuses them: q_a + kv_a
    (qkv_a), the indexer's wk and, where it is held in the same format, its weights_proj (bf16: all three;
    fp8: the first two, weights_proj stays bf16). Returns (fused weight, widths of its parts). The layer's
    own entries become views into the fused weight (no second copy is held), so the unfused path reads the
    same memory; done once per layer and remembered."""
    hit = _X_PROJ.get(id(_plain(W["qkv_a"])))
    if hit is not None and hit[0]() is _plain(W["qkv_a"]):
        return hit[1]
    names = ["qkv_a"] + [n for n in ("idx_wk", "idx_weights_proj") if n in W
                         and isinstance(W[n], fp8.QWeight) == isinstance(W["qkv_a"], fp8.QWeight)]
    widths = tuple(int(W[n].shape[-1]) for n in names)
    if len(names) == 1:
        out = (W["qkv_a"], widths)
    elif isinstance(W["qkv_a"], fp8.QWeight):
        store = torch.cat([W[n].storage() for n in names], 0)
        scale = torch.cat([W[n].scale for n in names], -1)
        fused = fp8.QWeight.from_storage(store, scale)
        start = 0
        for n, w in zip(names, widths):
            W[n] = fp8.QWeight.from_storage(store[start:start + w], scale[start:start + w])
            start += w
        out = (fused, widths)
    else:
        fused = torch.cat([W[n] for n in names], -1)
        start = 0
        for n, w in zip(names, widths):
            W[n] = fused[:, start:start + w]
            start += w
        out = (fused, widths)
    key = _plain(W["qkv_a"])
    _X_PROJ[id(key)] = (weakref.ref(key), out)
    weakref.finalize(key, _X_PROJ.pop, id(key), None)
    return out


@dataclass
class Op:
    name: str
    component: str
    fn: Callable[[], None]
    stream: str = "main"      # "alt": on the second stream where the step overlaps the shared expert
    kind: str = "op"          # "fork" / "join": the stream events of the overlap (no kernels)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved rotary embedding on the last dim; cos/sin broadcast to x[..., ::2]."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


#: "auto": one grouped GEMM (torch._grouped_mm, or torch._scaled_grouped_mm for FP8 experts) where the
#: device has it, else one product per expert ("loop")
MOE_IMPLS = ("auto", "grouped_mm", "loop")


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Rows of x grouped by expert (offs: cumulative row counts, int32) times that expert's matrix, in
    one grouped GEMM (torch._grouped_mm); experts without rows are not read."""
    return torch._grouped_mm(x, w, offs=offs)


def grouped_mm_loop(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """The same product as one matmul per expert that has rows (reads the row counts on the host, so it
    cannot be captured in a CUDA graph): the fallback where torch._grouped_mm is not available."""
    out = x.new_empty(x.shape[0], w.shape[-1])
    start = 0
    for e, end in enumerate(offs.tolist()):
        if end > start:
            out[start:end] = x[start:end] @ w[e]
        start = end
    return out


#: what each activation quantized for an FP8 product is called in op names
_QUANTIZED = {"x": "input", "qc": "q_a", "o": "attention output", "x2": "MLP input", "da": "dense activation",
              "sa": "shared activation", "ga": "expert activation"}


class DecodeStep:
    """One decode step of `batch` sequences at `context` tokens of context on one rank.

    `group`: a torch.distributed process group for the TP collectives (None: left out).
    `attention`: "dense" reads the whole KV cache (as SGLang runs GLM-5 on SM120); "sparse" reads the
    indexer's top-k entries (DSA).
    `moe_impl`: see MOE_IMPLS.
    `shared_overlap`: "auto" runs the shared expert beside the routed ones on a second CUDA stream as
    SGLang does (on CUDA, for up to DUAL_STREAM_TOKEN_THRESHOLD tokens); "on" always (CUDA only); "off"
    one stream. `self.overlap` says what was chosen."""

    def __init__(self, rm: RankModel, batch: int, context: int, group=None, attention: str = "dense", seed: int = 1,
                 moe_impl: str = "auto", shared_overlap: str = "auto", fusion: str = "fused", compile: str = "auto"):
        _check_shape_args(batch, context)
        if fusion not in FUSIONS:
            raise StepError(f"fusion {fusion!r}: expected one of {FUSIONS}")
        if compile not in fz.COMPILE:
            raise StepError(f"compile {compile!r}: expected one of {fz.COMPILE}")
        if batch > rm.batch_max or context > rm.context_max:
            raise StepError(f"batch {batch} x context {context} exceeds what the caches were built for "
                            f"({rm.batch_max} x {rm.context_max})")
        if attention not in ATTENTION_MODES:
            raise StepError(f"attention {attention!r}: expected one of {ATTENTION_MODES}")
        if moe_impl not in MOE_IMPLS:
            raise StepError(f"moe_impl {moe_impl!r}: expected one of {MOE_IMPLS}")
        if shared_overlap not in SHARED_OVERLAP:
            raise StepError(f"shared_overlap {shared_overlap!r}: expected one of {SHARED_OVERLAP}")
        self.rm, self.b, self.c, self.group, self.attention = rm, batch, context, group, attention
        m, dev = rm.m, rm.device
        self.fusion = fusion
        #: whether the fused path's functions run through torch.compile (helpers.model.fused)
        self.compiled = fusion == "fused" and fz.wants_compile(dev, compile)
        if moe_impl == "auto":
            grouped_fp8_ok = rm.dtype != "fp8" or not (rm.fp8_support or {}).get("grouped_error")
            moe_impl = "grouped_mm" if grouped_fp8_ok else "loop"
        self.moe_impl = moe_impl
        cuda = str(dev).startswith("cuda")
        if shared_overlap == "on" and not cuda:
            raise StepError(f"shared_overlap 'on' runs the shared expert on a second CUDA stream; this step runs "
                            f"on {dev}: use 'auto' or 'off'")
        has_shared = bool(m.moe_layers and m.n_shared)
        self.overlap = has_shared and cuda and (shared_overlap == "on" or (
            shared_overlap == "auto" and batch <= DUAL_STREAM_TOKEN_THRESHOLD))
        self.alt = torch.cuda.Stream(device=torch.device(dev)) if self.overlap else None
        self.dt = DTYPES[rm.act]
        g = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, m.vocab, (batch,), generator=g).to(dev)
        half = m.qk_rope_head_dim // 2
        inv = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float32) / half))
        ang = (context - 1) * inv
        self.cos = torch.cos(ang).to(dev, self.dt)
        self.sin = torch.sin(ang).to(dev, self.dt)
        self.scale = 1.0 / math.sqrt(m.qk_head_dim)
        self.S = SimpleNamespace()
        self.record_routing = False
        self.routing: list[torch.Tensor] = []
        #: expert ids per MoE layer position to use instead of the router's choice (its weights still come
        #: from this step's scores): a comparison of two precisions then measures their products, not
        #: which near-tied experts their rounding picked
        self.forced_routing: list[torch.Tensor] | None = None
        self._moe_positions = 0
        self.ops = self._program()

    # ---- collectives
    def _all_reduce(self, name: str):
        if self.group is None:
            return None
        import torch.distributed as dist

        def fn():
            dist.all_reduce(getattr(self.S, name), group=self.group)
        return fn

    def _all_gather_logits(self):
        import torch.distributed as dist
        S, tp = self.S, self.rm.tp

        def fn():
            parts = [torch.empty_like(S.logits) for _ in range(tp)]
            dist.all_gather(parts, S.logits.contiguous(), group=self.group)
            S.full_logits = torch.cat(parts, -1)
        return fn

    # ---- FP8 products
    def _mm(self, src: str, w) -> torch.Tensor:
        """S.<src> @ w: through the quantized S.<src>_q (values, row scales) where w is an FP8 weight."""
        if isinstance(w, fp8.QWeight):
            xq, s = getattr(self.S, src + "_q")
            return fp8.linear(xq, s, w, self.dt)
        return getattr(self.S, src) @ w

    def _quantize(self, add, src: str, component: str, *weights, stream: str = "main") -> None:
        """The op quantizing S.<src> per row, where one of `weights` (its consumers) is held in FP8."""
        if any(isinstance(w, fp8.QWeight) for w in weights):
            S = self.S
            add(f"quantize {_QUANTIZED[src]} (fp8)", component,
                lambda: setattr(S, src + "_q", fp8.quantize_rows(getattr(S, src))), stream)

    def _gmm(self, src: str, w) -> torch.Tensor:
        S, offs = self.S, self.S.offs
        if isinstance(w, fp8.QWeight):
            xq, s = getattr(S, src + "_q")
            if self.moe_impl == "grouped_mm":
                return fp8.grouped_mm(xq, s, w, offs)
            return fp8.grouped_mm_loop(xq, s, w, offs, self.dt)
        x = getattr(S, src)
        return grouped_mm(x, w, offs) if self.moe_impl == "grouped_mm" else grouped_mm_loop(x, w, offs)

    # ---- program
    def _program(self) -> list[Op]:
        if self.fusion == "fused":
            return self._program_fused()
        rm, m, S, b, c = self.rm, self.rm.m, self.S, self.b, self.c
        sh = rm.shard
        ops: list[Op] = []

        def add(name, comp, fn, stream="main", kind="op"):
            if fn is not None:
                ops.append(Op(name, comp, fn, stream, kind))
        H = rm.head
        lo = rm.rank * sh.vocab

        def embed():
            ids = self.tokens - lo
            inside = (ids >= 0) & (ids < sh.vocab)
            S.h = H["embed"][ids.clamp(0, sh.vocab - 1)] * inside[:, None].to(self.dt)
        add("embedding", "norms and small ops", embed)
        if rm.tp > 1:
            add("all-reduce (embedding)", "collectives", self._all_reduce("h"))
        for p, li in enumerate(rm.layer_of_position):
            W, C = rm.layers[li], rm.caches[li]
            self._attention_ops(add, W, C, sh)
            if li < rm.dense_held:
                self._dense_ops(add, W)
            else:
                self._moe_ops(add, W, sh)
            if rm.tp > 1:
                add("all-reduce (MLP)", "collectives", self._all_reduce("mlp"))
            add("residual (MLP)", "norms and small ops", lambda: setattr(S, "h", S.h + S.mlp))

        def final():
            S.xf = rmsnorm(S.h, H["final_norm"])
        add("final norm", "norms and small ops", final)
        add("lm_head", "lm_head", lambda: setattr(S, "logits", S.xf @ H["lm_head"]))
        if rm.tp > 1 and self.group is not None:
            add("all-gather (logits)", "collectives", self._all_gather_logits())
        else:
            add("logits view", "norms and small ops", lambda: setattr(S, "full_logits", S.logits))
        add("sampling", "norms and small ops", lambda: setattr(S, "next_tokens", S.full_logits.argmax(-1)))
        return ops

    def _attention_ops(self, add, W, C, sh: Shard):
        m, S, b, c = self.rm.m, self.S, self.b, self.c
        ql, kl, r, nope = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim
        hl = sh.heads

        def ln1():
            S.x = rmsnorm(S.h, W["ln1"])
        add("input norm", "norms and small ops", ln1)
        self._quantize(add, "x", "attention", W["qkv_a"], W.get("idx_wk"))
        add("fused q_a + kv_a", "attention", lambda: setattr(S, "qkv", self._mm("x", W["qkv_a"])))

        def norms():
            S.qc = rmsnorm(S.qkv[:, :ql], W["q_norm"])
            S.kvc = rmsnorm(S.qkv[:, ql:ql + kl], W["kv_norm"])
        add("q_a + kv_a norms", "norms and small ops", norms)
        self._quantize(add, "qc", "attention", W["q_b"], W.get("idx_wq_b"))
        add("q_b", "attention", lambda: setattr(S, "q", self._mm("qc", W["q_b"]).view(b, hl, m.qk_head_dim)))

        def absorb_k():
            S.qlat = torch.bmm(S.q[..., :nope].transpose(0, 1), W["w_kc"]).transpose(0, 1)
        add("absorbed k (bmm)", "attention", absorb_k)

        def rot():
            S.qpe = rope(S.q[..., nope:], self.cos, self.sin)
            S.kpe = rope(S.qkv[:, ql + kl:], self.cos, self.sin)
        add("rotary embedding", "attention", rot)

        def store():
            C["kv"][:b, c - 1].copy_(torch.cat([S.kvc, S.kpe], -1))
        add("kv-cache store", "attention", store)
        if m.has_indexer:
            self._indexer_ops(add, W, C)

        def attend():
            q = torch.cat([S.qlat, S.qpe], -1)                       # [b, heads, kv_lora + rope]
            if self.attention == "sparse" and c > m.index_topk:
                k = C["kv"][:b].gather(1, S.topi[..., None].expand(-1, -1, kl + r))
            else:
                k = C["kv"][:b, :c]
            s = torch.bmm(q, k.transpose(1, 2)) * self.scale
            p_ = torch.softmax(s.float(), -1).to(self.dt)
            S.olat = torch.bmm(p_, k[..., :kl])
        add("attention", "attention", attend)

        def absorb_v():
            S.o = torch.bmm(S.olat.transpose(0, 1), W["w_vc"]).transpose(0, 1).reshape(b, hl * m.v_head_dim)
        add("absorbed v (bmm)", "attention", absorb_v)
        self._quantize(add, "o", "attention", W["o_proj"])
        add("o_proj", "attention", lambda: setattr(S, "a", self._mm("o", W["o_proj"])))
        if self.rm.tp > 1:
            add("all-reduce (attention)", "collectives", self._all_reduce("a"))

        def res_norm():
            S.h = S.h + S.a
            S.x2 = rmsnorm(S.h, W["ln2"])
        add("residual + norm", "norms and small ops", res_norm)

    def _indexer_ops(self, add, W, C):
        m, S, b, c = self.rm.m, self.S, self.b, self.c
        nh, d, r = m.index_n_heads, m.index_head_dim, m.qk_rope_head_dim

        def wq():
            S.iq = self._mm("qc", W["idx_wq_b"]).view(b, nh, d)
        add("indexer wq_b", "indexer", wq)

        def wk():
            S.ik = F.layer_norm(self._mm("x", W["idx_wk"]), (d,), W["idx_k_norm_w"], W["idx_k_norm_b"])
        add("indexer wk + k_norm", "indexer", wk)

        def rot():
            S.iq = torch.cat([rope(S.iq[..., :r], self.cos, self.sin), S.iq[..., r:]], -1)
            S.ik = torch.cat([rope(S.ik[..., :r], self.cos, self.sin), S.ik[..., r:]], -1)
        add("indexer rope", "indexer", rot)
        add("indexer weights_proj", "indexer", lambda: setattr(S, "iw", S.x @ W["idx_weights_proj"]))
        add("indexer key store", "indexer", lambda: C["ik"][:b, c - 1].copy_(S.ik))

        def scores():
            sc = torch.relu(torch.bmm(S.iq, C["ik"][:b, :c].transpose(1, 2)))      # [b, heads, c]
            S.isc = (sc * S.iw[..., None]).sum(1)
        add("index scores", "indexer", scores)
        add("top-k", "indexer", lambda: setattr(S, "topi", S.isc.topk(min(m.index_topk, c), -1).indices))

    def _dense_ops(self, add, W):
        S, i = self.S, self.rm.shard.dense_inter
        self._quantize(add, "x2", "shared/dense MLP", W["d_w13"])
        add("dense gate_up", "shared/dense MLP", lambda: setattr(S, "d13", self._mm("x2", W["d_w13"])))
        add("dense activation", "shared/dense MLP",
            lambda: setattr(S, "da", F.silu(S.d13[:, :i]) * S.d13[:, i:]))
        self._quantize(add, "da", "shared/dense MLP", W["d_w2"])
        add("dense down", "shared/dense MLP", lambda: setattr(S, "mlp", self._mm("da", W["d_w2"])))

    def _moe_ops(self, add, W, sh: Shard):
        """As SGLang's DeepseekV2MoE: the shared expert, then the router, top-k and routed experts; with
        the overlap, the latter on the second stream (forked after the MLP input is ready, joined before
        the two outputs are added)."""
        m, S, b = self.rm.m, self.S, self.b
        k, E, i = m.top_k, m.n_routed, sh.moe_inter
        scaling = float(m.routed_scaling)
        shared = "s_w13" in W
        routed = "alt" if (self.overlap and shared) else "main"
        fp8_experts = isinstance(W["w13"], fp8.QWeight)
        j = self._moe_positions
        self._moe_positions += 1
        self._quantize(add, "x2", "moe", W["w13"], W.get("s_w13"))
        if routed == "alt":
            alt, cur = self.alt, torch.cuda.current_stream
            add("fork (routed experts to the second stream)", "moe", lambda: alt.wait_stream(cur()), kind="fork")
        if shared:
            si = sh.shared_inter
            add("shared gate_up", "shared/dense MLP", lambda: setattr(S, "s13", self._mm("x2", W["s_w13"])))
            add("shared activation", "shared/dense MLP",
                lambda: setattr(S, "sa", F.silu(S.s13[:, :si]) * S.s13[:, si:]))
            self._quantize(add, "sa", "shared/dense MLP", W["s_w2"])
            add("shared down", "shared/dense MLP", lambda: setattr(S, "sd", self._mm("sa", W["s_w2"])))

        add("router", "moe", lambda: setattr(S, "rl", (S.x2 @ W["router"]).float()), routed)

        def select():
            s = torch.sigmoid(S.rl)
            if self.forced_routing is not None:
                ids = self.forced_routing[j].to(s.device)
            else:
                ids = torch.topk(s + W["router_bias"].float(), k, -1).indices
            w = s.gather(1, ids)
            S.rw = (w / w.sum(-1, keepdim=True) * scaling).to(self.dt)
            S.ids = ids
            if self.record_routing:
                self.routing.append(ids)
        add("top-k select", "moe", select, routed)

        def permute():
            flat = S.ids.reshape(-1)
            S.order = torch.argsort(flat, stable=True)
            S.tok = S.order // k
            if fp8_experts:
                S.xs_q = fp8.gather_rows(*S.x2_q, S.tok)
            else:
                S.xs = S.x2[S.tok]
            counts = torch.zeros(E, dtype=torch.int32, device=flat.device).scatter_add_(
                0, flat, torch.ones_like(flat, dtype=torch.int32))
            S.offs = torch.cumsum(counts, 0, dtype=torch.int32)
        add("permute", "moe", permute, routed)
        add("grouped gemm 1", "moe", lambda: setattr(S, "g1", self._gmm("xs", W["w13"])), routed)
        add("expert activation", "moe", lambda: setattr(S, "ga", F.silu(S.g1[:, :i]) * S.g1[:, i:]), routed)
        self._quantize(add, "ga", "moe", W["w2"], stream=routed)
        add("grouped gemm 2", "moe", lambda: setattr(S, "g2", self._gmm("ga", W["w2"])), routed)

        def combine():
            wts = S.rw.reshape(-1)[S.order][:, None]
            S.moe = torch.zeros(b, m.hidden, dtype=self.dt, device=S.g2.device).index_add_(
                0, S.tok, S.g2.to(self.dt) * wts)
        add("combine", "moe", combine, routed)
        if routed == "alt":
            alt, cur = self.alt, torch.cuda.current_stream
            add("join (routed experts back)", "moe", lambda: cur().wait_stream(alt), kind="join")
        if shared:
            add("add shared", "norms and small ops", lambda: setattr(S, "mlp", S.moe + S.sd))
        else:
            add("moe out", "norms and small ops", lambda: setattr(S, "mlp", S.moe))

    # ---- the fused program (helpers.model.fused): what an engine fuses is one function, compiled on CUDA
    def _fz(self, fn):
        return fz.compiled(fn, self.compiled)

    def _program_fused(self) -> list[Op]:
        """The same step as _program, with the small ops fused as a serving engine fuses them: each residual
        add folded into the RMSNorm after it (the MLP's into the next layer's input norm), FP8 activation
        quantization inside the op that produces the activation, rotary embedding of all heads in one op,
        the indexer's scoring with its top-k, the router's sigmoid/top-k/normalise in one op, the routing
        weights applied in the experts' activation and the combine a gather-sum with the shared expert's
        output added. Op names of the products are _program's; see helpers.model.fused."""
        rm, m, S = self.rm, self.rm.m, self.S
        sh = rm.shard
        ops: list[Op] = []

        def add(name, comp, fn, stream="main", kind="op"):
            if fn is not None:
                ops.append(Op(name, comp, fn, stream, kind))
        H = rm.head
        lo = rm.rank * sh.vocab
        emb = self._fz(fz.embed)

        def embed():
            S.h = emb(H["embed"], self.tokens, lo, sh.vocab, self.dt)
            S.res = (None, None)      # what the next norm adds to the residual stream first
        add("embedding", "norms and small ops", embed)
        if rm.tp > 1:
            add("all-reduce (embedding)", "collectives", self._all_reduce("h"))
        for li in rm.layer_of_position:
            W, C = rm.layers[li], rm.caches[li]
            self._attention_fused(add, W, C, sh)
            if li < rm.dense_held:
                self._dense_fused(add, W)
            else:
                self._moe_fused(add, W, sh)
        norm = self._fz(fz.add_rmsnorm)

        def final():
            S.h, S.xf, _ = norm(S.h, *S.res, H["final_norm"], 1e-5, False)
        add("final norm", "norms and small ops", final)
        add("lm_head", "lm_head", lambda: setattr(S, "logits", S.xf @ H["lm_head"]))
        if rm.tp > 1 and self.group is not None:
            add("all-gather (logits)", "collectives", self._all_gather_logits())
        else:
            add("logits view", "norms and small ops", lambda: setattr(S, "full_logits", S.logits))
        add("sampling", "norms and small ops", lambda: setattr(S, "next_tokens", S.full_logits.argmax(-1)))
        return ops

    @staticmethod
    def _fp8_any(*weights) -> bool:
        return any(isinstance(w, fp8.QWeight) for w in weights)

    def _set_q(self, name: str, x, q) -> None:
        setattr(self.S, name, x)
        if q is not None:
            setattr(self.S, name + "_q", q)

    def _attention_fused(self, add, W, C, sh: Shard):
        m, S, b, c = self.rm.m, self.S, self.b, self.c
        ql, kl, r, nope = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim
        hl = sh.heads
        norm, lat, rot = self._fz(fz.add_rmsnorm), self._fz(fz.latent_norms), self._fz(fz.rotary_query)
        qx = self._fp8_any(W["qkv_a"], W.get("idx_wk"))
        def ln1():
            S.h, x, q = norm(S.h, *S.res, W["ln1"], 1e-5, qx)
            self._set_q("x", x, q)
        add("input norm", "norms and small ops", ln1)
        fused_w, parts = _x_projection(W)
        n1 = parts[0]

        def proj():
            y = self._mm("x", fused_w)
            S.qkv = y[:, :n1]
            if len(parts) > 1:
                S.ik = y[:, n1:n1 + parts[1]]
            if len(parts) > 2:
                S.iw = y[:, n1 + parts[1]:]
        add("fused q_a + kv_a", "attention", proj)
        qq = self._fp8_any(W["q_b"], W.get("idx_wq_b"))

        def norms():
            qc, S.entry, q = lat(S.qkv, W["q_norm"], W["kv_norm"], ql, kl, r, self.cos, self.sin, 1e-5, qq)
            self._set_q("qc", qc, q)
        add("q_a + kv_a norms", "norms and small ops", norms)
        add("q_b", "attention", lambda: setattr(S, "q", self._mm("qc", W["q_b"]).view(b, hl, m.qk_head_dim)))

        def absorb_k():
            S.qlat = torch.bmm(S.q[..., :nope].transpose(0, 1), W["w_kc"]).transpose(0, 1)
        add("absorbed k (bmm)", "attention", absorb_k)

        add("rotary embedding", "attention",
            lambda: setattr(S, "qfull", rot(S.q, S.qlat, self.cos, self.sin, nope)))
        add("kv-cache store", "attention", lambda: C["kv"][:b, c - 1].copy_(S.entry))
        if m.has_indexer:
            self._indexer_fused(add, W, C)
        if self.attention == "sparse" and c > m.index_topk:
            att = self._fz(fz.attend_sparse)
            fn = lambda: setattr(S, "olat", att(S.qfull, C["kv"][:b], S.topi, self.scale, kl))  # noqa: E731
        else:
            att = self._fz(fz.attend)
            fn = lambda: setattr(S, "olat", att(S.qfull, C["kv"][:b, :c], self.scale, kl))  # noqa: E731
        add("attention", "attention", fn)
        av = self._fz(fz.absorb_v)
        oq = self._fp8_any(W["o_proj"])

        def absorb_v():
            o, q = av(S.olat, W["w_vc"], oq)
            self._set_q("o", o, q)
        add("absorbed v (bmm)", "attention", absorb_v)
        add("o_proj", "attention", lambda: setattr(S, "a", self._mm("o", W["o_proj"])))
        if self.rm.tp > 1:
            add("all-reduce (attention)", "collectives", self._all_reduce("a"))
        mx = self._fp8_any(W.get("d_w13"), W.get("w13"), W.get("s_w13"))

        def res_norm():
            S.h, x2, q = norm(S.h, S.a, None, W["ln2"], 1e-5, mx)
            self._set_q("x2", x2, q)
        add("residual + norm", "norms and small ops", res_norm)

    def _indexer_fused(self, add, W, C):
        m, S, b, c = self.rm.m, self.S, self.b, self.c
        nh, d, r = m.index_n_heads, m.index_head_dim, m.qk_rope_head_dim
        qk, top = self._fz(fz.indexer_qk), self._fz(fz.indexer_topk)
        add("indexer wq_b", "indexer", lambda: setattr(S, "iq", self._mm("qc", W["idx_wq_b"])))
        parts = _x_projection(W)[1]       # wk (and weights_proj) come out of the fused q_a + kv_a product
        if len(parts) < 3:
            add("indexer weights_proj", "indexer", lambda: setattr(S, "iw", S.x @ W["idx_weights_proj"]))

        def rope():
            S.iq3, S.ik2 = qk(S.iq, S.ik, W["idx_k_norm_w"], W["idx_k_norm_b"], self.cos, self.sin, r, nh)
        add("indexer k_norm + rope", "indexer", rope)
        add("indexer key store", "indexer", lambda: C["ik"][:b, c - 1].copy_(S.ik2))
        if c > m.index_topk:
            add("index scores + top-k", "indexer",
                lambda: setattr(S, "topi", top(S.iq3, C["ik"][:b, :c], S.iw, m.index_topk)))
        else:
            # every cached position is in the top-k: the scores are computed, the selection is all of them
            # (SGLang's top-k transform takes the same short path below index_topk tokens)
            sc = self._fz(fz.indexer_scores)
            S.topi = torch.arange(c, device=self.rm.device).expand(b, c)
            add("index scores + top-k", "indexer", lambda: setattr(S, "isc", sc(S.iq3, C["ik"][:b, :c], S.iw)))

    def _dense_fused(self, add, W):
        S, i = self.S, self.rm.shard.dense_inter
        act = self._fz(fz.gated_act)
        q = self._fp8_any(W["d_w2"])
        add("dense gate_up", "shared/dense MLP", lambda: setattr(S, "d13", self._mm("x2", W["d_w13"])))

        def activation():
            a, aq = act(S.d13, i, None, q)
            self._set_q("da", a, aq)
        add("dense activation", "shared/dense MLP", activation)

        def down():
            S.mlp = self._mm("da", W["d_w2"])
            S.res = (S.mlp, None)
        add("dense down", "shared/dense MLP", down)
        if self.rm.tp > 1:
            add("all-reduce (MLP)", "collectives", self._all_reduce("mlp"))

    def _moe_fused(self, add, W, sh: Shard):
        m, S, b = self.rm.m, self.S, self.b
        k, E, i = m.top_k, m.n_routed, sh.moe_inter
        scaling = float(m.routed_scaling)
        shared = "s_w13" in W
        routed = "alt" if (self.overlap and shared) else "main"
        fp8_experts = isinstance(W["w13"], fp8.QWeight)
        j = self._moe_positions
        self._moe_positions += 1
        act, rtf, comb = self._fz(fz.gated_act), self._fz(fz.route_forced), self._fz(fz.combine)
        rt = fz.route_triton if (self.compiled and fz.route_triton_ok(self.rm.device, E, k)) else self._fz(fz.route)
        perm = self._fz(fz.permute_fp8 if fp8_experts else fz.permute)
        if routed == "alt":
            alt, cur = self.alt, torch.cuda.current_stream
            add("fork (routed experts to the second stream)", "moe", lambda: alt.wait_stream(cur()), kind="fork")
        if shared:
            si = sh.shared_inter
            sq = self._fp8_any(W["s_w2"])
            add("shared gate_up", "shared/dense MLP", lambda: setattr(S, "s13", self._mm("x2", W["s_w13"])))

            def s_act():
                a, aq = act(S.s13, si, None, sq)
                self._set_q("sa", a, aq)
            add("shared activation", "shared/dense MLP", s_act)
            add("shared down", "shared/dense MLP", lambda: setattr(S, "sd", self._mm("sa", W["s_w2"])))
        add("router", "moe", lambda: setattr(S, "rl", S.x2 @ W["router"]), routed)

        def select():
            if self.forced_routing is not None:
                S.ids = self.forced_routing[j].to(S.rl.device)
                S.rw = rtf(S.rl, S.ids, scaling, self.dt)
            else:
                S.rw, S.ids = rt(S.rl, W["router_bias"], k, scaling, self.dt)
            if self.record_routing:
                self.routing.append(S.ids)
        add("top-k select", "moe", select, routed)

        def permute():
            if fp8_experts:
                xq, xs, S.pw, S.inv, S.offs = perm(S.ids, S.rw, *S.x2_q, E)
                S.xs_q = (xq, xs)
            else:
                S.xs, S.pw, S.inv, S.offs, _ = perm(S.ids, S.rw, S.x2, E)
        add("permute", "moe", permute, routed)
        add("grouped gemm 1", "moe", lambda: setattr(S, "g1", self._gmm("xs", W["w13"])), routed)

        def e_act():
            a, aq = act(S.g1, i, S.pw, fp8_experts)
            self._set_q("ga", a, aq)
        add("expert activation", "moe", e_act, routed)
        add("grouped gemm 2", "moe", lambda: setattr(S, "g2", self._gmm("ga", W["w2"])), routed)
        # the routed rows come back from the second stream before the combine, which sums each token's expert
        # rows and adds the shared expert's output in one op (no separate add)
        if routed == "alt":
            alt, cur = self.alt, torch.cuda.current_stream
            add("join (routed experts back)", "moe", lambda: cur().wait_stream(alt), kind="join")
        tp = self.rm.tp > 1

        def combine():
            S.mlp = S.moe = comb(S.g2, S.inv, k, self.dt, S.sd if shared else None)
            S.res = (S.mlp, None)
        add("combine", "moe", combine)
        if tp:
            add("all-reduce (MLP)", "collectives", self._all_reduce("mlp"))

    # ---- running
    def components_present(self) -> list[str]:
        return [c for c in COMPONENTS if any(o.component == c for o in self.ops)]

    def op_names(self) -> list[str]:
        """The ops that launch work (the overlap's fork and join are left out: they run with their
        component, never alone)."""
        return list(dict.fromkeys(o.name for o in self.ops if o.kind == "op"))

    def run(self, components: Iterable[str] | None = None, ops: Iterable[str] | None = None) -> None:
        """One step, or only the ops of `components` (or the ops named in `ops`) over every layer; their
        inputs are whatever the last full step left. Ops meant for the second stream run there only where
        the selection holds the fork that hands them over (the whole step, or the MoE block alone)."""
        if components is None and ops is None:
            sel = self.ops
        elif components is not None:
            want = set(components)
            bad = want - set(COMPONENTS)
            if bad:
                raise StepError(f"unknown components {sorted(bad)}; expected some of {COMPONENTS}")
            sel = [o for o in self.ops if o.component in want]
        else:
            want = set(ops)
            bad = want - set(self.op_names())
            if bad:
                raise StepError(f"unknown ops {sorted(bad)}; this step has {self.op_names()}")
            sel = [o for o in self.ops if o.name in want]
        forked = self.overlap and any(o.kind == "fork" for o in sel)
        for op in sel:
            if op.kind != "op" and not forked:
                continue
            if op.stream == "alt" and forked:
                with torch.cuda.stream(self.alt):
                    op.fn()
            else:
                op.fn()

    def logits(self) -> torch.Tensor:
        """The full logits of the last step (gathered over ranks where there is a group)."""
        if not hasattr(self.S, "full_logits"):
            raise StepError("run the step first")
        return self.S.full_logits

    def op_counts(self) -> pd.DataFrame:
        df = pd.DataFrame([{"component": o.component, "op": o.name} for o in self.ops if o.kind == "op"])
        return df.groupby("component", sort=False).size().rename("ops").reset_index()

    def distinct_experts(self) -> float:
        """Mean distinct experts a MoE layer's batch touched in the last recorded step (measured)."""
        if not self.routing:
            raise StepError("no routing recorded: set record_routing = True and run one step")
        return float(np.mean([int(torch.unique(ids).numel()) for ids in self.routing]))


# --------------------------------------------------------------------------------------------------
# Bytes per component


def component_bytes(m: ma.ModelConfig, tp: int, batch: int, context: int, distinct_experts: float,
                    dtype: str = "bf16", attention: str = "dense") -> pd.DataFrame:
    """Bytes one rank reads per decode step, per component: weights and KV cache, in the emulated
    precision (`bytes_emulated`: `dtype`, one of PRECISIONS; for "fp8" 1 byte a value plus a float32 scale
    per output column for FP8_WEIGHTS, 2 for the rest, see stored_bytes) and in the checkpoint's formats from
    the model file (`bytes_checkpoint`, derived; NVFP4 at 4.5 bits a value plus per-tensor scales as in
    helpers.model.arith). Activations are left out (at decode they are a few MiB at most)."""
    _check_shape_args(batch, context)
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


# --------------------------------------------------------------------------------------------------
# Correctness: the sharded step against the unsharded one


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
                from . import steptime
                dist.barrier()
                out["timing"] = steptime.time_point(st, graphs=False, repeats=timing, warmup=1,
                                                    components=True, barrier=dist.barrier)
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
        ctx = mp.get_context("spawn")
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
    rank 0's eager timings of the right split (steptime.time_point rows, collectives included)."""
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
