"""Extract the rows of NVIDIA aiconfigurator's measured kernel tables that the book uses into tidy CSVs.

aiconfigurator-core (PyPI, Apache-2.0) ships per-operation kernel times measured on real machines
(parquet tables under `aiconfigurator_core/systems/data/<system>/`). The book uses:

- the RTX PRO 6000 Blackwell Server Edition tables (`rtx_pro_6000_server`, the original GPUs) for the
  decode-step budget on measured kernels;
- the H200 SXM tables (`h200_sxm`, the lent GPU) for a like-for-like check of the torch emulation of the
  decode step (chapter "The decode step, rebuilt").

Only GLM-5's per-rank shapes at tensor parallelism 8 (and the grid points around them, for
interpolation) are kept. Latencies are converted from the tables' milliseconds to microseconds.

Units of the collective tables: aiconfigurator keys `message_size` on ELEMENTS, not bytes. Its NCCL
collector (collector/network/collect_nccl.py) runs nccl-tests at a size in bytes and stores
`size // bytes_per_element`; its engine (NcclOp / CustomAllReduceOp) looks a collective up at
tokens x elements per token (models pass `hidden`). The extracted column is therefore `message_elements`,
with its `dtype`; the book converts it to bytes once, where it loads the table (helpers.model.kernels).

It also runs aiconfigurator's own engine:
- the estimator for the deployment (GLM-5-NVFP4, SGLang 0.5.14, TP8) at the recorded workload: the stock
  model (which fails on this system: no DSA attention tables), GLM-5's configuration under the DeepSeek-V3
  graph, and GLM-5's own graph (aiconfigurator's DeepSeekV32Model) with only its attention module replaced
  by dense MLA decode ops from the same system's tables (`aic_estimate.csv`);
- single collectives at the queries the book pins its own lookup to (`aic_engine_comm.csv`): 8 GPUs,
  NCCL, half precision, 1 and 64 tokens of hidden 6144 (all-reduce) and of the vocabulary (all-gather).

Run it in a scratch environment that has the wheel and pyarrow (not project dependencies):

    pip download --no-deps aiconfigurator-core==0.12.0 -d /tmp/aic
    python -m venv /tmp/aicvenv && /tmp/aicvenv/bin/pip install /tmp/aic/aiconfigurator_core-0.12.0-*.whl
    /tmp/aicvenv/bin/python benchmarks/extract_aiconfigurator.py --out data/reference

`--only aic_engine_comm.csv` (any of the output names, repeatable) writes only those files; the book's test
tests/test_kernels.py runs it that way to ask the engine live where an interpreter with the package is at hand.
It imports nothing from this repository (the scratch environment need not have it installed).
"""
from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

import pandas as pd

SOURCE = "aiconfigurator-core-0.12.0"
FRAMEWORK = "sglang"
VERSION = "0.5.14"
SYSTEMS = {"rtx_pro_6000_server": "RTX PRO 6000 Blackwell Server Edition", "h200_sxm": "NVIDIA H200",
           "b200_sxm": "NVIDIA B200"}

# GLM-5 at TP8, per rank (from data/models/glm5.yaml: hidden 6144, q_lora 2048, kv_lora 512, rope 64,
# 64 heads x (192 + 64) qk and 256 v, indexer 32 x 128, 256 experts of 2048, dense 12288, vocab 154880).
TP = 8
HIDDEN = 6144
GEMMS = {  # name: (n, k): the projections of one rank's decode step
    "fused q_a + kv_a": (2048 + 512 + 64, HIDDEN),
    "q_b": (64 // TP * 256, 2048),
    "o_proj": (HIDDEN, 64 // TP * 256),
    "indexer wq_b": (32 * 128, 2048),
    "indexer wk": (128, HIDDEN),
    "indexer weights_proj": (32, HIDDEN),
    "router": (256, HIDDEN),
    "shared gate_up": (2 * 2048 // TP, HIDDEN),
    "shared down": (HIDDEN, 2048 // TP),
    "dense gate_up": (2 * 12288 // TP, HIDDEN),
    "dense down": (HIDDEN, 12288 // TP),
    "lm_head": (154880 // TP, HIDDEN),
}
#: bf16 and nvfp4 (the NVFP4 checkpoint), fp8_block (the FP8 checkpoint zai-org/GLM-5-FP8: 128x128 block scales)
GEMM_DTYPES = ("bfloat16", "nvfp4", "fp8_block")
MOE_SHAPE = {"hidden_size": HIDDEN, "inter_size": 2048, "num_experts": 256, "topk": 8}
HEADS_PER_RANK = 64 // TP
#: the GLM-5 checkpoints whose whole DSA attention module the tables time (bf16 and FP8 projections)
DSA_MODELS = ("zai-org/GLM-5", "zai-org/GLM-5-FP8")


def data_root(site: Path) -> Path:
    root = site / "aiconfigurator_core" / "systems" / "data"
    if not root.is_dir():
        raise SystemExit(f"{root} does not exist: pass --site, the folder that holds aiconfigurator_core/")
    return root


def bracket(grid, x) -> list:
    """The grid values around x (x itself when it is on the grid)."""
    g = sorted(set(int(v) for v in grid))
    if x in g:
        return [x]
    lo = [v for v in g if v < x]
    hi = [v for v in g if v > x]
    if not lo or not hi:
        raise ValueError(f"{x} lies outside the grid {g[0]}..{g[-1]}")
    return [lo[-1], hi[0]]


def gemm_rows(root: Path, system: str) -> pd.DataFrame:
    path = root / system / "gemm" / FRAMEWORK / VERSION / "gemm_perf.parquet"
    df = pd.read_parquet(path)
    keep = []
    for name, (n, k) in GEMMS.items():
        for dt in GEMM_DTYPES:
            d = df[df["gemm_dtype"] == dt]
            if not len(d):
                continue
            try:
                ns, ks = bracket(d["n"], n), bracket(d["k"], k)
            except ValueError:   # outside this dtype's grid (nvfp4 starts at 128): not kept
                continue
            keep.append(d[d["n"].isin(ns) & d["k"].isin(ks)])
    out = pd.concat(keep).drop_duplicates()
    return pd.DataFrame({
        "system": SYSTEMS[system], "framework": f"{FRAMEWORK} {VERSION}", "kernel_source": out["kernel_source"],
        "gemm_dtype": out["gemm_dtype"], "m": out["m"], "n": out["n"], "k": out["k"],
        "latency_us": out["latency"] * 1e3, "source": SOURCE,
        "note": f"{system}/gemm/{FRAMEWORK}/{VERSION}/gemm_perf.parquet",
    }).sort_values(["system", "gemm_dtype", "n", "k", "m"])


def moe_rows(root: Path, system: str) -> pd.DataFrame:
    path = root / system / "moe" / FRAMEWORK / VERSION / "moe_perf.parquet"
    df = pd.read_parquet(path)
    m = pd.Series(True, index=df.index)
    for c, v in MOE_SHAPE.items():
        m &= df[c] == v
    d = df[m & (df["moe_tp_size"] == TP) & (df["moe_ep_size"] == 1)]
    return pd.DataFrame({
        "system": SYSTEMS[system], "framework": f"{FRAMEWORK} {VERSION}", "kernel_source": d["kernel_source"],
        "moe_dtype": d["moe_dtype"], "num_tokens": d["num_tokens"], "hidden_size": d["hidden_size"],
        "inter_size": d["inter_size"], "num_experts": d["num_experts"], "topk": d["topk"],
        "moe_tp_size": d["moe_tp_size"], "moe_ep_size": d["moe_ep_size"], "distribution": d["distribution"],
        "latency_us": d["latency"] * 1e3, "source": SOURCE,
        "note": f"{system}/moe/{FRAMEWORK}/{VERSION}/moe_perf.parquet",
    }).sort_values(["system", "moe_dtype", "distribution", "num_tokens"])


def attention_rows(root: Path, system: str) -> pd.DataFrame:
    """MLA decode attention (absorbed, latent 512 + rope 64), its two head-wise bmms, and (H200 only)
    SGLang's whole GLM-5 DSA attention module. `context` = isl + step, the KV entries read."""
    frames = []
    base = root / system
    p = base / "mla" / FRAMEWORK / VERSION / "generation_mla_perf.parquet"
    d = pd.read_parquet(p)
    d = d[d["num_heads"] == HEADS_PER_RANK]
    frames.append(pd.DataFrame({
        "op": "mla_generation", "kernel_source": d["kernel_source"], "model": "",
        "gemm_dtype": d["mla_dtype"], "kv_cache_dtype": d["kv_cache_dtype"], "heads_per_rank": d["num_heads"],
        "tp_size": d["tp_size"], "batch_size": d["batch_size"], "context": d["isl"] + d["step"],
        "latency_us": d["latency"] * 1e3, "note": str(p.relative_to(root)) + "; DeepSeek latent dims (512 + 64)"}))
    p = base / "mla_bmm" / FRAMEWORK / VERSION / "mla_bmm_perf.parquet"
    d = pd.read_parquet(p)
    d = d[d["num_heads"] == HEADS_PER_RANK]
    frames.append(pd.DataFrame({
        "op": d["op_name"], "kernel_source": d["kernel_source"], "model": "", "gemm_dtype": d["bmm_dtype"],
        "kv_cache_dtype": "", "heads_per_rank": d["num_heads"], "tp_size": TP, "batch_size": d["num_tokens"],
        "context": pd.NA, "latency_us": d["latency"] * 1e3,
        "note": str(p.relative_to(root)) + "; no head-dimension column: repeated keys are averaged by the book"}))
    p = base / "sparse_attention" / FRAMEWORK / VERSION / "dsa_generation_module_perf.parquet"
    if p.exists():
        d = pd.read_parquet(p)
        d = d[d["model"].isin(DSA_MODELS) & (d["tp_size"] == TP)]
        frames.append(pd.DataFrame({
            "op": d["op_name"], "kernel_source": d["kernel_source"], "model": d["model"],
            "gemm_dtype": d["gemm_type"], "kv_cache_dtype": d["kv_cache_dtype"], "heads_per_rank": d["num_heads"],
            "tp_size": d["tp_size"], "batch_size": d["batch_size"], "context": d["isl"] + d["step"],
            "latency_us": d["latency"] * 1e3,
            "note": str(p.relative_to(root)) + "; whole module: projections, indexer, attention, o_proj"}))
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "system", SYSTEMS[system])
    out.insert(1, "framework", f"{FRAMEWORK} {VERSION}")
    out["source"] = SOURCE
    cols = ["system", "framework", "op", "kernel_source", "model", "gemm_dtype", "kv_cache_dtype", "heads_per_rank",
            "tp_size", "batch_size", "context", "latency_us", "source", "note"]
    return out[cols].sort_values(["system", "op", "kernel_source", "gemm_dtype", "kv_cache_dtype", "batch_size",
                                  "context"])


#: the note each collective row carries: what its message_elements column counts
ELEMENTS_NOTE = "; message_size is in elements of dtype (collector: bytes // bytes per element)"


def comm_rows(root: Path, system: str) -> pd.DataFrame:
    """The NCCL all-reduce / all-gather (half) and SGLang custom all-reduce rows. `message_elements` is the
    tables' `message_size`, unchanged: a count of elements of `dtype` (see the module docstring)."""
    frames = []
    for p in sorted((root / system / "comm" / "nccl").glob("*/nccl_perf.parquet")):
        d = pd.read_parquet(p)
        d = d[(d["nccl_dtype"] == "half") & d["op_name"].isin(["all_reduce", "all_gather"])]
        frames.append(pd.DataFrame({
            "library": f"nccl {p.parent.name}", "kernel_source": d["kernel_source"], "op": d["op_name"],
            "dtype": d["nccl_dtype"], "num_gpus": d["num_gpus"], "message_elements": d["message_size"],
            "latency_us": d["latency"] * 1e3, "note": str(p.relative_to(root)) + ELEMENTS_NOTE}))
    p = root / system / "comm" / FRAMEWORK / VERSION / "custom_allreduce_perf.parquet"
    if p.exists():
        d = pd.read_parquet(p)
        frames.append(pd.DataFrame({
            "library": f"{FRAMEWORK} {VERSION} custom all-reduce", "kernel_source": d["kernel_source"],
            "op": d["op_name"], "dtype": d["allreduce_dtype"], "num_gpus": d["num_gpus"],
            "message_elements": d["message_size"], "latency_us": d["latency"] * 1e3,
            "note": str(p.relative_to(root)) + ELEMENTS_NOTE}))
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "system", SYSTEMS[system])
    out["source"] = SOURCE
    # the book uses the newest NCCL version of each system only
    newest = max((str(v) for v in out.loc[out.library.str.startswith("nccl"), "library"]),
                 key=lambda s: tuple(int(x) for x in s.split()[1].split(".")))
    out = out[(out.library == newest) | ~out.library.str.startswith("nccl")]
    out = out[["system", "library", "kernel_source", "op", "dtype", "num_gpus", "message_elements", "latency_us",
               "source", "note"]]
    return out.sort_values(["system", "library", "kernel_source", "op", "num_gpus", "message_elements"])


# --------------------------------------------------------------------------------------------------
# H200 SXM only: the FP8 GEMMs and the GLM-5 indexer kernels (for the fused step's op fidelity, chapter
# "The decode step, rebuilt"); written to their own files, aic_h200_*.csv

H200 = "h200_sxm"
#: the fused step's product of everything that reads the normalized input: q_a + kv_a + the indexer's wk
#: (+ weights_proj in bf16; helpers.model.step.x_projection)
H200_EXTRA_GEMMS = {"x projection (fp8: q_a + kv_a + wk)": (2048 + 512 + 64 + 128, HIDDEN),
                    "x projection (bf16: q_a + kv_a + wk + weights_proj)": (2048 + 512 + 64 + 128 + 32, HIDDEN)}


def h200_gemm_fp8_rows(root: Path) -> pd.DataFrame:
    """SGLang's FP8 W8A8 GEMM (sgl_kernel fp8_scaled_mm: per-token activation and per-channel weight
    scales, the recipe of helpers.model.fp8) on H200 SXM at the step's shapes and the grid points around them;
    columns as aic_gemm.csv."""
    path = root / H200 / "gemm" / FRAMEWORK / VERSION / "gemm_perf.parquet"
    df = pd.read_parquet(path)
    d = df[df["gemm_dtype"] == "fp8"]
    keep = []
    for name, (n, k) in {**GEMMS, **H200_EXTRA_GEMMS}.items():
        ns, ks = bracket(d["n"], n), bracket(d["k"], k)
        keep.append(d[d["n"].isin(ns) & d["k"].isin(ks)])
    out = pd.concat(keep).drop_duplicates()
    return pd.DataFrame({
        "system": SYSTEMS[H200], "framework": f"{FRAMEWORK} {VERSION}", "kernel_source": out["kernel_source"],
        "gemm_dtype": out["gemm_dtype"], "m": out["m"], "n": out["n"], "k": out["k"],
        "latency_us": out["latency"] * 1e3, "source": SOURCE,
        "note": f"{H200}/gemm/{FRAMEWORK}/{VERSION}/gemm_perf.parquet",
    }).sort_values(["gemm_dtype", "n", "k", "m"])


def h200_indexer_rows(root: Path) -> pd.DataFrame:
    """The GLM-5 DSA indexer's kernels on H200 SXM, kernel-level tables: the index scores (DeepGEMM
    fp8_mqa_logits, FP8 keys) and the top-k (fast_topk_transform_fused, both score modes), per batch and
    context (`context` = isl + step)."""
    frames = []
    for op in ("glm5_mqa_logits_module", "glm5_topk_module"):
        p = root / H200 / "sparse_attention" / FRAMEWORK / VERSION / f"{op}_perf.parquet"
        d = pd.read_parquet(p)
        d = d[(d["model"] == "zai-org/GLM-5") & (d["batch_size"] <= 64)]
        frames.append(pd.DataFrame({
            "system": SYSTEMS[H200], "framework": f"{FRAMEWORK} {d['version'].iloc[0]}",
            "op": op, "kernel_source": d["kernel_source"], "model": d["model"],
            "kv_cache_dtype": d["kv_cache_dtype"], "gemm_type": d["gemm_type"], "num_heads": d["num_heads"],
            "score_mode": d["score_mode"] if "score_mode" in d else "", "batch_size": d["batch_size"],
            "context": d["isl"] + d["step"], "latency_us": d["latency"] * 1e3, "source": SOURCE,
            "note": str(p.relative_to(root))}))
    return pd.concat(frames, ignore_index=True).sort_values(["op", "score_mode", "batch_size", "context"])


def h200_tables(root: Path) -> dict[str, pd.DataFrame]:
    """The H200-only files (kept apart from the tables above)."""
    return {"aic_h200_gemm_fp8.csv": h200_gemm_fp8_rows(root), "aic_h200_indexer.csv": h200_indexer_rows(root)}


# --------------------------------------------------------------------------------------------------
# aiconfigurator's own estimate

ESTIMATE_BATCHES = (1, 64)
ISL, OSL = 256, 256  # the recorded sweep_256_256 workload


def _estimate(model_path: str, system: str, per_op: str = "static", **kw) -> list[dict]:
    """decode_step_latency at each batch, and the generation ops' shares: of run_static_per_op's generation
    phase (`per_op="static"`, summed over the OSL steps) or of decode_step_per_op (`"step"`, the mean step:
    needs no context-phase tables)."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    rows = []
    h = EngineHandle.compile(model_path, system, FRAMEWORK, backend_version=VERSION, tp_size=TP, moe_tp_size=TP,
                             moe_ep_size=1, **kw)
    for b in ESTIMATE_BATCHES:
        ms = h.decode_step_latency(b, ISL, OSL)
        rows.append({"batch": b, "quantity": "decode_step", "value": ms * 1e3, "unit": "us"})
        if per_op == "static":
            _, gen = h.run_static_per_op(batch_size=b, isl=ISL, osl=OSL)
        else:
            gen = h.decode_step_per_op(b, ISL, OSL)
        total = sum(v[1] for v in gen)
        for name, lat_ms, _energy, how in gen:   # keep shares
            rows.append({"batch": b, "quantity": f"share of generation: {name} ({how})",
                         "value": lat_ms / total if total else float("nan"), "unit": "fraction"})
    return rows


# GLM-5's own graph with only the attention module swapped. aiconfigurator models GLM-5 with DeepSeekV32Model,
# whose decode attention is one GenerationDSAModule op priced from dsa_generation_module_perf.parquet; the
# rtx_pro_6000_server tables have no such rows (SGLang 0.5.14's DSA sub-backend raises on SM120), and the
# bare-metal reference ran GLM-5's attention densely there (its release unnamed; the investigation's nightly of
# early 2026 ran the sparse path). The stand-in is aiconfigurator's own granular MLA decode ops (the ones
# its DeepSeekModel uses) at GLM-5's widths, true local head count (64 heads / TP8 = 8), bf16 projections
# (the checkpoint excludes self_attn from NVFP4) and bf16 KV cache (the only MLA rows this system has).
GLM5_ATTENTION = {  # (op, n, k) of the GEMMs; heads per rank for the MLA ops
    "qkv_a": (2048 + 512 + 64, HIDDEN), "q_b": (HEADS_PER_RANK * 256, 2048), "o_proj": (HIDDEN, HEADS_PER_RANK * 256),
    "indexer wq_b": (32 * 128, 2048), "indexer wk": (128, HIDDEN), "indexer weights_proj": (32, HIDDEN)}
GLM5_SUBSTITUTIONS = {
    "GLM-5 graph, DSA attention -> dense MLA, bf16 KV cache": False,
    "GLM-5 graph, DSA attention -> dense MLA + indexer GEMMs, bf16 KV cache": True,
}


def _glm5_dense_attention(model, indexer: bool) -> list:
    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk import operations as ops

    L = model._num_layers * model._mtp_scale_factor
    bf = common.GEMMQuantMode.bfloat16
    heads = model._num_heads // model.config.tp_size
    if heads != HEADS_PER_RANK or model._hidden_size != HIDDEN:
        raise ValueError(f"aiconfigurator's GLM-5 model has {heads} heads per rank and hidden "
                         f"{model._hidden_size}; the stand-in is sized for {HEADS_PER_RANK} and {HIDDEN}")
    g = GLM5_ATTENTION
    out = [ops.GEMM("generation_qkv_a_proj_gemm", L, *g["qkv_a"], bf),
           ops.GEMM("generation_q_b_proj_gemm", L, *g["q_b"], bf),
           ops.MLABmm("generation_bmm_pre", L, heads, bf, if_pre=True),
           ops.GenerationMLA("generation_attention_mla", L, heads, model.config.kvcache_quant_mode),
           ops.MLABmm("generation_bmm_post", L, heads, bf, if_pre=False),
           ops.GEMM("generation_proj_gemm", L, *g["o_proj"], bf)]
    if indexer:
        out += [ops.GEMM(f"generation_{name.replace(' ', '_')}_gemm", L, *g[name], bf)
                for name in ("indexer wq_b", "indexer wk", "indexer weights_proj")]
    return out


def _glm5_graph_estimate(indexer: bool) -> list[dict]:
    """_estimate on aiconfigurator's own GLM-5 model with generation_attention replaced (see above)."""
    import aiconfigurator_core.sdk.engine as engine

    stock = engine.get_model

    def swapped(model_path, model_config, backend):
        model = stock(model_path, model_config, backend)
        names = [op._name for op in model.generation_ops]
        if names.count("generation_attention") != 1:
            raise ValueError(f"aiconfigurator's GLM-5 generation ops are {names}: expected one generation_attention")
        i = names.index("generation_attention")
        if type(model.generation_ops[i]).__name__ != "GenerationDSAModule":
            raise ValueError(f"generation_attention is {type(model.generation_ops[i]).__name__}, not GenerationDSAModule")
        model.generation_ops[i:i + 1] = _glm5_dense_attention(model, indexer)
        return model

    engine.get_model = swapped
    try:
        return _estimate("nvidia/GLM-5-NVFP4", "rtx_pro_6000_server", per_op="step", kvcache_quant_mode="bfloat16",
                         fmha_quant_mode="bfloat16")
    finally:
        engine.get_model = stock


def _error_text(e: BaseException, site: Path) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:400]}".replace(str(site), "<site-packages>")


def estimate_rows(site: Path) -> pd.DataFrame:
    rows = []
    common = {"system": SYSTEMS["rtx_pro_6000_server"], "tp": TP, "isl": ISL, "osl": OSL, "source": SOURCE}
    # 1. the stock model: GLM-5-NVFP4 as aiconfigurator ships it
    try:
        for r in _estimate("nvidia/GLM-5-NVFP4", "rtx_pro_6000_server"):
            rows.append({**common, "model": "nvidia/GLM-5-NVFP4", "substitution": "none", "status": "ok", **r,
                         "note": "stock estimate"})
    except Exception as e:  # noqa: BLE001 - the error itself is the record
        for b in ESTIMATE_BATCHES:
            rows.append({**common, "model": "nvidia/GLM-5-NVFP4", "substitution": "none", "status": "failed",
                         "batch": b, "quantity": "decode_step", "value": pd.NA, "unit": "us",
                         "note": _error_text(e, site)})
    # 2. a documented substitution: GLM-5's configuration under aiconfigurator's DeepSeek-V3 (dense MLA)
    #    graph, bf16 KV cache (the only MLA tables this system has)
    cfg_dir = site / "aiconfigurator_core" / "model_configs"
    tmp = Path(tempfile.mkdtemp(prefix="glm5-as-dsv3-"))
    try:
        cfg = json.loads((cfg_dir / "nvidia--GLM-5-NVFP4_config.json").read_text())
        cfg["architectures"] = ["DeepseekV3ForCausalLM"]
        cfg["model_type"] = "deepseek_v3"
        (tmp / "config.json").write_text(json.dumps(cfg))
        shutil.copy(cfg_dir / "nvidia--GLM-5-NVFP4_hf_quant_config.json", tmp / "hf_quant_config.json")
        sub = "DeepseekV3ForCausalLM graph, bf16 KV cache"
        desc = ("GLM-5-NVFP4 config with architecture DeepseekV3ForCausalLM: dense MLA decode (as the bare-metal reference "
               "ran GLM-5 on SM120, its SGLang release unnamed) in place of DSA; bf16 KV cache and bf16 attention; aiconfigurator's DeepSeek-V3 graph keeps "
               "DeepSeek's fixed attention widths (qkv_a 2112, q_lora 1536, v_head 128) and has no indexer")
        for r in _estimate(str(tmp), "rtx_pro_6000_server", kvcache_quant_mode="bfloat16",
                           fmha_quant_mode="bfloat16"):
            note = (f"decode_step_latency(batch, isl, osl), the mean generation step; {desc}"
                    if r["quantity"] == "decode_step" else "run_static_per_op generation ops, share of their sum")
            rows.append({**common, "model": "nvidia/GLM-5-NVFP4", "substitution": sub, "status": "ok", **r,
                         "note": note})
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        rows.append({**common, "model": "nvidia/GLM-5-NVFP4", "substitution": "DeepseekV3ForCausalLM",
                     "status": "failed", "batch": pd.NA, "quantity": "decode_step", "value": pd.NA, "unit": "us",
                     "note": _error_text(e, site)})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # 3. GLM-5's own graph, only the attention module swapped for dense MLA decode (see GLM5_ATTENTION)
    for sub, indexer in GLM5_SUBSTITUTIONS.items():
        g = GLM5_ATTENTION
        desc = (f"aiconfigurator's own GLM-5 model (DeepSeekV32Model: 78 layers, its MoE, shared expert, router, "
                f"norms, embedding, logits and TP all-reduces as it builds them) with generation_attention "
                f"(GenerationDSAModule, no rows for this system) replaced by its granular MLA decode ops at GLM-5's "
                f"widths: bf16 GEMMs qkv_a {g['qkv_a'][0]}x{g['qkv_a'][1]}, q_b {g['q_b'][0]}x{g['q_b'][1]}, "
                f"o_proj {g['o_proj'][0]}x{g['o_proj'][1]}; mla_gen_pre/post bmm and generation MLA at "
                f"{HEADS_PER_RANK} heads per rank, bf16 KV cache"
                + ("; plus the indexer's bf16 GEMMs wq_b 4096x2048, wk 128x6144, weights_proj 32x6144 (its scores and "
                   "top-k kernels are not in any table)" if indexer else "; no indexer"))
        try:
            for r in _glm5_graph_estimate(indexer):
                note = (f"decode_step_latency(batch, isl, osl), the mean generation step; {desc}"
                        if r["quantity"] == "decode_step" else "decode_step_per_op, share of the mean step")
                rows.append({**common, "model": "nvidia/GLM-5-NVFP4", "substitution": sub, "status": "ok", **r,
                             "note": note})
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            for b in ESTIMATE_BATCHES:
                rows.append({**common, "model": "nvidia/GLM-5-NVFP4", "substitution": sub, "status": "failed",
                             "batch": b, "quantity": "decode_step", "value": pd.NA, "unit": "us",
                             "note": _error_text(e, site)})
    cols = ["system", "model", "substitution", "status", "tp", "batch", "isl", "osl", "quantity", "value", "unit",
            "source", "note"]
    return pd.DataFrame(rows)[cols]


# --------------------------------------------------------------------------------------------------
# aiconfigurator's engine on single collectives: what the book's own lookup is pinned to

ENGINE_COMM_TOKENS = (1, 64)
VOCAB = 154880
ENGINE_COMM = (  # (op, elements per token, what): the book's decode collectives
    ("all_reduce", HIDDEN, "TP all-reduce of hidden 6144"),
    ("all_gather", VOCAB, "logits all-gather, the whole vocabulary per token"),
)


def engine_comm_rows() -> pd.DataFrame:
    """aiconfigurator's engine asked for one NCCL collective over 8 GPUs in half precision on
    rtx_pro_6000_server, the way its models ask (NCCL op with num_elements_per_token, evaluated for
    `tokens` tokens), and SGLang's custom all-reduce for the same all-reduce."""
    import aiconfigurator_core
    from aiconfigurator_core.sdk import common, perf_database
    from aiconfigurator_core.sdk.engine import _evaluate_single_op
    from aiconfigurator_core.sdk.operations.communication import NCCL, CustomAllReduce

    system = "rtx_pro_6000_server"
    db = perf_database.get_database(system, FRAMEWORK, VERSION)
    version = getattr(aiconfigurator_core, "__version__", None) or _dist_version()
    today = datetime.date.today().isoformat()
    rows = []
    for tokens in ENGINE_COMM_TOKENS:
        asks = [(op, per_tok, what, "NCCL", NCCL("q", 1, op, per_tok, TP, common.CommQuantMode.half),
                 f"NCCL('q', 1, '{op}', {per_tok}, {TP}, CommQuantMode.half)") for op, per_tok, what in ENGINE_COMM]
        asks.append(("all_reduce", HIDDEN, "TP all-reduce of hidden 6144", "SGLang custom all-reduce",
                     CustomAllReduce("q", 1, HIDDEN, TP), f"CustomAllReduce('q', 1, {HIDDEN}, {TP})"))
        for op, per_tok, what, lib, ask, text in asks:
            r = _evaluate_single_op(db, ask, is_context=False, batch_size=tokens, s=1)
            rows.append({"system": SYSTEMS[system], "framework": f"{FRAMEWORK} {VERSION}", "library": lib, "op": op,
                         "dtype": "half", "num_gpus": TP, "tokens": tokens, "elements_per_token": per_tok,
                         "message_elements": tokens * per_tok, "latency_us": float(r) * 1e3,
                         "engine_source": str(getattr(r, "source", "")),
                         "query": f"_evaluate_single_op(get_database('{system}', '{FRAMEWORK}', '{VERSION}'), {text}, "
                                  f"is_context=False, batch_size={tokens}, s=1)",
                         "engine_version": f"aiconfigurator-core {version}", "date": today, "source": SOURCE,
                         "note": what})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------------
# aiconfigurator's engine on the single ops of one decode step per system: what helpers.model.predictor's
# lookups are pinned to (tests/test_predictor.py: units, counts, sizes)

#: one configuration per system: (system, checkpoint, GEMM precision of the shared expert, MoE precision,
#: attention as SGLang runs it there): the RTX PRO 6000 runs GLM-5's attention densely (SM120), H200 and
#: B200 its DSA module
ENGINE_OPS_CONFIGS = (
    ("rtx_pro_6000_server", "nvidia/GLM-5-NVFP4", "nvfp4", "nvfp4", "dense_mla"),
    ("h200_sxm", "zai-org/GLM-5-FP8", "fp8_block", "fp8_block", "dsa"),
    ("b200_sxm", "zai-org/GLM-5-FP8", "fp8_block", "fp8_block", "dsa"),
)
ENGINE_OPS_BATCH, ENGINE_OPS_CONTEXT = 64, 1024
GLM5_LAYERS = 78


def _captured_dsa_op(model_path: str, system: str):
    """aiconfigurator's own GLM-5 generation_attention op (GenerationDSAModule, all 78 layers)."""
    import aiconfigurator_core.sdk.engine as engine
    from aiconfigurator_core.sdk.engine import EngineHandle

    cap, stock = {}, engine.get_model

    def grab(*a, **k):
        cap["m"] = stock(*a, **k)
        return cap["m"]

    engine.get_model = grab
    try:
        EngineHandle.compile(model_path, system, FRAMEWORK, backend_version=VERSION, tp_size=TP, moe_tp_size=TP,
                             moe_ep_size=1, kvcache_quant_mode="bfloat16")
    finally:
        engine.get_model = stock
    ops_ = [op for op in cap["m"].generation_ops if type(op).__name__ == "GenerationDSAModule"]
    if len(ops_) != 1:
        raise ValueError(f"{model_path} on {system}: expected one GenerationDSAModule, got {len(ops_)}")
    return ops_[0]


def engine_ops_rows() -> pd.DataFrame:
    """aiconfigurator's engine asked for the single ops of one GLM-5 decode step per system (ENGINE_OPS_CONFIGS)
    at batch ENGINE_OPS_BATCH and ENGINE_OPS_CONTEXT tokens of KV cache: the shared expert's gate_up GEMM, the
    router GEMM, the lm_head GEMM, the fused MoE (aiconfigurator's GLM-5 routing, power_law_1.01), one TP
    all-reduce of hidden 6144 per token (NCCL, half) and the attention (dense MLA decode, or the DSA module,
    which the engine prices for all 78 layers at once: `count` says how many calls its latency covers)."""
    import aiconfigurator_core
    from aiconfigurator_core.sdk import common, perf_database
    from aiconfigurator_core.sdk import operations as ops
    from aiconfigurator_core.sdk.engine import _evaluate_single_op

    version = getattr(aiconfigurator_core, "__version__", None) or _dist_version()
    today = datetime.date.today().isoformat()
    b, ctx = ENGINE_OPS_BATCH, ENGINE_OPS_CONTEXT
    rows = []
    for system, ckpt, gemm_q, moe_q, attention in ENGINE_OPS_CONFIGS:
        db = perf_database.get_database(system, FRAMEWORK, VERSION)
        gq = getattr(common.GEMMQuantMode, gemm_q)
        asks = [  # (op kind, what, shape dict, op object, count it covers)
            ("gemm", "shared gate_up", {"n": 2 * 2048 // TP, "k": HIDDEN, "dtype": gemm_q},
             ops.GEMM("q", 1, 2 * 2048 // TP, HIDDEN, gq), 1),
            ("gemm", "router", {"n": 256, "k": HIDDEN, "dtype": "bfloat16"},
             ops.GEMM("q", 1, 256, HIDDEN, common.GEMMQuantMode.bfloat16), 1),
            ("gemm", "lm_head", {"n": VOCAB // TP, "k": HIDDEN, "dtype": "bfloat16"},
             ops.GEMM("q", 1, VOCAB // TP, HIDDEN, common.GEMMQuantMode.bfloat16), 1),
            ("moe", "routed experts", {"dtype": moe_q, "distribution": "power_law_1.01"},
             ops.MoE("q", 1, HIDDEN, 2048, 8, 256, TP, 1, getattr(common.MoEQuantMode, moe_q), "power_law_1.01", 1), 1),
            ("all_reduce", "TP all-reduce of hidden 6144", {"elements_per_token": HIDDEN, "dtype": "half"},
             ops.NCCL("q", 1, "all_reduce", HIDDEN, TP, common.CommQuantMode.half), 1),
        ]
        if attention == "dense_mla":
            asks.append(("mla", "dense MLA decode (bf16 KV)", {"heads_per_rank": HEADS_PER_RANK, "kv": "bfloat16"},
                         ops.GenerationMLA("q", 1, HEADS_PER_RANK, common.KVCacheQuantMode.bfloat16), 1))
        else:
            asks.append(("dsa", "DSA attention module", {"model": ckpt, "kv": "bfloat16"},
                         _captured_dsa_op(ckpt, system), GLM5_LAYERS))
        for kind, what, shape, op, count in asks:
            r = _evaluate_single_op(db, op, is_context=False, batch_size=b, s=ctx)   # s: the KV length in decode
            rows.append({"system": SYSTEMS[system], "framework": f"{FRAMEWORK} {VERSION}", "checkpoint": ckpt,
                         "kind": kind, "what": what, "shape": json.dumps(shape, sort_keys=True), "batch": b,
                         "context": ctx, "count": count, "latency_us": float(r) * 1e3,
                         "engine_source": str(getattr(r, "source", "")),
                         "query": f"_evaluate_single_op(get_database('{system}', '{FRAMEWORK}', '{VERSION}'), "
                                  f"<{type(op).__name__} {what}>, is_context=False, batch_size={b}, s={ctx})",
                         "engine_version": f"aiconfigurator-core {version}", "date": today, "source": SOURCE,
                         "note": "latency_us covers `count` calls (the DSA op is the model's own, all layers)"})
    return pd.DataFrame(rows)


#: aiconfigurator's own stock estimate of GLM-5's mean decode step (its DeepSeekV32Model, DSA attention) on the
#: systems that have DSA tables, at the holdouts' shapes: (system, checkpoint, batch, isl, osl)
ENGINE_STEP_CONFIGS = (
    ("h200_sxm", "zai-org/GLM-5-FP8", 1, 1000, 1000),
    ("b200_sxm", "zai-org/GLM-5-FP8", 1, 1000, 1000),
    ("h200_sxm", "zai-org/GLM-5-FP8", 64, 1000, 1000),
    ("b200_sxm", "zai-org/GLM-5-FP8", 64, 1000, 1000),
)


def engine_step_rows() -> pd.DataFrame:
    """decode_step_latency(batch, isl, osl) of aiconfigurator's stock GLM-5 model on H200 and B200 (a comparator:
    its own composition, DSA attention, every layer MoE, its TP all-reduces)."""
    import aiconfigurator_core
    from aiconfigurator_core.sdk.engine import EngineHandle

    version = getattr(aiconfigurator_core, "__version__", None) or _dist_version()
    today = datetime.date.today().isoformat()
    rows = []
    for system, ckpt, b, isl, osl in ENGINE_STEP_CONFIGS:
        h = EngineHandle.compile(ckpt, system, FRAMEWORK, backend_version=VERSION, tp_size=TP, moe_tp_size=TP,
                                 moe_ep_size=1)
        rows.append({"system": SYSTEMS[system], "framework": f"{FRAMEWORK} {VERSION}", "checkpoint": ckpt, "tp": TP,
                     "batch": b, "isl": isl, "osl": osl, "decode_step_us": h.decode_step_latency(b, isl, osl) * 1e3,
                     "query": f"EngineHandle.compile('{ckpt}', '{system}', 'sglang', backend_version='{VERSION}', "
                              f"tp_size={TP}, moe_tp_size={TP}, moe_ep_size=1).decode_step_latency({b}, {isl}, {osl})",
                     "engine_version": f"aiconfigurator-core {version}", "date": today, "source": SOURCE})
    return pd.DataFrame(rows)


def _dist_version() -> str:
    from importlib.metadata import version

    return version("aiconfigurator-core")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", type=Path, default=None,
                    help="folder holding aiconfigurator_core/ (default: the installed package's parent)")
    ap.add_argument("--out", type=Path, default=Path("data/reference"), help="output folder")
    ap.add_argument("--no-estimate", action="store_true",
                    help="skip running aiconfigurator's engine (aic_estimate.csv, aic_engine_comm.csv)")
    ap.add_argument("--only", action="append", choices=OUTPUTS, default=None,
                    help="write only this output (repeatable; default: all)")
    ap.add_argument("--h200-only", action="store_true",
                    help="write only the H200 files (aic_h200_*.csv); same as --only for each of them")
    a = ap.parse_args(argv)
    if a.site is None:
        import aiconfigurator_core
        a.site = Path(aiconfigurator_core.__file__).parent.parent
    root = data_root(a.site)
    a.out.mkdir(parents=True, exist_ok=True)
    h200 = {}

    def h200_table(name):
        if not h200:
            h200.update(h200_tables(root))
        return h200[name]

    makers = {
        "aic_gemm.csv": lambda: pd.concat([gemm_rows(root, s) for s in SYSTEMS]),
        "aic_moe.csv": lambda: pd.concat([moe_rows(root, s) for s in SYSTEMS]),
        "aic_attention.csv": lambda: pd.concat([attention_rows(root, s) for s in SYSTEMS]),
        "aic_comm.csv": lambda: pd.concat([comm_rows(root, s) for s in SYSTEMS]),
        "aic_estimate.csv": lambda: estimate_rows(a.site),
        "aic_engine_comm.csv": engine_comm_rows,
        "aic_engine_ops.csv": engine_ops_rows,
        "aic_engine_steps.csv": engine_step_rows,
        "aic_h200_gemm_fp8.csv": lambda: h200_table("aic_h200_gemm_fp8.csv"),
        "aic_h200_indexer.csv": lambda: h200_table("aic_h200_indexer.csv"),
    }
    if a.h200_only:
        a.only = list(H200_OUTPUTS)
    wanted = a.only or [n for n in OUTPUTS if not (a.no_estimate and n in ENGINE_OUTPUTS)]
    for name in wanted:
        df = makers[name]()
        df.to_csv(a.out / name, index=False, float_format="%.6g")
        print(f"{a.out / name}: {len(df)} rows")
    return 0


OUTPUTS = ("aic_gemm.csv", "aic_moe.csv", "aic_attention.csv", "aic_comm.csv", "aic_estimate.csv",
           "aic_engine_comm.csv", "aic_engine_ops.csv", "aic_engine_steps.csv", "aic_h200_gemm_fp8.csv",
           "aic_h200_indexer.csv")
H200_OUTPUTS = ("aic_h200_gemm_fp8.csv", "aic_h200_indexer.csv")
ENGINE_OUTPUTS = ("aic_estimate.csv", "aic_engine_comm.csv", "aic_engine_ops.csv", "aic_engine_steps.csv")


if __name__ == "__main__":
    sys.exit(main())
