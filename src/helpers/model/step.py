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
"""
from __future__ import annotations

import math
import os
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterable

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from . import arith as ma

COMPONENTS = ("attention", "indexer", "moe", "shared/dense MLP", "norms and small ops", "lm_head", "collectives")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
ATTENTION_MODES = ("dense", "sparse")
BYTES = {"bf16": 2, "fp32": 4}


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
    if dtype not in DTYPES:
        raise StepError(f"dtype {dtype!r}: expected one of {sorted(DTYPES)}")
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
    cut = lambda d: {k: shard_tensor(v, rule[k], tp, rank) for k, v in d.items()}  # noqa: E731
    return RankModel(full.m, tp, rank, full.dtype, full.device, [cut(L) for L in full.layers], full.dense_held,
                     list(full.layer_of_position), cut(full.head),
                     [{k: v.clone() for k, v in c.items()} for c in full.caches], full.batch_max, full.context_max)


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


def _spec_bytes(specs: Iterable[WSpec], tp: int, nbytes: int) -> float:
    return float(sum(np.prod(local_shape(s, tp)) for s in specs)) * nbytes


#: memory left free on a GPU for graphs, cuBLAS workspaces and activations (none is kept back on a CPU)
GPU_RESERVE_BYTES = 4 * ma.GiB


def plan_memory(m: ma.ModelConfig, tp: int, dtype: str, batch_max: int, context_max: int, free_bytes: float,
                moe_held: int | None = None, usable_fraction: float = 0.85, reserve_bytes: float = GPU_RESERVE_BYTES
                ) -> MemoryPlan:
    """How many distinct MoE layers one rank can hold in `free_bytes`, with their KV caches; raises
    StepMemoryError naming the model, TP degree and the memory needed when not even one fits."""
    _check_shape_args(batch_max, context_max)
    nb = BYTES[dtype]
    att = attention_specs(m)
    dense = _spec_bytes(att + mlp_specs(m, True), tp, nb) if m.dense_layers else 0.0
    moe = _spec_bytes(att + mlp_specs(m, False), tp, nb) if m.moe_layers else 0.0
    head = _spec_bytes(head_specs(m), tp, nb)
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
    after checking the device has the memory (see plan_memory)."""
    if dtype not in DTYPES:
        raise StepError(f"dtype {dtype!r}: expected one of {sorted(DTYPES)}")
    shard_sizes(m, tp)
    if not 0 <= rank < tp:
        raise StepError(f"rank {rank} is not in 0..{tp - 1}")
    plan = plan or plan_memory(m, tp, dtype, batch_max, context_max, device_free_bytes(device), moe_held,
                               reserve_bytes=reserve_for(device))
    dt = DTYPES[dtype]
    gen = torch.Generator(device=device).manual_seed(seed + 1000 * rank)

    def make(specs):
        return {s.name: _fill(torch.empty(local_shape(s, tp), dtype=dt, device=device), s, gen) for s in specs}

    layers = [make(attention_specs(m) + mlp_specs(m, True)) for _ in range(m.dense_layers)]
    layers += [make(attention_specs(m) + mlp_specs(m, False)) for _ in range(plan.moe_held)]
    head = make(head_specs(m))
    caches = _caches(m, len(layers), batch_max, context_max, dt, device, gen)
    rm = RankModel(m, tp, rank, dtype, device, layers, m.dense_layers, positions(m, m.dense_layers, plan.moe_held),
                   head, caches, batch_max, context_max)
    return rm, plan


# --------------------------------------------------------------------------------------------------
# The step


@dataclass
class Op:
    name: str
    component: str
    fn: Callable[[], None]


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved rotary embedding on the last dim; cos/sin broadcast to x[..., ::2]."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


MOE_IMPLS = ("grouped_mm", "loop")


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


class DecodeStep:
    """One decode step of `batch` sequences at `context` tokens of context on one rank.

    `group`: a torch.distributed process group for the TP collectives (None: left out).
    `attention`: "dense" reads the whole KV cache (as SGLang runs GLM-5 on SM120); "sparse" reads the
    indexer's top-k entries (DSA)."""

    def __init__(self, rm: RankModel, batch: int, context: int, group=None, attention: str = "dense", seed: int = 1,
                 moe_impl: str = "grouped_mm"):
        _check_shape_args(batch, context)
        if batch > rm.batch_max or context > rm.context_max:
            raise StepError(f"batch {batch} x context {context} exceeds what the caches were built for "
                            f"({rm.batch_max} x {rm.context_max})")
        if attention not in ATTENTION_MODES:
            raise StepError(f"attention {attention!r}: expected one of {ATTENTION_MODES}")
        if moe_impl not in MOE_IMPLS:
            raise StepError(f"moe_impl {moe_impl!r}: expected one of {MOE_IMPLS}")
        self.rm, self.b, self.c, self.group, self.attention = rm, batch, context, group, attention
        self.moe_impl = moe_impl
        m, dev = rm.m, rm.device
        self.dt = DTYPES[rm.dtype]
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

    # ---- program
    def _program(self) -> list[Op]:
        rm, m, S, b, c = self.rm, self.rm.m, self.S, self.b, self.c
        sh = rm.shard
        ops: list[Op] = []
        add = lambda name, comp, fn: ops.append(Op(name, comp, fn)) if fn is not None else None  # noqa: E731
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
        add("fused q_a + kv_a", "attention", lambda: setattr(S, "qkv", S.x @ W["qkv_a"]))

        def norms():
            S.qc = rmsnorm(S.qkv[:, :ql], W["q_norm"])
            S.kvc = rmsnorm(S.qkv[:, ql:ql + kl], W["kv_norm"])
        add("q_a + kv_a norms", "norms and small ops", norms)
        add("q_b", "attention", lambda: setattr(S, "q", (S.qc @ W["q_b"]).view(b, hl, m.qk_head_dim)))

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
        add("o_proj", "attention", lambda: setattr(S, "a", S.o @ W["o_proj"]))
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
            S.iq = (S.qc @ W["idx_wq_b"]).view(b, nh, d)
        add("indexer wq_b", "indexer", wq)

        def wk():
            S.ik = F.layer_norm(S.x @ W["idx_wk"], (d,), W["idx_k_norm_w"], W["idx_k_norm_b"])
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
        add("dense gate_up", "shared/dense MLP", lambda: setattr(S, "d13", S.x2 @ W["d_w13"]))
        add("dense activation", "shared/dense MLP",
            lambda: setattr(S, "da", F.silu(S.d13[:, :i]) * S.d13[:, i:]))
        add("dense down", "shared/dense MLP", lambda: setattr(S, "mlp", S.da @ W["d_w2"]))

    def _moe_ops(self, add, W, sh: Shard):
        m, S, b = self.rm.m, self.S, self.b
        k, E, i = m.top_k, m.n_routed, sh.moe_inter
        scaling = float(m.routed_scaling)

        add("router", "moe", lambda: setattr(S, "rl", (S.x2 @ W["router"]).float()))

        def select():
            s = torch.sigmoid(S.rl)
            ids = torch.topk(s + W["router_bias"].float(), k, -1).indices
            w = s.gather(1, ids)
            S.rw = (w / w.sum(-1, keepdim=True) * scaling).to(self.dt)
            S.ids = ids
            if self.record_routing:
                self.routing.append(ids)
        add("top-k select", "moe", select)

        def permute():
            flat = S.ids.reshape(-1)
            S.order = torch.argsort(flat, stable=True)
            S.tok = S.order // k
            S.xs = S.x2[S.tok]
            counts = torch.zeros(E, dtype=torch.int32, device=flat.device).scatter_add_(
                0, flat, torch.ones_like(flat, dtype=torch.int32))
            S.offs = torch.cumsum(counts, 0, dtype=torch.int32)
        add("permute", "moe", permute)
        gmm = grouped_mm if self.moe_impl == "grouped_mm" else grouped_mm_loop
        add("grouped gemm 1", "moe", lambda: setattr(S, "g1", gmm(S.xs, W["w13"], S.offs)))
        add("expert activation", "moe", lambda: setattr(S, "ga", F.silu(S.g1[:, :i]) * S.g1[:, i:]))
        add("grouped gemm 2", "moe", lambda: setattr(S, "g2", gmm(S.ga, W["w2"], S.offs)))

        def combine():
            wts = S.rw.reshape(-1)[S.order][:, None]
            S.moe = torch.zeros(b, m.hidden, dtype=self.dt, device=S.g2.device).index_add_(0, S.tok, S.g2 * wts)
        add("combine", "moe", combine)
        if "s_w13" in W:
            si = sh.shared_inter
            add("shared gate_up", "shared/dense MLP", lambda: setattr(S, "s13", S.x2 @ W["s_w13"]))
            add("shared activation", "shared/dense MLP",
                lambda: setattr(S, "sa", F.silu(S.s13[:, :si]) * S.s13[:, si:]))
            add("shared down", "shared/dense MLP", lambda: setattr(S, "sd", S.sa @ W["s_w2"]))
            add("add shared", "norms and small ops", lambda: setattr(S, "mlp", S.moe + S.sd))
        else:
            add("moe out", "norms and small ops", lambda: setattr(S, "mlp", S.moe))

    # ---- running
    def components_present(self) -> list[str]:
        return [c for c in COMPONENTS if any(o.component == c for o in self.ops)]

    def op_names(self) -> list[str]:
        return list(dict.fromkeys(o.name for o in self.ops))

    def run(self, components: Iterable[str] | None = None, ops: Iterable[str] | None = None) -> None:
        """One step, or only the ops of `components` (or the ops named in `ops`) over every layer; their
        inputs are whatever the last full step left."""
        if components is None and ops is None:
            for op in self.ops:
                op.fn()
            return
        if components is not None:
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
        for op in sel:
            op.fn()

    def logits(self) -> torch.Tensor:
        """The full logits of the last step (gathered over ranks where there is a group)."""
        if not hasattr(self.S, "full_logits"):
            raise StepError("run the step first")
        return self.S.full_logits

    def op_counts(self) -> pd.DataFrame:
        df = pd.DataFrame([{"component": o.component, "op": o.name} for o in self.ops])
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
    precision (`bytes_emulated`) and in the checkpoint's formats from the model file (`bytes_checkpoint`,
    derived; NVFP4 at 4.5 bits a value plus per-tensor scales as in helpers.model.arith). Activations are
    left out (at decode they are a few MiB at most)."""
    _check_shape_args(batch, context)
    nb = BYTES[dtype]

    def fmt_bytes(group: str) -> float:
        return ma.FORMATS[m.fmt(group)]["bytes_per_value"]

    rows = {c: [0.0, 0.0] for c in COMPONENTS}

    def add(comp, values, group):
        rows[comp][0] += values * nb
        rows[comp][1] += values * fmt_bytes(group)

    att_specs = [s for s in attention_specs(m) if s.group == "attention" and not s.name.startswith("idx_")]
    idx_specs = [s for s in attention_specs(m) if s.name.startswith("idx_") and s.group == "attention"]
    norm_specs = [s for s in attention_specs(m) if s.group == "norms"]
    n = lambda specs: float(sum(np.prod(local_shape(s, tp)) for s in specs))  # noqa: E731
    L = m.layers
    add("attention", L * n(att_specs), "attention")
    read_ctx = min(context, m.index_topk) if (attention == "sparse" and m.has_indexer) else context
    kv_values = L * batch * read_ctx * (m.kv_lora_rank + m.qk_rope_head_dim)
    rows["attention"][0] += kv_values * nb
    rows["attention"][1] += kv_values * fmt_bytes("kv_cache")
    if m.has_indexer:
        add("indexer", L * n(idx_specs), "attention")
        ik = L * batch * context * m.index_head_dim
        rows["indexer"][0] += ik * nb
        rows["indexer"][1] += ik * fmt_bytes("kv_cache")
    add("norms and small ops", L * n(norm_specs) + m.hidden, "norms")
    add("norms and small ops", batch * m.hidden, "embeddings")   # embedding rows
    if m.moe_layers:
        sh = shard_sizes(m, tp)
        add("moe", m.moe_layers * m.hidden * m.n_routed, "router")
        per_expert = 3 * m.hidden * sh.moe_inter
        add("moe", m.moe_layers * distinct_experts * per_expert, "routed_experts")
        if m.n_shared:
            add("shared/dense MLP", m.moe_layers * 3 * m.hidden * sh.shared_inter, "shared_experts")
    if m.dense_layers:
        add("shared/dense MLP", m.dense_layers * 3 * m.hidden * shard_sizes(m, tp).dense_inter, "dense_mlp")
    add("lm_head", m.hidden * shard_sizes(m, tp).vocab, "embeddings")
    return pd.DataFrame([{"component": c, "bytes_emulated": v[0], "bytes_checkpoint": v[1]} for c, v in rows.items()])


# --------------------------------------------------------------------------------------------------
# Correctness: the sharded step against the unsharded one


@dataclass(frozen=True)
class LogitCheck:
    """max |sharded - unsharded| over the logits, relative to max |unsharded|, against a tolerance."""

    max_abs_err: float
    ref_scale: float
    rel_err: float
    tolerance: float
    tokens_agree: bool

    @property
    def ok(self) -> bool:
        return bool(self.rel_err <= self.tolerance and self.tokens_agree)


#: tolerance of the sharded-vs-unsharded check in fp32 (summation order differs between the two)
FP32_TOLERANCE = 1e-4


def compare_logits(ref: torch.Tensor, got: torch.Tensor, tolerance: float = FP32_TOLERANCE) -> LogitCheck:
    if tuple(ref.shape) != tuple(got.shape):
        raise StepError(f"logits shapes differ: unsharded {tuple(ref.shape)} vs sharded {tuple(got.shape)}")
    r, g = ref.double(), got.double()
    if not (torch.isfinite(r).all() and torch.isfinite(g).all()):
        return LogitCheck(float("inf"), float(r.abs().max()), float("inf"), tolerance, False)
    err = float((r - g).abs().max())
    scale = float(r.abs().max()) or 1.0
    return LogitCheck(err, scale, err / scale, tolerance, bool(torch.equal(r.argmax(-1), g.argmax(-1))))


def unsharded_logits(m: ma.ModelConfig, batch: int, context: int, seed: int = 0, moe_held: int | None = None,
                     attention: str = "dense") -> torch.Tensor:
    full = build_full(m, batch, context, "fp32", seed, moe_held)
    st = DecodeStep(full, batch, context, attention=attention)
    st.run()
    return st.logits().clone()


def _rank_main(rank: int, world: int, init_file: str, out_dir: str, model_key: str, batch: int, context: int,
               seed: int, moe_held, variants, timing) -> None:
    import torch.distributed as dist

    from helpers.book import procs

    procs.die_with_parent()   # a rank dies with the process that started it (kill -9 included)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        m = ma.load_model(model_key)
        full = build_full(m, batch, context, "fp32", seed, moe_held)
        out = {}
        for name, overrides in variants:
            rm = shard_model(full, world, rank, overrides)
            st = DecodeStep(rm, batch, context, group=dist.group.WORLD)
            st.run()
            out[name] = st.logits().clone()
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
                timeout_s: float = 120.0) -> dict:
    """The step over `tp` real processes on the CPU (torch.multiprocessing, gloo), each cutting its shard
    from the same seeded full model; returns rank 0's gathered logits per variant (and, with
    `timing_repeats`, its eager timings with the collectives in)."""
    import torch.multiprocessing as mp

    variants = variants or [("sharded", None)]
    with tempfile.TemporaryDirectory(prefix="step-ranks-") as tmp:
        init = os.path.join(tmp, "init")
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_rank_main, args=(r, tp, init, tmp, model_key, batch, context, seed, moe_held,
                                                      variants, timing_repeats)) for r in range(tp)]
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
