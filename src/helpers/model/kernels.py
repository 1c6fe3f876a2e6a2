"""Kernel times measured by NVIDIA aiconfigurator (data/reference/aic_*.csv), looked up at GLM-5's shapes.

The tables hold SGLang 0.5.14 kernels timed on 8x RTX PRO 6000 Blackwell Server Edition (the original
investigation's GPUs) and on H200 SXM (the lent GPU), on a grid of shapes. A lookup between grid points
is interpolated (derived): linearly in the token count, the GEMM sizes, the batch, the context and a
collective's message size (aiconfigurator's engine interpolates its collective curves linearly too, so
the book's lookup equals the engine's: tests/test_kernels.py pins it). Repeated keys (the MLA bmm table
has no head-dimension column) are averaged. A point outside a table's grid, or a system, dtype or kernel
the tables do not have, raises KernelTableError naming what is missing and what is there.

Units of the collective table: aiconfigurator keys a collective on its message in ELEMENTS of the row's
dtype (`message_elements`); `table("comm")` converts that once, on loading, to `message_bytes` with the
element size of the dtype (ELEMENT_BYTES), and every lookup (`comm_us`) takes bytes.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pandas as pd

from helpers.core import recorded

RTX = "RTX PRO 6000 Blackwell Server Edition"
H200 = "NVIDIA H200"
B200 = "NVIDIA B200"
#: every system the tables hold, by aiconfigurator's own system name
SYSTEMS = {"rtx_pro_6000_server": RTX, "h200_sxm": H200, "b200_sxm": B200}
#: the MoE routing distribution aiconfigurator's own GLM-5 model uses (sdk/models/deepseek_v32.py)
AIC_DISTRIBUTION = "power_law_1.01"
#: checkpoint format names of helpers.model.arith -> the tables' dtype names
DTYPE = {"bf16": "bfloat16", "nvfp4": "nvfp4", "fp8": "fp8", "fp16": "bfloat16", "fp8_block": "fp8_block"}


#: bytes per element of the collective tables' dtypes (aiconfigurator's names: NCCL 'half', 'int8'; SGLang's
#: custom all-reduce 'bfloat16'; the rest for tables that may come)
ELEMENT_BYTES = {"half": 2, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "fp8": 1, "int8": 1,
                 "float": 4, "float32": 4, "fp32": 4}


class KernelTableError(LookupError):
    """A kernel time the tables cannot give."""


@lru_cache(maxsize=None)
def table(name: str) -> pd.DataFrame:
    """One of data/reference/aic_{gemm,moe,attention,comm,engine_comm,estimate}.csv, checked by the schema;
    the collective tables with `message_bytes` added (with_message_bytes); "gemm" includes the H200's FP8
    GEMMs (aic_h200_gemm_fp8.csv), "h200_indexer" is aic_h200_indexer.csv."""
    df = recorded.load(f"reference/aic_{name}.csv")
    if name == "gemm":
        df = pd.concat([df, recorded.load("reference/aic_h200_gemm_fp8.csv")], ignore_index=True)
    if name in ("comm", "engine_comm"):
        df = with_message_bytes(df, f"data/reference/aic_{name}.csv")
    return df


def element_bytes(dtype: str, where: str = "a collective table") -> int:
    """Bytes per element of a collective table's dtype; KernelTableError naming an unknown one."""
    key = str(dtype).strip().lower()
    if key not in ELEMENT_BYTES:
        raise KernelTableError(f"{where}: dtype {dtype!r} has no known element size; known: {sorted(ELEMENT_BYTES)} "
                               f"(add its bytes per element to helpers.model.kernels.ELEMENT_BYTES)")
    return ELEMENT_BYTES[key]


def with_message_bytes(df: pd.DataFrame, where: str) -> pd.DataFrame:
    """A collective table keyed on `message_elements` with `message_bytes` = elements x the element size of
    each row's dtype: the one place the book converts aiconfigurator's element counts into bytes."""
    for col in ("message_elements", "dtype"):
        if col not in df.columns:
            raise KernelTableError(f"{where}: no '{col}' column (it has {list(df.columns)}); aiconfigurator's "
                                   f"collective tables are keyed on message_elements of a dtype")
    size = {d: element_bytes(d, where) for d in df["dtype"].unique()}
    out = df.copy()
    out["message_bytes"] = out["message_elements"].astype(float) * out["dtype"].map(size).astype(float)
    return out


def _select(df: pd.DataFrame, what: str, **eq) -> pd.DataFrame:
    out = df
    for k, v in eq.items():
        sub = out[out[k] == v]
        if not len(sub):
            have = sorted(str(x) for x in out[k].dropna().unique())
            raise KernelTableError(f"{what}: no rows with {k} = {v!r} (after {list(eq)[:list(eq).index(k)]}); "
                                   f"the table has {have}")
        out = sub
    return out


def _interp(df: pd.DataFrame, keys: list[str], point: list[float], what: str, log: bool = False) -> float:
    """Latency at `point` by successive 1-D interpolation over `keys` (linear, or log-log where `log`)."""
    if not keys:
        return float(df["latency_us"].astype(float).mean())
    k, x = keys[0], float(point[0])
    grid = np.sort(df[k].dropna().astype(float).unique())
    if not len(grid):
        raise KernelTableError(f"{what}: no grid in '{k}'")
    if x < grid[0] - 1e-9 or x > grid[-1] + 1e-9:
        raise KernelTableError(f"{what}: {k} = {x:g} lies outside the measured grid {grid[0]:g}..{grid[-1]:g}")
    hit = np.isclose(grid, x)
    if hit.any():
        g = grid[hit][0]
        return _interp(df[np.isclose(df[k].astype(float), g)], keys[1:], point[1:], what, log)
    lo, hi = grid[grid < x][-1], grid[grid > x][0]
    ylo = _interp(df[np.isclose(df[k].astype(float), lo)], keys[1:], point[1:], what, log)
    yhi = _interp(df[np.isclose(df[k].astype(float), hi)], keys[1:], point[1:], what, log)
    if log:
        f = (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return float(math.exp(math.log(ylo) + f * (math.log(yhi) - math.log(ylo))))
    f = (x - lo) / (hi - lo)
    return float(ylo + f * (yhi - ylo))


# The lookups below are pure functions of their arguments over tables read once (`table`): each is cached, as the
# diagnosis asks for the same kernel thousands of times (07_diagnosis spent about 10 s of its 23 in them under
# load, most in pandas row selections).
@lru_cache(maxsize=65536)
def gemm_us(system: str, dtype: str, m: int, n: int, k: int) -> float:
    """One GEMM of m tokens by an n x k weight (n outputs, k inputs)."""
    d = _select(table("gemm"), "aic_gemm", system=system, gemm_dtype=DTYPE.get(dtype, dtype))
    return _interp(d, ["m", "n", "k"], [m, n, k], f"aic_gemm {system} {dtype} m={m} n={n} k={k}")


@lru_cache(maxsize=65536)
def moe_us(system: str, dtype: str, tokens: int, distribution: str = AIC_DISTRIBUTION, hidden: int = 6144,
           inter: int = 2048, experts: int = 256, topk: int = 8, tp: int = 8, kernel_source: str | None = None) -> float:
    """The fused routed-expert kernel(s) for `tokens` tokens (quantize, permute, both grouped GEMMs,
    finalize; the router GEMM is not in it). `kernel_source` picks one kernel where the table times several
    for the same precision (B200's fp8_block: flashinfer_trtllm and fused_moe_triton); None keeps every row
    (repeated keys averaged)."""
    d = _select(table("moe"), "aic_moe", system=system, moe_dtype=DTYPE.get(dtype, dtype), hidden_size=hidden,
                inter_size=inter, num_experts=experts, topk=topk, moe_tp_size=tp, distribution=distribution)
    if kernel_source is not None:
        d = _select(d, "aic_moe", kernel_source=kernel_source)
    return _interp(d, ["num_tokens"], [tokens], f"aic_moe {system} {dtype} {distribution}")


@lru_cache(maxsize=65536)
def moe_kernel(system: str, dtype: str) -> str:
    d = _select(table("moe"), "aic_moe", system=system, moe_dtype=DTYPE.get(dtype, dtype))
    return str(d["kernel_source"].iloc[0])


@lru_cache(maxsize=65536)
def mla_us(system: str, batch: int, context: int, kv_dtype: str = "bfloat16", heads_per_rank: int = 8) -> float:
    """MLA decode attention over the latent cache (latent 512 + rope 64) for `batch` sequences."""
    d = _select(table("attention"), "aic_attention", system=system, op="mla_generation",
                kv_cache_dtype=kv_dtype, heads_per_rank=heads_per_rank)
    return _interp(d, ["batch_size", "context"], [batch, context], f"mla_generation {system}")


@lru_cache(maxsize=65536)
def mla_bmm_us(system: str, op: str, tokens: int, dtype: str = "bfloat16", heads_per_rank: int = 8) -> float:
    """The head-wise absorbed up-projection before (mla_gen_pre) or after (mla_gen_post) attention."""
    d = _select(table("attention"), "aic_attention", system=system, op=op, gemm_dtype=dtype,
                heads_per_rank=heads_per_rank)
    return _interp(d, ["batch_size"], [tokens], f"{op} {system}")


@lru_cache(maxsize=65536)
def indexer_us(system: str, op: str, batch: int, context: int, score_mode: str = "flat") -> float:
    """One of the GLM-5 indexer's kernels (H200 only): op "glm5_mqa_logits_module" (the index scores,
    DeepGEMM FP8) or "glm5_topk_module" (the top-k, `score_mode` flat or top_last), at `batch` and `context`."""
    d = _select(table("h200_indexer"), "aic_h200_indexer", system=system, op=op)
    if op == "glm5_topk_module":
        d = _select(d, "aic_h200_indexer", score_mode=score_mode)
    return _interp(d, ["batch_size", "context"], [batch, context], f"{op} {system}")


@lru_cache(maxsize=65536)
def dsa_module_us(batch: int, context: int, system: str = H200, model: str = "zai-org/GLM-5",
                  gemm_dtype: str = "bfloat16", kv_dtype: str = "bfloat16") -> float:
    """SGLang's whole GLM-5 DSA attention module (projections, indexer, attention, o_proj) on one rank at
    TP8: the bf16 checkpoint (zai-org/GLM-5, H200 only) or the FP8 one (zai-org/GLM-5-FP8, fp8_block
    projections; H200 and B200), bf16 KV cache unless told otherwise."""
    d = _select(table("attention"), "aic_attention", system=system, op="dsa_generation_module",
                model=model, gemm_dtype=DTYPE.get(gemm_dtype, gemm_dtype), kv_cache_dtype=kv_dtype)
    return _interp(d, ["batch_size", "context"], [batch, context], f"dsa_generation_module {system}")


@lru_cache(maxsize=65536)
def comm_us(system: str, op: str, gpus: int, message_bytes: float, library: str = "nccl") -> float:
    """One collective over `gpus` GPUs of a message of `message_bytes` bytes (NCCL's convention: the whole
    buffer; for an all-gather, the gathered output). The table's element counts were converted to bytes on
    loading (with_message_bytes); interpolated linearly between message sizes, as aiconfigurator's engine does."""
    d = table("comm")
    d = d[d["library"].str.startswith(library)]
    d = _select(d, "aic_comm", system=system, op=op, num_gpus=gpus)
    if "kernel_source" in d and d["kernel_source"].nunique() > 1:
        # aiconfigurator's engine skips '_eager' kernel sources (decode runs under CUDA graphs): so does the book
        graph = d[~d["kernel_source"].astype(str).str.endswith("_eager")]
        d = graph if len(graph) else d
        d = d[d["kernel_source"] == d["kernel_source"].iloc[0]]
    return _interp(d, ["message_bytes"], [message_bytes], f"aic_comm {system} {op} x{gpus} (bytes)")


#: aiconfigurator's estimates in aic_estimate.csv, by the `substitution` each row carries: the stock model
#: (failed on this system: no DSA attention tables), GLM-5's configuration under its DeepSeek-V3 graph, and
#: GLM-5's own graph with only its attention module replaced by dense MLA decode (without and with the
#: indexer's projections)
STOCK = "none"
DSV3_GRAPH = "DeepseekV3ForCausalLM graph, bf16 KV cache"
GLM5_GRAPH = "GLM-5 graph, DSA attention -> dense MLA, bf16 KV cache"
GLM5_GRAPH_INDEXER = "GLM-5 graph, DSA attention -> dense MLA + indexer GEMMs, bf16 KV cache"
#: the substitution the book's "aiconfigurator" budget uses unless told otherwise (the one it has always shown)
DEFAULT_SUBSTITUTION = DSV3_GRAPH


def estimate(substitution: str | None = None) -> pd.DataFrame:
    """aiconfigurator's own estimate rows (data/reference/aic_estimate.csv): all of them, or those of one
    `substitution` (STOCK, DSV3_GRAPH, GLM5_GRAPH, GLM5_GRAPH_INDEXER); KernelTableError naming the ones
    the file has where it has none."""
    e = table("estimate")
    if substitution is None:
        return e
    sub = e[e["substitution"] == substitution]
    if not len(sub):
        raise KernelTableError(f"aic_estimate.csv has no rows with substitution {substitution!r}; it has "
                               f"{sorted(e['substitution'].unique())}")
    return sub


def estimate_step_us(batch: int, substitution: str | None = DEFAULT_SUBSTITUTION) -> tuple[float | None, str, str]:
    """(decode step time or None, status, note) of aiconfigurator's estimate for the deployment at `batch`:
    the stock model where it ran, else the given substitution (None: the first that ran). Status is
    'stock', 'substitution: <label>' or 'failed'."""
    e = estimate()
    e = e[(e["quantity"] == "decode_step") & (e["batch"] == batch)]
    if not len(e):
        raise KernelTableError(f"aic_estimate.csv has no decode_step row for batch {batch}")
    stock = e[e["substitution"] == STOCK]
    if len(stock) and (stock["status"] == "ok").any():
        r = stock[stock["status"] == "ok"].iloc[0]
        return float(r["value"]), "stock", str(r["note"])
    subs = e[e["substitution"] != STOCK]
    if substitution is not None:
        subs = subs[subs["substitution"] == substitution]
        if not len(subs):
            raise KernelTableError(f"aic_estimate.csv has no decode_step row for batch {batch} with substitution "
                                   f"{substitution!r}; it has {sorted(e['substitution'].unique())}")
    ok = subs[subs["status"] == "ok"]
    if len(ok):
        r = ok.iloc[0]
        return float(r["value"]), f"substitution: {r['substitution']}", str(r["note"])
    r = (subs if len(subs) else e).iloc[0]
    return None, "failed", str(r["note"])
