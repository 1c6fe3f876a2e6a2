"""Kernel times measured by NVIDIA aiconfigurator (data/reference/aic_*.csv), looked up at GLM-5's shapes.

The tables hold SGLang 0.5.14 kernels timed on 8x RTX PRO 6000 Blackwell Server Edition (the original
investigation's GPUs) and on H200 SXM (the lent GPU), on a grid of shapes. A lookup between grid points
is interpolated (derived): linearly in the token count, the GEMM sizes, the batch and the context;
log-log in a collective's message size. Repeated keys (the MLA bmm table has no head-dimension column)
are averaged. A point outside a table's grid, or a system, dtype or kernel the tables do not have, raises
KernelTableError naming what is missing and what is there.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pandas as pd

from helpers.book import recorded

RTX = "RTX PRO 6000 Blackwell Server Edition"
H200 = "NVIDIA H200"
#: the MoE routing distribution aiconfigurator's own GLM-5 model uses (sdk/models/deepseek_v32.py)
AIC_DISTRIBUTION = "power_law_1.01"
#: checkpoint format names of helpers.model.arith -> the tables' dtype names
DTYPE = {"bf16": "bfloat16", "nvfp4": "nvfp4", "fp8": "fp8", "fp16": "bfloat16"}


class KernelTableError(LookupError):
    """A kernel time the tables cannot give."""


@lru_cache(maxsize=None)
def table(name: str) -> pd.DataFrame:
    """One of data/reference/aic_{gemm,moe,attention,comm,estimate}.csv, checked by the schema; "gemm"
    includes the H200's FP8 GEMMs (aic_h200_gemm_fp8.csv), "h200_indexer" is aic_h200_indexer.csv."""
    t = recorded.load(f"reference/aic_{name}.csv")
    if name == "gemm":
        t = pd.concat([t, recorded.load("reference/aic_h200_gemm_fp8.csv")], ignore_index=True)
    return t


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
    """Latency at `point` by successive 1-D interpolation over `keys` (linear, or log-log)."""
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


def gemm_us(system: str, dtype: str, m: int, n: int, k: int) -> float:
    """One GEMM of m tokens by an n x k weight (n outputs, k inputs)."""
    d = _select(table("gemm"), "aic_gemm", system=system, gemm_dtype=DTYPE.get(dtype, dtype))
    return _interp(d, ["m", "n", "k"], [m, n, k], f"aic_gemm {system} {dtype} m={m} n={n} k={k}")


def moe_us(system: str, dtype: str, tokens: int, distribution: str = AIC_DISTRIBUTION, hidden: int = 6144,
           inter: int = 2048, experts: int = 256, topk: int = 8, tp: int = 8) -> float:
    """The fused routed-expert kernel(s) for `tokens` tokens (quantize, permute, both grouped GEMMs,
    finalize; the router GEMM is not in it)."""
    d = _select(table("moe"), "aic_moe", system=system, moe_dtype=DTYPE.get(dtype, dtype), hidden_size=hidden,
                inter_size=inter, num_experts=experts, topk=topk, moe_tp_size=tp, distribution=distribution)
    return _interp(d, ["num_tokens"], [tokens], f"aic_moe {system} {dtype} {distribution}")


def moe_kernel(system: str, dtype: str) -> str:
    d = _select(table("moe"), "aic_moe", system=system, moe_dtype=DTYPE.get(dtype, dtype))
    return str(d["kernel_source"].iloc[0])


def mla_us(system: str, batch: int, context: int, kv_dtype: str = "bfloat16", heads_per_rank: int = 8) -> float:
    """MLA decode attention over the latent cache (latent 512 + rope 64) for `batch` sequences."""
    d = _select(table("attention"), "aic_attention", system=system, op="mla_generation",
                kv_cache_dtype=kv_dtype, heads_per_rank=heads_per_rank)
    return _interp(d, ["batch_size", "context"], [batch, context], f"mla_generation {system}")


def mla_bmm_us(system: str, op: str, tokens: int, dtype: str = "bfloat16", heads_per_rank: int = 8) -> float:
    """The head-wise absorbed up-projection before (mla_gen_pre) or after (mla_gen_post) attention."""
    d = _select(table("attention"), "aic_attention", system=system, op=op, gemm_dtype=dtype,
                heads_per_rank=heads_per_rank)
    return _interp(d, ["batch_size"], [tokens], f"{op} {system}")


def indexer_us(system: str, op: str, batch: int, context: int, score_mode: str = "flat") -> float:
    """One of the GLM-5 indexer's kernels (H200 only): op "glm5_mqa_logits_module" (the index scores,
    DeepGEMM FP8) or "glm5_topk_module" (the top-k, `score_mode` flat or top_last), at `batch` and `context`."""
    d = _select(table("h200_indexer"), "aic_h200_indexer", system=system, op=op)
    if op == "glm5_topk_module":
        d = _select(d, "aic_h200_indexer", score_mode=score_mode)
    return _interp(d, ["batch_size", "context"], [batch, context], f"{op} {system}")


def dsa_module_us(batch: int, context: int, system: str = H200) -> float:
    """SGLang's whole GLM-5 DSA attention module (projections, indexer, attention, o_proj) on one rank at
    TP8, bf16 weights and KV cache (H200 only)."""
    d = _select(table("attention"), "aic_attention", system=system, op="dsa_generation_module",
                model="zai-org/GLM-5", gemm_dtype="bfloat16", kv_cache_dtype="bfloat16")
    return _interp(d, ["batch_size", "context"], [batch, context], f"dsa_generation_module {system}")


def comm_us(system: str, op: str, gpus: int, message_bytes: float, library: str = "nccl") -> float:
    """One collective over `gpus` GPUs of `message_bytes` (NCCL's convention: the whole buffer)."""
    d = table("comm")
    d = d[d["library"].str.startswith(library)]
    d = _select(d, "aic_comm", system=system, op=op, num_gpus=gpus)
    if "kernel_source" in d and d["kernel_source"].nunique() > 1:
        d = d[d["kernel_source"] == d["kernel_source"].iloc[0]]
    return _interp(d, ["message_bytes"], [message_bytes], f"aic_comm {system} {op} x{gpus}", log=True)


def estimate() -> pd.DataFrame:
    """aiconfigurator's own estimate rows (data/reference/aic_estimate.csv)."""
    return table("estimate")


def estimate_step_us(batch: int) -> tuple[float | None, str, str]:
    """(decode step time or None, status, note) of aiconfigurator's estimate for the deployment: the stock
    model where it ran, else the documented substitution."""
    e = estimate()
    e = e[(e["quantity"] == "decode_step") & (e["batch"] == batch)]
    if not len(e):
        raise KernelTableError(f"aic_estimate.csv has no decode_step row for batch {batch}")
    ok = e[e["status"] == "ok"]
    stock = e[e["substitution"] == "none"]
    if len(stock) and (stock["status"] == "ok").any():
        r = stock[stock["status"] == "ok"].iloc[0]
        return float(r["value"]), "stock", str(r["note"])
    if len(ok):
        r = ok.iloc[0]
        return float(r["value"]), f"substitution: {r['substitution']}", str(r["note"])
    return None, "failed", str(e.iloc[0]["note"])
