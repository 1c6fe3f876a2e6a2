"""The expert-parallelism chapter's computation: the machines of the memory-fit table, the hidden size the
recorded copies imply, the TP all-reduce message per decode step, and what TP and EP move per MoE layer and
decode step.

Everything is computed with `helpers.model.arith` from the model configuration and the rows of `data/`;
the figures the chapter's prose cites, its sentences and the claims table it shows are
helpers.chapters.expert_parallelism's.
"""
from __future__ import annotations

import pandas as pd

from helpers.core.recorded import DataError
from helpers.model import arith as ma

#: context length of one sequence in the KV-cache count (assumed)
CONTEXT_TOKENS = 4096
#: tokens in the decode batch for the message sizes and the EP/TP volumes
MESSAGE_BATCHES = (1, 4, 16, 64, 256)
VOLUME_BATCHES = (1, 2, 4, 8, 16, 32, 64)


def one_token_copy_us(copies: pd.DataFrame) -> float:
    """The original VM's one-token GPU-to-GPU copy (`copies`: data/recorded/copy_sweep.csv), in µs: what the seeds
    say every all-reduce pays, as the expert-parallelism chapter and the diagnosis both price it (one value)."""
    one = copies[copies.tokens == 1]
    if len(one) != 1:
        raise DataError(f"data/recorded/copy_sweep.csv has {len(one)} one-token rows; expected one")
    return float(one.latency_us.iloc[0])


def seed_floor_ms(m: ma.ModelConfig, copies: pd.DataFrame) -> float:
    """The seeds' claim in one number: every all-reduce of a decode step paying the recorded one-token copy once
    (derived: all-reduces per step x one_token_copy_us), in ms."""
    return ma.collectives_per_step(m, "all_reduce") * one_token_copy_us(copies) / 1000


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


def systems(hw: dict, specs: pd.DataFrame, local: list[dict]) -> list[dict]:
    """The machines of the memory-fit table: the recorded one, eight H200s (reference, where the specs
    have them) and this machine's GPUs (`local`, from ma.local_gpus(); may be empty)."""
    n, model = int(hw["gpu_count"].value), hw["gpu_model"].value
    # each row says how its capacity was read (site-read5 N8): the recorded "96 GB" as GiB (the budget the recorded
    # deployment was priced with), the H200 datasheet's GB as 10^9 bytes
    mem = float(hw["gpu_memory"].value)
    out = [{"system": f"recorded: {n}x {model} ({mem:g} GB read as GiB)", "count": n, "memory_bytes": mem * ma.GiB,
            "kind": "recorded"}]
    h200 = specs[(specs.system == "NVIDIA H200") & (specs.metric == "memory_capacity")]
    if len(h200):
        cap = float(h200.value.iloc[0])
        out.append({"system": f"reference: 8x NVIDIA H200 ({cap:g} GB read as GB, 10^9 B)", "count": 8,
                    "memory_bytes": cap * ma.GB, "kind": "reference"})
    return out + list(local)


def message_sizes(m: ma.ModelConfig) -> pd.DataFrame:
    """The TP all-reduce message per decode step for a few batch sizes."""
    out = pd.DataFrame({"tokens": list(MESSAGE_BATCHES), "all_reduce_bytes": ma.allreduce_bytes(m, list(MESSAGE_BATCHES))})
    out["KiB"] = out.all_reduce_bytes / 1024
    return out


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
