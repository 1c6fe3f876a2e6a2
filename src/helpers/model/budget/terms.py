"""The budget's terms: labelled quantities, alpha-beta links and the collective time they give, the kernels
per step (the budget's op lists), a scenario (one way of running the model) and the step time it predicts,
with the term that dominates. See helpers.model.budget."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from helpers.interconnect import fits as alphabeta
from helpers.model import arith as ma

KINDS = ("measured", "derived", "assumed", "reference")
ALGORITHMS = ("ring", "tree", "one_shot")
TERMS = ("memory_us", "launch_us", "comm_us")
TERM_NAMES = {"memory_us": "weight + KV reads", "launch_us": "kernel-launch floor",
              "comm_us": "collectives"}
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)
FITS_RELPATH = "results/06_vm_p2p/fits.csv"  # for labels only: helpers.core.layout owns the path


class BudgetError(ValueError):
    """An input to the budget is missing or unusable."""


@dataclass(frozen=True)
class Quantity:
    """One input of the budget, with its provenance."""

    name: str
    value: float
    unit: str
    kind: str      # measured | derived | assumed | reference
    source: str    # where and how

    def __post_init__(self):
        if self.kind not in KINDS:
            raise BudgetError(f"quantity '{self.name}': kind {self.kind!r} is not one of {KINDS}")
        if not (isinstance(self.value, (int, float)) and math.isfinite(self.value) and self.value > 0):
            raise BudgetError(f"quantity '{self.name}' = {self.value!r} {self.unit}: expected a positive number")


@dataclass(frozen=True)
class Link:
    """time(size) = alpha + size / beta, of a copy (`collective=False`) or of a collective itself."""

    name: str
    alpha_us: float
    beta_GBps: float
    kind: str
    source: str
    collective: bool = False      # True: a fit of the all-reduce itself; no algorithm mapping
    world_size: int | None = None  # for a collective fit: the GPUs it was measured on

    def __post_init__(self):
        if self.kind not in KINDS:
            raise BudgetError(f"link '{self.name}': kind {self.kind!r} is not one of {KINDS}")
        if not (self.alpha_us >= 0 and self.beta_GBps > 0):
            raise BudgetError(f"link '{self.name}': alpha {self.alpha_us} us must be >= 0 and "
                              f"beta {self.beta_GBps} GB/s > 0")

    def time_us(self, size_bytes):
        s = np.asarray(size_bytes, dtype=float)
        per_byte = 0.0 if math.isinf(self.beta_GBps) else 1.0 / (self.beta_GBps * 1e3)
        out = self.alpha_us + s * per_byte
        return float(out) if out.ndim == 0 else out

    @classmethod
    def from_fit(cls, name: str, f: alphabeta.Fit, kind: str, source: str, collective: bool = False,
                 world_size: int | None = None) -> "Link":
        return cls(name, f.alpha_us, f.beta_GBps, kind, source, collective, world_size)


def collective_time_us(link: Link, kind: str, size_bytes, n: int, algorithm: str = "ring"):
    """Time of one collective of `size_bytes` (the full message) over `n` GPUs.

    A collective fit (`link.collective`) is used as is. A copy fit t(s) = alpha + s/beta is mapped:
      ring      all-reduce: 2(n-1) sequential steps of t(S/n); all-gather: (n-1) steps of t(S/n)
      tree      all-reduce: reduce up and broadcast down a binary tree, 2 ceil(log2 n) steps of t(S)
                (unpipelined); all-gather as ring
      one_shot  every GPU reads the n-1 peers' buffers at once: alpha + (n-1) S / beta (one latency,
                the bytes through its own link); all-gather: alpha + (n-1) (S/n) / beta
    """
    if algorithm not in ALGORITHMS:
        raise BudgetError(f"algorithm {algorithm!r}: expected one of {ALGORITHMS}")
    if kind not in ("all_reduce", "all_gather"):
        raise BudgetError(f"collective kind {kind!r}: expected 'all_reduce' or 'all_gather'")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise BudgetError(f"n = {n!r}: expected a positive integer number of GPUs")
    s = np.asarray(size_bytes, dtype=float)
    if np.any(s <= 0):
        raise BudgetError(f"message size {size_bytes!r}: expected positive bytes")
    if n == 1:
        return 0.0 if s.ndim == 0 else np.zeros_like(s)
    if link.collective:
        return link.time_us(s)
    per_byte = 0.0 if math.isinf(link.beta_GBps) else 1.0 / (link.beta_GBps * 1e3)
    if kind == "all_gather":
        if algorithm == "one_shot":
            return link.alpha_us + (n - 1) * (s / n) * per_byte
        return (n - 1) * link.time_us(s / n)
    if algorithm == "ring":
        return 2 * (n - 1) * link.time_us(s / n)
    if algorithm == "tree":
        return 2 * math.ceil(math.log2(n)) * link.time_us(s)
    return link.alpha_us + (n - 1) * s * per_byte


# --------------------------------------------------------------------------------------------------
# Kernels per step (assumed: one kernel per operation, no fusion beyond what is listed)

ATTENTION_OPS = ("input rmsnorm", "fused q_a + kv_a projection", "q_a rmsnorm", "kv_a rmsnorm",
                 "q_b projection", "absorbed k (bmm)", "rope", "kv-cache store", "attention",
                 "absorbed v (bmm)", "o_proj", "all-reduce", "residual add + rmsnorm")
INDEXER_OPS = ("indexer wq_b", "indexer wk", "indexer k_norm", "indexer rope", "indexer weights_proj",
               "indexer key store", "index scores", "top-k")
DENSE_MLP_OPS = ("gate_up", "activation", "down", "all-reduce")
MOE_OPS = ("router", "top-k select", "shared gate_up", "shared activation", "shared down",
           "quantize input", "permute", "grouped gemm 1", "activation + quantize", "grouped gemm 2",
           "unpermute + reduce", "add shared", "all-reduce")
HEAD_OPS = ("embedding", "embedding all-reduce", "final rmsnorm", "lm_head", "logits all-gather",
            "sampling")


def kernel_table(m: ma.ModelConfig) -> pd.DataFrame:
    """Kernels per decode step, by layer kind (assumed op lists; see the *_OPS tuples)."""
    att = len(ATTENTION_OPS)
    if m.has_indexer:
        att += len(INDEXER_OPS)
    rows = [
        {"part": "dense layer", "layers": m.dense_layers, "kernels_per_layer": att + len(DENSE_MLP_OPS)},
        {"part": "MoE layer", "layers": m.moe_layers, "kernels_per_layer": att + len(MOE_OPS)},
        {"part": "embedding + head", "layers": 1, "kernels_per_layer": len(HEAD_OPS)},
    ]
    df = pd.DataFrame(rows)
    df["kernels"] = df["layers"] * df["kernels_per_layer"]
    return df


def kernels_per_step(m: ma.ModelConfig) -> int:
    return int(kernel_table(m)["kernels"].sum())


# --------------------------------------------------------------------------------------------------
# Scenario and step time


@dataclass(frozen=True)
class Scenario:
    """One way of running the model: parallel layout, memory bandwidth, link, launch mode."""

    name: str
    mem_bw: Quantity              # per GPU, GB/s
    link: Link
    launch_graph: Quantity        # us per kernel with CUDA graphs
    launch_eager: Quantity        # us per kernel without
    context: Quantity             # tokens of context per sequence during decode
    tp: int = 8
    pp: int = 1
    algorithm: str = "ring"
    cuda_graphs: bool = True
    note: str = ""
    extra: tuple = field(default_factory=tuple)   # more Quantities shown in the inputs table

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    def inputs(self) -> list[Quantity]:
        q = [self.mem_bw, self.launch_graph if self.cuda_graphs else self.launch_eager, self.context]
        return q + list(self.extra)


def _check_batch(batch) -> int:
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise BudgetError(f"batch = {batch!r}: expected a positive integer number of sequences "
                          f"decoding together (1 = a single stream)")
    return int(batch)


def step_terms(m: ma.ModelConfig, sc: Scenario, batch: int, prefill_tokens: int = 0) -> dict:
    """The budget's terms (microseconds) for one decode step of `batch` sequences.

    `prefill_tokens`: prompt tokens processed in the same step (a mixed batch); they add to the
    experts touched and to the collective message size, not to the KV reads or the kernel count.

    With pipeline parallelism (pp > 1) the batch is split into pp micro-batches; each stage holds
    layers/pp layers on tp GPUs; a step is pp stage-times (every micro-batch passes every stage) plus
    the activations sent between stages."""
    b = _check_batch(batch)
    ma.check_tp(m, sc.tp)
    if sc.pp < 1 or m.layers % sc.pp:
        raise BudgetError(f"pp = {sc.pp} must be a positive divisor of the {m.layers} layers")
    if sc.algorithm not in ALGORITHMS:
        raise BudgetError(f"scenario '{sc.name}': algorithm {sc.algorithm!r} not one of {ALGORITHMS}")
    pp, tp = sc.pp, sc.tp
    if isinstance(prefill_tokens, bool) or not isinstance(prefill_tokens, (int, np.integer)) or prefill_tokens < 0:
        raise BudgetError(f"prefill_tokens = {prefill_tokens!r}: expected a non-negative integer")
    mb = math.ceil(b / pp)
    mt = mb + math.ceil(prefill_tokens / pp)   # tokens through the layers per micro-batch
    w = ma.step_weight_bytes(m, mt)
    per_gpu = float(sum(r.read_bytes / (tp if r.tp_placement == "sharded" else 1) for r in w.itertuples()))
    kv = ma.kv_read_bytes(m, mb, int(sc.context.value))
    stage_bytes = (per_gpu + kv) / pp
    bw_bytes_per_us = sc.mem_bw.value * 1e3
    memory = stage_bytes / bw_bytes_per_us
    per_kernel = (sc.launch_graph if sc.cuda_graphs else sc.launch_eager).value
    launch = kernels_per_step(m) / pp * per_kernel
    comm = 0.0
    for c in ma.collective_schedule(m):
        tokens = mb if c.kind == "all_gather" else mt   # logits only for the decoding sequences
        comm += c.per_step / pp * collective_time_us(sc.link, c.kind, tokens * c.bytes_per_token, tp,
                                                     sc.algorithm)
    send = 0.0
    if pp > 1:  # one point-to-point send of the micro-batch's activations out of every stage but the last
        send = (pp - 1) / pp * sc.link.time_us(mt * m.hidden * 2) if not sc.link.collective else \
            (pp - 1) / pp * sc.link.alpha_us
    out = {"memory_us": pp * memory, "launch_us": pp * launch, "comm_us": pp * (comm + send),
           "bytes_per_gpu": pp * stage_bytes, "kernels": kernels_per_step(m),
           "collectives": ma.collectives_per_step(m)}
    out["total_us"] = out["memory_us"] + out["launch_us"] + out["comm_us"]
    return out


def predict(m: ma.ModelConfig, sc: Scenario, batches: Sequence[int] = DEFAULT_BATCHES,
            prefill_ratio: float = 0.0) -> pd.DataFrame:
    """Predicted step time, its terms and shares, and tokens/s per stream and in aggregate.

    `prefill_ratio`: prompt tokens per output token of the workload (input_len / output_len); each
    step of batch b then carries round(b x ratio) prompt tokens (steady state). 0: pure decode."""
    if not (isinstance(prefill_ratio, (int, float)) and prefill_ratio >= 0):
        raise BudgetError(f"prefill_ratio = {prefill_ratio!r}: expected a number >= 0")
    rows = []
    for b in batches:
        t = step_terms(m, sc, b, int(round(_check_batch(b) * prefill_ratio)))
        total = t["total_us"]
        row = {"scenario": sc.name, "link": sc.link.name, "link_kind": sc.link.kind,
               "algorithm": "measured collective" if sc.link.collective else sc.algorithm,
               "gpus": sc.gpus, "tp": sc.tp, "pp": sc.pp, "cuda_graphs": sc.cuda_graphs,
               "prefill_ratio": prefill_ratio, "batch": b}
        row.update({k: t[k] for k in TERMS})
        row["total_ms"] = total / 1e3
        for k in TERMS:
            row["share_" + k[:-3]] = t[k] / total
        row["tok_s_per_stream"] = 1e6 / total
        row["tok_s_aggregate"] = b * 1e6 / total
        rows.append(row)
    return pd.DataFrame(rows)


def dominant_term(row) -> str:
    shares = {k: row["share_" + k[:-3]] for k in TERMS}
    return TERM_NAMES[max(shares, key=shares.get)]


def verdict(table: pd.DataFrame) -> str:
    """One sentence naming the dominant term at the smallest and largest batch of one scenario."""
    if table["scenario"].nunique() != 1:
        raise BudgetError("verdict() takes the prediction table of one scenario")
    lo, hi = table.loc[table["batch"].idxmin()], table.loc[table["batch"].idxmax()]
    a, b = dominant_term(lo), dominant_term(hi)
    s_lo = max(lo["share_" + k[:-3]] for k in TERMS)
    s_hi = max(hi["share_" + k[:-3]] for k in TERMS)
    second = f"still at batch {int(hi['batch'])}" if a == b else f"{b} at batch {int(hi['batch'])}"
    return (f"{table['scenario'].iloc[0]}: {a} dominate at batch {int(lo['batch'])} "
            f"({s_lo:.0%} of the step) and {second} ({s_hi:.0%}).")
