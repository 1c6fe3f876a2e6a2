"""Building one rank's model: its weights drawn at their local shapes (or the full model cut into ranks),
converted between precisions and moved between devices, and the memory plan that says how many distinct
MoE layers a device can hold. See helpers.model.step for the whole step."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Iterable

import numpy as np
import torch

from .. import arith as ma
from .. import fp8
from .precision import check_precision, held_in_fp8, stored_bytes
from .shapes import (BYTES, DTYPES, PRECISIONS, Shard, StepError, StepMemoryError, WSpec, attention_specs,
                     head_specs, local_shape, mlp_specs, shard_sizes, shard_weight)

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
    check_shape_args(batch, context)
    lim = context_limit(m)
    if lim is not None and context > lim:
        raise StepError(f"context = {context} tokens is beyond {m.name}'s limit of {lim} "
                        f"(max_position_embeddings in data/models/{m.key}.yaml); use a context of at most {lim}")
    check_precision(precision, m, tp)
    del sh


def check_shape_args(batch_max: int, context_max: int) -> None:
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
    check_shape_args(batch_max, context_max)
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
