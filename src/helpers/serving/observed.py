"""What a serving chapter's live sweep served, and how fast, as one record another chapter can read: the
server (launched by the book or given by the reader), its engine, the model it served, the tensor-parallel
size asked, and output tokens/s at one stream and at the highest concurrency measured (with the concurrency
achieved there). helpers.core.layout declares it as chapter 03's `served` result; the machine verdict
(chapter 08) compares it with GLM-5's prediction for the machine where it is an observation of a real model
(`is_model`: a server the reader gave, or SGLang launched on a checkpoint), never a tiny stand-in's.
"""
from __future__ import annotations

import pandas as pd


def served(sweep: pd.DataFrame | None, *, server_url: str, served_model: str, engine: str, tp_size: int,
           model_path: str = "") -> dict | None:
    """The record, or None where there was no live sweep. The first variant and workload of the sweep are
    the baseline its speeds are read from."""
    if sweep is None or not len(sweep):
        return None
    ok = sweep[(sweep["completed"] > 0)]
    if not len(ok):
        return None
    first = ok[(ok["variant"] == ok["variant"].iloc[0]) & (ok["workload"] == ok["workload"].iloc[0])]
    one = first[first["concurrency"] == 1]
    top = first.loc[first["concurrency"].idxmax()]
    given = bool(server_url)
    return {"server": "given" if given else "launched", "engine": "external" if given else engine,
            "served_model": served_model or ("the server's first model" if given else engine),
            "tp_size": int(tp_size) if (given or engine == "sglang") else None,
            "is_model": given or (engine == "sglang" and bool(model_path)),
            "variant": str(top["variant"]), "workload": str(top["workload"]),
            "single_stream_tok_s": float(one["output_throughput"].iloc[0]) if len(one) else None,
            "max_concurrency": int(top["concurrency"]), "max_tok_s": float(top["output_throughput"]),
            "achieved_concurrency": (float(top["achieved_concurrency"])
                                     if pd.notna(top.get("achieved_concurrency")) else None)}
