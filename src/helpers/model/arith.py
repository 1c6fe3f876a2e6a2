"""Model arithmetic from a configuration file: parameters, bytes, KV cache, collectives, memory fit.

Everything here is computed from `data/models/<name>.yaml` (load it with `load_model`); nothing is
typed in. The conventions, each of them an assumption a reader can change, are stated where they are
used and collected by `assumptions()`:

- parameter groups follow the transformers implementation of the architecture (MLA attention with an
  optional DSA indexer, dense MLP in the first layers, shared + routed experts afterwards);
- "active" parameters are what one token reads: everything except the embedding table (one row is
  read), the routed experts counted at k of E;
- storage formats come from the config's `precision` block; NVFP4 is 4-bit values plus one FP8 scale
  per 16 values plus two FP32 per-tensor scales (weight and input);
- under tensor parallelism (TP) the latent projections (q_a, kv_a), the indexer, norms and the router
  are replicated (as in SGLang's MLA); head-split and intermediate-split matrices, embeddings and the
  LM head are sharded; the MLA latent KV cache is replicated on every TP rank;
- a TP decode step has one all-reduce after attention and one after the MLP/MoE in every layer, one
  after the vocab-parallel embedding and one all-gather of the logits.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from helpers.core import recorded

GiB = 2**30
GB = 1e9

#: bytes per stored value, and per-tensor overhead in bytes, for each storage format
FORMATS: dict[str, dict] = {
    "bf16": {"bytes_per_value": 2.0, "per_tensor_bytes": 0, "describe": "16-bit values"},
    "fp16": {"bytes_per_value": 2.0, "per_tensor_bytes": 0, "describe": "16-bit values"},
    "fp32": {"bytes_per_value": 4.0, "per_tensor_bytes": 0, "describe": "32-bit values"},
    "fp8": {"bytes_per_value": 1.0, "per_tensor_bytes": 4, "describe": "8-bit values + FP32 tensor scale"},
    # FP8 with one FP32 scale per 128 x 128 block (zai-org/GLM-5-FP8)
    "fp8_block": {"bytes_per_value": 1.0 + 4.0 / (128 * 128), "per_tensor_bytes": 0,
                  "describe": "8-bit values + one FP32 scale per 128 x 128 block"},
    # NVFP4: a 4-bit value, one FP8 (E4M3) scale per block of 16 values, and per tensor an FP32 global
    # weight scale and an FP32 input scale.
    "nvfp4": {"bytes_per_value": 0.5 + 1.0 / 16, "per_tensor_bytes": 8,
              "describe": "4-bit values + one FP8 scale per 16 values + two FP32 tensor scales"},
}


class ModelError(ValueError):
    """A model configuration or an argument to the arithmetic is unusable."""


def _positive_int(name: str, value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ModelError(f"{what}: '{name}' = {value!r}; expected a positive integer. "
                         f"Fix the value in the model configuration or the call.")
    return int(value)


@dataclass(frozen=True)
class ModelConfig:
    """The architecture numbers the arithmetic needs, read from data/models/<name>.yaml."""

    key: str                      # file stem, e.g. "glm5"
    name: str
    source: str
    hidden: int
    layers: int
    dense_layers: int
    vocab: int
    tie_embeddings: bool
    heads: int
    kv_heads: int
    q_lora_rank: int              # 0: no low-rank query projection
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    index_n_heads: int            # 0: no DSA indexer
    index_head_dim: int
    index_topk: int
    n_routed: int
    top_k: int
    n_shared: int
    moe_intermediate: int
    dense_intermediate: int
    nextn_layers: int = 0
    routed_scaling: float = 1.0   # routed_scaling_factor: the routed experts' output scale
    precision: Mapping[str, str] = field(default_factory=dict)
    precision_assumed: tuple[str, ...] = ()
    published_total: float | None = None
    published_active: float | None = None
    published_source: str | None = None

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def has_indexer(self) -> bool:
        return self.index_n_heads > 0 and self.index_head_dim > 0

    def fmt(self, group: str) -> str:
        """Storage format of a weight group; groups the config does not name are bf16 (assumed)."""
        return self.precision.get(group, "bf16")

    def fmt_assumed(self, group: str) -> bool:
        return group not in self.precision or group in self.precision_assumed

    @classmethod
    def from_dict(cls, key: str, cfg: dict) -> "ModelConfig":
        where = f"data/models/{key}.yaml"
        try:
            a = cfg["architecture"]
            att = a["attention"]
        except (KeyError, TypeError):
            raise ModelError(f"{where}: needs an 'architecture' block with an 'attention' block") from None
        if att.get("kind", "mla") != "mla":
            raise ModelError(f"{where}: attention kind {att.get('kind')!r} is not supported; "
                             f"expected 'mla' (add the arithmetic for it to helpers.model.arith)")
        idx = a.get("indexer") or {}
        moe = a.get("moe") or {}
        dense = a.get("dense") or {}

        def req(block: dict, k: str, blockname: str) -> int:
            if k not in block:
                raise ModelError(f"{where}: '{blockname}.{k}' is missing")
            return _positive_int(f"{blockname}.{k}", block[k], where)

        prec = dict(cfg.get("precision") or {})
        assumed = tuple(prec.pop("assumed", []) or [])
        prec.pop("source", None)
        for g, f in prec.items():
            if f not in FORMATS:
                raise ModelError(f"{where}: precision of '{g}' is {f!r}; expected one of {sorted(FORMATS)}")
        pub = cfg.get("published") or {}
        m = cls(
            key=key, name=str(cfg.get("name", key)), source=str(cfg.get("source", "")),
            hidden=req(a, "hidden_size", "architecture"),
            layers=req(a, "num_hidden_layers", "architecture"),
            dense_layers=int(a.get("first_k_dense_replace", 0)),
            vocab=req(a, "vocab_size", "architecture"),
            tie_embeddings=bool(a.get("tie_word_embeddings", False)),
            heads=req(att, "num_attention_heads", "attention"),
            kv_heads=int(att.get("num_key_value_heads", att.get("num_attention_heads"))),
            q_lora_rank=int(att.get("q_lora_rank") or 0),
            kv_lora_rank=req(att, "kv_lora_rank", "attention"),
            qk_nope_head_dim=req(att, "qk_nope_head_dim", "attention"),
            qk_rope_head_dim=req(att, "qk_rope_head_dim", "attention"),
            v_head_dim=req(att, "v_head_dim", "attention"),
            index_n_heads=int(idx.get("index_n_heads", 0)),
            index_head_dim=int(idx.get("index_head_dim", 0)),
            index_topk=int(idx.get("index_topk", 0)), n_routed=int(moe.get("n_routed_experts", 0)),
            top_k=int(moe.get("num_experts_per_tok", 0)),
            n_shared=int(moe.get("n_shared_experts", 0)),
            moe_intermediate=int(moe.get("moe_intermediate_size", 0)),
            dense_intermediate=int(dense.get("intermediate_size", 0)),
            nextn_layers=int(a.get("num_nextn_predict_layers", 0)),
            routed_scaling=float(moe.get("routed_scaling_factor", 1.0)),
            precision=prec, precision_assumed=assumed,
            published_total=pub.get("total_parameters"), published_active=pub.get("active_parameters"),
            published_source=pub.get("source"),
        )
        if not 0 <= m.dense_layers <= m.layers:
            raise ModelError(f"{where}: first_k_dense_replace = {m.dense_layers} must lie in 0..{m.layers}")
        if m.moe_layers and (m.n_routed <= 0 or m.top_k <= 0 or m.moe_intermediate <= 0):
            raise ModelError(f"{where}: {m.moe_layers} MoE layers need moe.n_routed_experts, "
                             f"num_experts_per_tok and moe_intermediate_size > 0")
        if m.top_k > m.n_routed:
            raise ModelError(f"{where}: num_experts_per_tok = {m.top_k} exceeds n_routed_experts = {m.n_routed}")
        if m.dense_layers and m.dense_intermediate <= 0:
            raise ModelError(f"{where}: {m.dense_layers} dense layers need dense.intermediate_size > 0")
        return m


def load_model(name: str = "glm5") -> ModelConfig:
    """The model configuration data/models/<name>.yaml as a ModelConfig (unknown name: a clear error)."""
    if not isinstance(name, str) or not name:
        raise ModelError(f"model name {name!r} must be a non-empty string such as 'glm5'")
    try:
        cfg = recorded.model_config(name)
    except recorded.DataError as e:
        raise ModelError(f"unknown model {name!r}: {e}") from None
    return ModelConfig.from_dict(name, cfg)


def known_models() -> list[str]:
    """The model names a chapter may be given: the file stems under data/models/ (read again only when the
    folder changed: a runbook call checks a model name thousands of times)."""
    folder = recorded.data_dir() / "models"
    try:
        stamp = folder.stat().st_mtime_ns
    except OSError:
        stamp = None
    return list(_model_stems(str(folder), stamp))


@lru_cache(maxsize=16)
def _model_stems(folder: str, stamp) -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in Path(folder).glob("*.yaml")))


def model_param():
    """params.Spec of a chapter's model name: one of the file stems under data/models/ (anything else, a path
    such as '../../targets/auto' included, is refused before the run with the known names)."""
    from helpers.core import params

    def check(v):
        if not isinstance(v, str) or v not in known_models():
            raise ValueError
        return v

    known = ", ".join(repr(k) for k in known_models())
    return params.Spec(f"a model under data/models/, one of {known} (add data/models/<name>.yaml for another)",
                       check)


# --------------------------------------------------------------------------------------------------
# Parameters


def _attention_matrices(m: ModelConfig) -> list[tuple[str, int, str]]:
    """(name, parameter count, TP placement) of one layer's attention, indexer and norms."""
    h = m.hidden
    out = []
    if m.q_lora_rank:
        out += [("q_a_proj", h * m.q_lora_rank, "replicated"),
                ("q_a_layernorm", m.q_lora_rank, "replicated"),
                ("q_b_proj", m.q_lora_rank * m.heads * m.qk_head_dim, "sharded")]
    else:
        out += [("q_proj", h * m.heads * m.qk_head_dim, "sharded")]
    out += [("kv_a_proj_with_mqa", h * (m.kv_lora_rank + m.qk_rope_head_dim), "replicated"),
            ("kv_a_layernorm", m.kv_lora_rank, "replicated"),
            ("kv_b_proj", m.kv_lora_rank * m.heads * (m.qk_nope_head_dim + m.v_head_dim), "sharded"),
            ("o_proj", m.heads * m.v_head_dim * h, "sharded")]
    if m.has_indexer:
        qin = m.q_lora_rank or h
        out += [("indexer.wq_b", qin * m.index_n_heads * m.index_head_dim, "replicated"),
                ("indexer.wk", h * m.index_head_dim, "replicated"),
                ("indexer.k_norm", 2 * m.index_head_dim, "replicated"),
                ("indexer.weights_proj", h * m.index_n_heads, "replicated")]
    return out


def parameter_table(m: ModelConfig) -> pd.DataFrame:
    """One row per weight group: parameters in total and read per token, format, bytes, TP placement.

    Columns: group, format, format_assumed, tp_placement, tensors, params, active_params, bytes,
    active_bytes. `tensors` counts weight matrices (for per-tensor scale overhead)."""
    h = m.hidden
    L, Ld, Lm = m.layers, m.dense_layers, m.moe_layers
    att = _attention_matrices(m)
    mats = [(name, n, p) for name, n, p in att if "norm" not in name]
    att_norm = sum(n for name, n, _ in att if "norm" in name)
    att_rep = sum(n for _, n, p in mats if p == "replicated")
    att_shard = sum(n for _, n, p in mats if p == "sharded")
    att_mats_rep = sum(1 for _, _, p in mats if p == "replicated")
    att_mats_shard = sum(1 for _, _, p in mats if p == "sharded")
    expert = 3 * h * m.moe_intermediate
    rows = [
        # group, precision key, placement, tensors, params, active params
        ("attention (head-split)", "attention", "sharded", L * att_mats_shard, L * att_shard, L * att_shard),
        ("attention (latent, indexer)", "attention", "replicated", L * att_mats_rep, L * att_rep, L * att_rep),
        ("norms", "norms", "replicated", 0, L * (2 * h + att_norm) + h, L * (2 * h + att_norm) + h),
        ("dense MLP", "dense_mlp", "sharded", Ld * 3, Ld * 3 * h * m.dense_intermediate,
         Ld * 3 * h * m.dense_intermediate),
        ("router", "router", "replicated", Lm, Lm * m.n_routed * h, Lm * m.n_routed * h),
        ("shared experts", "shared_experts", "sharded", Lm * 3 * m.n_shared, Lm * m.n_shared * expert,
         Lm * m.n_shared * expert),
        ("routed experts", "routed_experts", "sharded", Lm * 3 * m.n_routed, Lm * m.n_routed * expert,
         Lm * m.top_k * expert),
        ("embeddings", "embeddings", "sharded", 1, m.vocab * h, 0),
    ]
    if not m.tie_embeddings:
        rows.append(("lm head", "embeddings", "sharded", 1, m.vocab * h, m.vocab * h))
    out = []
    for group, key, place, tensors, n, act in rows:
        if n == 0:
            continue
        f = m.fmt(key)
        spec = FORMATS[f]
        # per-tensor overhead scaled to the active share of the group
        over = tensors * spec["per_tensor_bytes"]
        out.append({
            "group": group, "format": f, "format_assumed": m.fmt_assumed(key), "tp_placement": place,
            "tensors": tensors, "params": n, "active_params": act,
            "bytes": n * spec["bytes_per_value"] + over,
            "active_bytes": act * spec["bytes_per_value"] + (over * act / n if n else 0),
        })
    return pd.DataFrame(out)


def total_parameters(m: ModelConfig) -> int:
    """Parameters of the decoding model (the MTP/next-n layers excluded)."""
    return int(parameter_table(m)["params"].sum())


def active_parameters(m: ModelConfig) -> int:
    """Parameters one token reads: routed experts at k of E, no embedding table."""
    return int(parameter_table(m)["active_params"].sum())


def published_check(m: ModelConfig) -> pd.DataFrame:
    """Derived totals against the published ones (kind: derived vs reference), with relative error."""
    rows = []
    for what, derived, pub in (("total parameters", total_parameters(m), m.published_total),
                               ("active parameters", active_parameters(m), m.published_active)):
        rel = (derived - pub) / pub if pub else float("nan")
        rows.append({"quantity": what, "derived_B": derived / 1e9,
                     "published_B": (pub / 1e9) if pub else float("nan"),
                     "rel_diff": rel, "published_source": m.published_source or ""})
    return pd.DataFrame(rows)


def weight_bytes(m: ModelConfig) -> float:
    """Bytes of the whole checkpoint's decoding weights at its precision mix."""
    return float(parameter_table(m)["bytes"].sum())


# --------------------------------------------------------------------------------------------------
# Decode-step reads


def _check_batch(batch) -> int:
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ModelError(f"batch = {batch!r}: expected a positive integer number of sequences decoding "
                         f"together (1 = a single stream)")
    return int(batch)


def check_tp(m: ModelConfig, tp) -> int:
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1:
        raise ModelError(f"tp = {tp!r}: expected a positive integer number of GPUs")
    if m.heads % tp:
        divisors = [d for d in range(1, m.heads + 1) if m.heads % d == 0]
        raise ModelError(f"tp = {tp} does not divide the {m.heads} attention heads of {m.name}; "
                         f"use one of {divisors}")
    if m.moe_intermediate and m.moe_intermediate % tp:
        raise ModelError(f"tp = {tp} does not divide moe_intermediate_size {m.moe_intermediate}")
    return int(tp)


def expected_distinct_experts(m: ModelConfig, batch: int) -> float:
    """Expected routed experts touched in one MoE layer by `batch` tokens, each choosing k of E
    uniformly and independently (assumed routing; exact k at batch 1)."""
    b = _check_batch(batch)
    if not m.n_routed:
        return 0.0
    return m.n_routed * (1.0 - (1.0 - m.top_k / m.n_routed) ** b)


def step_weight_bytes(m: ModelConfig, batch: int) -> pd.DataFrame:
    """Weight bytes read by one decode step of `batch` sequences, per group (all GPUs together).

    Every group is read once per step except the routed experts (the distinct experts the batch
    touches) and the embedding table (one row per token)."""
    b = _check_batch(batch)
    t = parameter_table(m).copy()
    per_expert_share = expected_distinct_experts(m, b) / m.n_routed if m.n_routed else 0.0
    read = []
    for r in t.itertuples():
        if r.group == "routed experts":
            read.append(r.bytes * per_expert_share)
        elif r.group == "embeddings":
            read.append(b * m.hidden * FORMATS[r.format]["bytes_per_value"])
        else:
            read.append(r.bytes)
    t["read_bytes"] = read
    return t[["group", "format", "format_assumed", "tp_placement", "read_bytes"]]


def kv_bytes_per_token(m: ModelConfig) -> pd.DataFrame:
    """KV-cache bytes stored per token, all layers: the MLA latent (kv_lora_rank + qk_rope_head_dim)
    and, with DSA, the indexer key (index_head_dim), both at the config's kv_cache format."""
    f = m.fmt("kv_cache")
    bpv = FORMATS[f]["bytes_per_value"]
    rows = [{"part": "MLA latent (kv_lora_rank + qk_rope_head_dim)",
             "values_per_layer": m.kv_lora_rank + m.qk_rope_head_dim, "layers": m.layers}]
    if m.has_indexer:
        rows.append({"part": "DSA indexer key (index_head_dim)", "values_per_layer": m.index_head_dim,
                     "layers": m.layers})
    df = pd.DataFrame(rows)
    df["format"] = f
    df["format_assumed"] = m.fmt_assumed("kv_cache")
    df["bytes"] = df["values_per_layer"] * df["layers"] * bpv
    return df


def kv_read_bytes(m: ModelConfig, batch: int, context: int) -> float:
    """KV bytes read by one decode step (per TP rank: the latent cache is replicated on each).

    Per sequence and layer, DSA attention reads min(context, index_topk) latent entries and the
    indexer scans all `context` keys; without an indexer attention reads all `context` entries."""
    b = _check_batch(batch)
    c = _positive_int("context", context, "kv_read_bytes")
    kv = kv_bytes_per_token(m)
    latent = float(kv["bytes"].iloc[0])
    if m.has_indexer:
        idx = float(kv["bytes"].iloc[1])
        per_seq = min(c, m.index_topk) * latent + c * idx
    else:
        per_seq = c * latent
    return b * per_seq


def weights_per_gpu(m: ModelConfig, tp: int = 1, pp: int = 1, ep: int = 1) -> float:
    """Weight bytes held by one GPU: replicated groups whole, sharded groups / tp (layers / pp).
    With ep > 1 the routed experts are split over ep GPUs instead (whole experts), the rest as tp."""
    tp = check_tp(m, tp)
    pp = _positive_int("pp", pp, "weights_per_gpu")
    ep = _positive_int("ep", ep, "weights_per_gpu")
    if m.n_routed and m.n_routed % ep:
        raise ModelError(f"ep = {ep} does not divide the {m.n_routed} routed experts of {m.name}")
    t = parameter_table(m)
    total = 0.0
    for r in t.itertuples():
        share = 1.0
        if r.group == "routed experts" and ep > 1:
            share = 1.0 / ep
        elif r.tp_placement == "sharded":
            share = 1.0 / tp
        total += r.bytes * share
    return total / pp


# --------------------------------------------------------------------------------------------------
# Communication


def allreduce_bytes(m: ModelConfig, tokens: int | Iterable[int], act_bytes: int = 2) -> np.ndarray | int:
    """All-reduce message of one TP collective: tokens x hidden x act_bytes (bf16 activations: 2)."""
    t = np.asarray(tokens)
    if np.any(t < 1):
        raise ModelError(f"tokens = {tokens!r}: expected positive integers")
    out = t * m.hidden * act_bytes
    return int(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class Collective:
    name: str
    kind: str            # all_reduce | all_gather
    per_step: int        # how many per decode step
    bytes_per_token: int  # total message bytes per token in the batch


def collective_schedule(m: ModelConfig, layers: int | None = None, act_bytes: int = 2,
                        logits_bytes: int = 2) -> list[Collective]:
    """Collectives of one TP decode step (derived, with the conventions in the module docstring):
    per layer one all-reduce after attention and one after the MLP/MoE; one all-reduce after the
    vocab-parallel embedding; one all-gather of the vocab-parallel logits."""
    L = m.layers if layers is None else layers
    return [
        Collective("after attention (o_proj)", "all_reduce", L, m.hidden * act_bytes),
        Collective("after MLP / MoE (down_proj)", "all_reduce", L, m.hidden * act_bytes),
        Collective("after embedding (vocab-parallel)", "all_reduce", 1, m.hidden * act_bytes),
        Collective("logits (vocab-parallel LM head)", "all_gather", 1, m.vocab * logits_bytes),
    ]


def collectives_per_step(m: ModelConfig, kind: str | None = None) -> int:
    """One decode step's collectives, or those of one `kind` ("all_reduce": all but the logits' all-gather)."""
    return sum(c.per_step for c in collective_schedule(m) if kind in (None, c.kind))


def collective_counts(m: ModelConfig) -> pd.DataFrame:
    """Ways to count the collectives of a decode step, each with its convention."""
    per_layer_2 = collectives_per_step(m)
    return pd.DataFrame([
        {"convention": "one all-reduce per layer", "per_layer": 1, "per_step": m.layers,
         "note": "a layer counted as one block with one reduction"},
        {"convention": "two all-reduces per layer (attention, MLP/MoE)", "per_layer": 2,
         "per_step": 2 * m.layers, "note": "row-parallel o_proj and down_proj each end in a reduction"},
        {"convention": "two per layer + embedding + logits (this book)", "per_layer": 2,
         "per_step": per_layer_2, "note": "adds the vocab-parallel embedding and LM-head collectives"},
    ])


def ep_vs_tp_volume(m: ModelConfig, n: int, tokens: int, dispatch_bytes: int = 2,
                    combine_bytes: int = 2) -> pd.DataFrame:
    """Bytes one GPU sends per MoE layer and decode step: TP all-reduce vs EP all-to-all.

    TP (ring all-reduce of tokens x hidden x 2 bytes): 2(n-1)/n of the message, in 2(n-1) rounds.
    EP (dispatch + combine): each token goes to the distinct remote GPUs that hold its k experts
    (E/n experts a GPU, uniform routing assumed); with tokens spread over the n GPUs (data-parallel
    attention) each GPU sends tokens/n tokens' worth, in one round each way."""
    n = _positive_int("n", n, "ep_vs_tp_volume")
    tok = _check_batch(tokens)
    if m.n_routed % n:
        raise ModelError(f"n = {n} does not divide the {m.n_routed} routed experts")
    per_gpu = m.n_routed // n
    # P(a given GPU holds none of a token's k experts) = C(E - E/n, k) / C(E, k)
    p_none = math.comb(m.n_routed - per_gpu, m.top_k) / math.comb(m.n_routed, m.top_k)
    gpus_per_token = n * (1 - p_none)
    remote_per_token = gpus_per_token * (n - 1) / n
    msg = tok * m.hidden * 2
    tp_sent = 2 * (n - 1) / n * msg
    ep_sent = (tok / n) * remote_per_token * m.hidden * (dispatch_bytes + combine_bytes)
    return pd.DataFrame([
        {"layout": f"TP{n} all-reduce", "bytes_sent_per_gpu": tp_sent, "rounds": 2 * (n - 1),
         "note": f"ring; message {msg} B"},
        {"layout": f"EP{n} all-to-all", "bytes_sent_per_gpu": ep_sent, "rounds": 2,
         "note": f"{remote_per_token:.2f} remote GPUs per token (derived); dispatch + combine"},
    ])


# --------------------------------------------------------------------------------------------------
# Memory fit


@dataclass(frozen=True)
class Layout:
    name: str
    gpus: int
    tp: int
    pp: int = 1
    ep: int = 1
    replicated: bool = False   # the whole model on every GPU (data parallel)


def standard_layouts(gpus: int, heads: int) -> list[Layout]:
    """Replicated, TPn, TPn attention + EPn experts, data-parallel attention + EPn experts (all but
    the routed experts replicated), and TP(n/2)+PP2 when n is even."""
    out = [Layout("replicated (whole model per GPU)", gpus, tp=1, replicated=True)]
    if heads % gpus == 0:
        out.append(Layout(f"TP{gpus}", gpus, tp=gpus))
        out.append(Layout(f"TP{gpus} attention + EP{gpus} experts", gpus, tp=gpus, ep=gpus))
    out.append(Layout(f"DP attention + EP{gpus} experts", gpus, tp=1, ep=gpus))
    if gpus % 2 == 0 and heads % (gpus // 2) == 0 and gpus > 2:
        out.append(Layout(f"TP{gpus // 2}+PP2", gpus, tp=gpus // 2, pp=2))
    return out


def memory_fit(m: ModelConfig, gpus: Iterable[dict], layouts: Iterable[Layout] | None = None,
               mem_fraction: float = 1.0, context_tokens: int | None = None) -> pd.DataFrame:
    """What fits where. `gpus` rows: {"system", "count", "memory_bytes", "kind"}.

    For each system and layout: weights per GPU, the memory budget (memory x mem_fraction), whether
    the weights fit, and how many tokens of KV cache the rest holds per GPU (MLA latent replicated on
    every TP rank; with PP each GPU holds its stages' layers)."""
    kv_tok = float(kv_bytes_per_token(m)["bytes"].sum())
    rows = []
    for g in gpus:
        lays = list(layouts) if layouts is not None else standard_layouts(int(g["count"]), m.heads)
        for lay in lays:
            if lay.gpus > g["count"]:
                continue
            if lay.replicated:
                w = weights_per_gpu(m, 1)
                kv_per_tok = kv_tok
            else:
                w = weights_per_gpu(m, lay.tp, lay.pp, lay.ep)
                kv_per_tok = kv_tok / lay.pp
            budget = g["memory_bytes"] * mem_fraction
            free = budget - w
            rows.append({
                "system": g["system"], "gpu_memory_GiB": g["memory_bytes"] / GiB, "system_kind": g.get("kind", ""),
                "layout": lay.name, "gpus_used": lay.gpus,
                "weights_per_gpu_GiB": w / GiB, "budget_GiB": budget / GiB,
                "fits": bool(free > 0), "kv_tokens_per_gpu": max(0.0, free) / kv_per_tok,
            })
    df = pd.DataFrame(rows)
    if context_tokens and len(df):
        df["sequences_at_context"] = df["kv_tokens_per_gpu"] // context_tokens
    return df


def assumptions(m: ModelConfig) -> pd.DataFrame:
    """The modelling conventions the arithmetic rests on, each labelled assumed or from the config."""
    rows = [
        ("parameter groups", "transformers implementation of the architecture", "derived"),
        ("active parameters", "all groups except the embedding table; routed experts at k of E", "assumed"),
        ("routing at batch > 1", "each token picks k of E experts uniformly and independently", "assumed"),
        ("NVFP4 storage", FORMATS["nvfp4"]["describe"], "assumed"),
        ("TP placement", "latent projections, indexer, norms, router replicated; the rest sharded", "assumed"),
        ("KV cache under TP", "MLA latent replicated on every TP rank", "assumed"),
        ("DSA reads", "attention reads min(context, index_topk) latent entries; indexer scans all keys", "assumed"),
        ("activations on the wire", "bf16 (2 bytes per value)", "assumed"),
    ]
    for g in sorted(set(m.precision) | {"router"}):
        rows.append((f"format of {g}", m.fmt(g), "assumed" if m.fmt_assumed(g) else f"config ({m.source})"))
    return pd.DataFrame(rows, columns=["item", "value", "kind"])


def local_gpus() -> list[dict]:
    """This machine's GPUs as memory-fit rows (from the environment probe's NVML reading); an empty
    list where there are none."""
    from helpers.machine.probe import probe

    gpus = [g for g in probe(import_torch=False, p2p=False)["gpus"] if g.get("memory_total_bytes")]
    if not gpus:
        return []
    return [{"system": f"this machine: {len(gpus)}x {gpus[0]['name']}", "count": len(gpus),
             "memory_bytes": min(int(g["memory_total_bytes"]) for g in gpus), "kind": "measured"}]
