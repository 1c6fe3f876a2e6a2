"""The expert-parallelism chapter's derived tables and the figures its prose cites: the model's size
against the published and reported figures, the hidden size settled from the recorded copies, what fits
on which GPUs, and what TP and EP move per decode step.

Everything is computed with `helpers.model.arith` from the model configuration and the rows of `data/`;
each figure the prose cites is picked with `helpers.core.recorded.value`, which names the table, the
condition and what is there instead when a row or a label is missing.
"""
from __future__ import annotations

import pandas as pd

from helpers.core import recorded
from helpers.core.recorded import DataError, value
from helpers.model import arith as ma

#: context length of one sequence in the KV-cache count (assumed)
CONTEXT_TOKENS = 4096
#: tokens in the decode batch for the message sizes and the EP/TP volumes
MESSAGE_BATCHES = (1, 4, 16, 64, 256)
VOLUME_BATCHES = (1, 2, 4, 8, 16, 32, 64)


def _named(df: pd.DataFrame, name: str) -> pd.DataFrame:
    df = df.copy()
    df.attrs["table"] = name
    return df


def size_facts(m: ma.ModelConfig, footprint: pd.DataFrame, claims: pd.DataFrame) -> dict:
    """Parameters and bytes (derived) against the published totals, the reported checkpoint size and the
    status report's expert figure."""
    pt = _named(ma.parameter_table(m), "the parameter table")
    check = _named(ma.published_check(m), "the published-totals check")
    ckpt = ma.weight_bytes(m) / ma.GB
    lo = float(value(footprint, "value_low", metric="checkpoint_size"))
    hi = float(value(footprint, "value_high", metric="checkpoint_size"))
    moe_src = str(value(claims, "source", quantity="moe_expert_weights"))
    return {"model_file": f"{m.key}.yaml", "model_source": m.source,
            "total_B": ma.total_parameters(m) / 1e9, "active_B": ma.active_parameters(m) / 1e9,
            "pub_total_B": m.published_total / 1e9, "pub_active_B": m.published_active / 1e9,
            "total_diff_pct": 100 * value(check, "rel_diff", quantity="total parameters"),
            "active_diff_pct": 100 * value(check, "rel_diff", quantity="active parameters"),
            "ckpt_GB": ckpt, "ckpt_ref_lo": lo, "ckpt_ref_hi": hi,
            "routed_GB": float(value(pt, "bytes", group="routed experts")) / ma.GB,
            "ckpt_rel": "inside" if lo <= ckpt <= hi else (f"within {100 * (ckpt - hi) / hi:.0f} % above"
                                                           if ckpt > hi else f"{100 * (lo - ckpt) / lo:.0f} % below"),
            "claim_moe_GB": float(value(claims, quantity="moe_expert_weights")),
            "claim_moe_src": recorded.sources()[moe_src]["file"]}


def claims_with_files(claims: pd.DataFrame, *quantities: str) -> pd.DataFrame:
    """The recorded claims about `quantities`, each with the seed file it comes from."""
    out = claims[claims.quantity.isin(quantities)].copy()
    missing = sorted(set(quantities) - set(out.quantity))
    if missing:
        raise DataError(f"data/recorded/model_claims.csv has no claim about {missing}")
    out["seed_file"] = [recorded.sources()[s]["file"] for s in out.source]
    return out


def hidden_size_table(copies: pd.DataFrame, candidates: list[int]) -> pd.DataFrame:
    """Per recorded copy: the bytes it moved (bandwidth x latency), the hidden size that implies at
    2 bytes per value, and the message size each candidate hidden size would give."""
    rows = []
    for r in copies[copies.tokens.notna() & copies.latency_us.notna()].itertuples():
        moved = float(r.bandwidth_GBps) * float(r.latency_us) * 1e3   # bytes = GB/s x us x 1e3
        row = {"label": r.label, "tokens": int(r.tokens), "bytes_moved (bandwidth x latency)": moved,
               "implied hidden size": moved / (int(r.tokens) * 2)}
        row.update({f"tokens x {h} x 2 (B)": int(r.tokens) * h * 2 for h in candidates})
        rows.append(row)
    if not rows:
        raise DataError("data/recorded/copy_sweep.csv has no copy with tokens and a latency to size it")
    return pd.DataFrame(rows)


def hidden_facts(m: ma.ModelConfig, candidates: list[int], table: pd.DataFrame) -> dict:
    implied = table["implied hidden size"]
    return {"hs_config": m.hidden, "hs_claims": " and ".join(str(h) for h in candidates),
            "hs_other": [h for h in candidates if h != m.hidden][0] if len(candidates) > 1 else m.hidden,
            "hs_implied_lo": float(implied.min()), "hs_implied_hi": float(implied.max())}


def systems(hw: dict, specs: pd.DataFrame, local: list[dict]) -> list[dict]:
    """The machines of the memory-fit table: the recorded one, eight H200s (reference, where the specs
    have them) and this machine's GPUs (`local`, from ma.local_gpus(); may be empty)."""
    n, model = int(hw["gpu_count"].value), hw["gpu_model"].value
    out = [{"system": f"recorded: {n}x {model}", "count": n, "memory_bytes": float(hw["gpu_memory"].value) * ma.GiB,
            "kind": "recorded"}]
    h200 = specs[(specs.system == "NVIDIA H200") & (specs.metric == "memory_capacity")]
    if len(h200):
        out.append({"system": "reference: 8x NVIDIA H200", "count": 8, "memory_bytes": float(h200.value.iloc[0]) * ma.GB,
                    "kind": "reference"})
    return out + list(local)


def _layout(fit: pd.DataFrame, system: str, layout: str) -> pd.Series:
    rows = fit[(fit.system == system) & (fit.layout == layout)]
    if len(rows) != 1:
        raise DataError(f"the memory-fit table has {len(rows)} rows of layout {layout!r} on {system!r} "
                        f"(its layouts: {sorted(set(fit.layout))}); expected one")
    return rows.iloc[0]


def memory_facts(m: ma.ModelConfig, fit: pd.DataFrame, system: str, footprint: pd.DataFrame, mem_fraction: float,
                 gpu_memory: float) -> dict:
    """What fits on the recorded GPUs: replication, TP8, TP4 alone, and the KV cache TP8 leaves."""
    repl, tp8 = _layout(fit, system, "replicated (whole model per GPU)"), _layout(fit, system, "TP8")
    return {"kv_tok_KiB": float(ma.kv_bytes_per_token(m).bytes.sum()) / 1024, "mem_frac": mem_fraction,
            "gpu_mem": gpu_memory, "repl_GiB": float(repl.weights_per_gpu_GiB),
            "tp8_GiB": float(tp8.weights_per_gpu_GiB), "tp8_GB": float(tp8.weights_per_gpu_GiB) * ma.GiB / ma.GB,
            "tp8_ref_GB": float(value(footprint, "value_low", metric="weights_per_gpu_tp8")),
            "tp8_kv_tokens": float(tp8.kv_tokens_per_gpu), "tp8_seqs": float(tp8.sequences_at_context),
            "ctx": CONTEXT_TOKENS, "tp4_GiB": ma.weights_per_gpu(m, 4) / ma.GiB}


def here_note(local: list[dict], mode: str) -> str:
    """Whether this machine's GPUs are in the memory-fit table, and why not."""
    if local:
        return f"This machine's GPUs ({local[0]['system']}, measured with NVML) are in the table too."
    if mode == "auto":
        return "This machine has no NVIDIA GPU that NVML can see, so it adds no row."
    return "In recorded mode this machine is not examined."


def message_sizes(m: ma.ModelConfig) -> pd.DataFrame:
    """The TP all-reduce message per decode step for a few batch sizes."""
    out = pd.DataFrame({"tokens": list(MESSAGE_BATCHES), "all_reduce_bytes": ma.allreduce_bytes(m, list(MESSAGE_BATCHES))})
    out["KiB"] = out.all_reduce_bytes / 1024
    return out


def collective_facts(m: ma.ModelConfig, claims: pd.DataFrame) -> dict:
    return {"n_coll": ma.collectives_per_step(m), "n_layers": m.layers,
            "claim_78": str(value(claims, quantity="allreduces_per_decode_step"))}


def _column(wide: pd.DataFrame, prefix: str) -> str:
    cols = [c for c in wide.columns if str(c).startswith(prefix)]
    if len(cols) != 1:
        raise DataError(f"the EP/TP volume table has {len(cols)} layouts starting with {prefix!r} "
                        f"({list(wide.columns)}); expected one")
    return cols[0]


def ep_tp_volumes(m: ma.ModelConfig, gpus: int = 8) -> tuple[pd.DataFrame, pd.DataFrame, str, str]:
    """(long table, wide table with the EP / TP ratio, TP column, EP column) of the bytes one GPU sends
    per MoE layer and decode step, for each batch of VOLUME_BATCHES."""
    vol = pd.concat([ma.ep_vs_tp_volume(m, gpus, b).assign(tokens=b) for b in VOLUME_BATCHES], ignore_index=True)
    wide = vol.pivot(index="tokens", columns="layout", values="bytes_sent_per_gpu")
    tp, ep = _column(wide, "TP"), _column(wide, "EP")
    wide["EP / TP"] = wide[ep] / wide[tp]
    return vol, wide, tp, ep


def ep_facts(m: ma.ModelConfig, vol: pd.DataFrame, wide: pd.DataFrame, fit: pd.DataFrame, system: str,
             gpus: int = 8) -> dict:
    """EP against TP: the remote GPUs a token reaches (derived from the EP bytes: tokens/n x remote x
    hidden x 4 bytes), the byte ratio at the largest batch, the ring's rounds, and what DP attention +
    EP leaves in memory."""
    ep1 = vol[(vol.tokens == 1) & vol.layout.str.startswith("EP")]
    tp1 = vol[(vol.tokens == 1) & vol.layout.str.startswith("TP")]
    if len(ep1) != 1 or len(tp1) != 1:
        raise DataError("the EP/TP volume table needs one TP and one EP row at 1 token")
    dpep = _layout(fit, system, f"DP attention + EP{gpus} experts")
    per_token = m.hidden * (2 + 2)  # dispatch + combine in bf16, ep_vs_tp_volume's defaults
    return {"remote": float(ep1.bytes_sent_per_gpu.iloc[0]) * gpus / per_token, "n_routed": m.n_routed,
            "top_k": m.top_k, "ep_tp_ratio": float(wide["EP / TP"].iloc[-1]), "tp_rounds": int(tp1.rounds.iloc[0]),
            "dpep_GiB": float(dpep.weights_per_gpu_GiB), "dpep_kv": float(dpep.kv_tokens_per_gpu),
            "budget_GiB": float(dpep.budget_GiB)}
