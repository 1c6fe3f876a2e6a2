"""A synthetic FUSED decode-step study at GLM-5's real TP8 shapes, for tests that cannot run a GPU.

The GPU target runs chapter 07_decode_step with the fused step (the default) and the diagnosis then reads that
run's tables, whose op rows carry the fused path's names. This builds such tables from a committed
(unfused) H200 study: every op the fused step does not run is dropped, and each op only the fused step runs
is given the summed time and kernels of the unfused ops it replaces (FUSED_FROM). The names come from a
real fused DecodeStep (the scaled-down model has the same op list), so a renamed op fails here instead of on
the GPU. The times are therefore not a measurement of the fused step: the tables exercise the code that
reads them, nothing else.
"""
from __future__ import annotations

import json
from functools import lru_cache

import pandas as pd

from helpers.core import layout, recorded
from helpers.model import arith as ma
from helpers.model import measured as mb
from helpers.model import step

#: op only the fused step runs -> the unfused ops whose work it does (their times and kernels summed)
FUSED_FROM = {"indexer k_norm + rope": ("indexer wk + k_norm", "indexer rope"),
              "index scores + top-k": ("index scores", "top-k")}


@lru_cache(maxsize=None)
def fused_op_names(precision: str) -> tuple[str, ...]:
    """The op names of a real fused step in `precision` ("bf16" or "fp8"), scaled-down model."""
    mini = ma.load_model("glm5-mini")
    rm = step.build_full(mini, 2, 32, "fp32")
    if precision != "fp32":
        rm = step.convert_model(rm, precision)
    return tuple(step.DecodeStep(rm, 2, 32, fusion="fused").op_names())


def fuse_timings(t: pd.DataFrame, precision: str) -> pd.DataFrame:
    """The timing rows of an unfused study as the fused step's names would have them (see the module)."""
    names = set(fused_op_names(precision))
    have = {w[3:] for w in t["what"].astype(str) if w.startswith("op:")}
    missing = names - have - set(FUSED_FROM)
    if missing:
        raise AssertionError(f"fused ops {sorted(missing)} have no unfused stand-in: extend FUSED_FROM")
    keep = t[~t["what"].astype(str).str.startswith("op:") | t["what"].astype(str).str[3:].isin(names)]
    new = []
    ops = t[t["what"].astype(str).str.startswith("op:")]
    keys = [c for c in ("dtype", "overlap", "attention", "batch", "context", "mode") if c in t.columns]
    for _, g in ops.groupby(keys):
        for fused, parts in FUSED_FROM.items():
            src = g[g["what"].isin([f"op:{p}" for p in parts])]
            if len(src) != len(parts):
                continue
            r = src.iloc[0].copy()
            r["what"] = f"op:{fused}"
            for c in ("median_us", "p10_us", "p90_us", "kernels"):
                r[c] = src[c].sum()
            new.append(r)
    out = pd.concat([keep, pd.DataFrame(new)], ignore_index=True)
    out["fusion"] = "fused"
    out["source"] = "synthetic fused study (tests/fused_study.py)"
    return out


def step_tables(role: str = mb.STEP_ROLE) -> dict:
    """timings, bytes and meta of the committed bf16 study of `role`, as a fused sweep would write them."""
    s = recorded.study(role)
    rel = f"measured/{s.id}"
    meta = json.loads((recorded.data_dir() / rel / "meta.json").read_text())
    meta.update({"fusion": "fused", "compiled": True})
    t = recorded.load(f"{rel}/timings.csv")
    return {"timings": fuse_timings(t, str(t["dtype"].iloc[0])), "bytes": recorded.load(f"{rel}/bytes.csv"),
            "meta": meta}


def precision_tables() -> dict:
    """The committed bf16/FP8 study (shared expert overlapped and not), as fused sweeps would write it."""
    s = recorded.measured_studies(mb.PRECISION_ROLE)[0]
    rel = f"measured/{s.id}"
    t = recorded.load(f"{rel}/timings.csv")
    t = pd.concat([fuse_timings(t[t["dtype"] == d], d) for d in sorted(t["dtype"].unique())], ignore_index=True)
    meta = json.loads((recorded.data_dir() / rel / "meta.json").read_text())
    return {"timings": t, "bytes": recorded.load(f"{rel}/bytes.csv"), "meta": meta}


def write_run(run_dir, precision: bool = True) -> None:
    """A run folder whose 07_decode_step results are the synthetic fused study (as the GPU run writes them)."""
    tabs = step_tables()
    for key, name in (("timings", "step_times"), ("bytes", "step_bytes"), ("meta", "step_meta")):
        layout.save(run_dir, mb.STEP_CHAPTER, name, tabs[key])
    if precision:
        p = precision_tables()
        for key, name in (("timings", "precision_times"), ("bytes", "precision_bytes"), ("meta", "precision_meta")):
            layout.save(run_dir, mb.STEP_CHAPTER, name, p[key])
