"""What the decode-step chapter reads off a step measurement (helpers.model.measured.StepMeasurement):
the step against batch, its split by component with achieved bandwidth, graphs against eager, and what
each tuning the investigation tried could at most have changed. Every pick raises MeasuredBudgetError
naming the row it could not find."""
from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.model import measured as mb

SPLIT = ("attention", "indexer", "moe", "shared/dense MLP", "norms and small ops", "lm_head")


def steps(meas: mb.StepMeasurement, attention: str = "dense") -> pd.DataFrame:
    """Whole-step rows: batch, context, mode, median/p10/p90 (ms), tokens/s (aggregate and per stream)."""
    t = meas.timings
    s = t[(t["what"] == "step") & (t["attention"] == attention)].copy()
    if not len(s):
        raise mb.MeasuredBudgetError(f"{meas.where}: no whole-step rows (what = 'step', attention {attention})")
    out = pd.DataFrame({"batch": s["batch"].astype(int), "context": s["context"].astype(int), "mode": s["mode"],
                        "step_ms": s["median_us"] / 1e3, "p10_ms": s["p10_us"] / 1e3, "p90_ms": s["p90_us"] / 1e3,
                        "kernels": s["kernels"]})
    out["tok_s"] = out["batch"] * 1e3 / out["step_ms"]
    out["tok_s_per_stream"] = 1e3 / out["step_ms"]
    return out.sort_values(["context", "mode", "batch"]).reset_index(drop=True)


def step_ms(meas: mb.StepMeasurement, batch: int, context: int, mode: str = "graph") -> float:
    return float(meas.row(batch, context, "step", mode)["median_us"]) / 1e3


def split(meas: mb.StepMeasurement, batch: int, context: int, peak_GBps: float | None = None) -> pd.DataFrame:
    """Each component alone (graphs): time, share of the sum of components, kernels, launch floor
    (kernels x the floor, measured), bytes read (emulated precision, derived), achieved GB/s and the share
    of `peak_GBps` that is."""
    floor = meas.floor_us()
    rows = []
    for c in SPLIT:
        r = meas.row(batch, context, c)
        by = meas.component_bytes(batch, context, c)
        us = float(r["median_us"])
        k = float(r["kernels"]) if pd.notna(r["kernels"]) else np.nan
        rows.append({"component": c, "time_us": us, "kernels": k, "launch_floor_us": k * floor,
                     "bytes_read_MiB": float(by["bytes_emulated"]) / 2**20,
                     "bytes_checkpoint_MiB": float(by["bytes_checkpoint"]) / 2**20,
                     "achieved_GBps": float(by["bytes_emulated"]) / us / 1e3})
    df = pd.DataFrame(rows)
    df["share"] = df["time_us"] / df["time_us"].sum()
    if peak_GBps:
        df["share_of_peak"] = df["achieved_GBps"] / peak_GBps
    return df


def graphs_vs_eager(meas: mb.StepMeasurement, context: int) -> pd.DataFrame:
    s = steps(meas)
    s = s[s["context"] == context]
    g = s[s["mode"] == "graph"].set_index("batch")["step_ms"]
    e = s[s["mode"] == "eager"].set_index("batch")["step_ms"]
    if not len(g) or not len(e):
        raise mb.MeasuredBudgetError(f"{meas.where}: needs both graph and eager steps at context {context}")
    out = pd.DataFrame({"graph_ms": g, "eager_ms": e}).dropna().reset_index()
    out["launch_gap_ms"] = out["eager_ms"] - out["graph_ms"]
    out["gap_share_of_eager"] = out["launch_gap_ms"] / out["eager_ms"]
    return out


def tuning_bounds(meas: mb.StepMeasurement, moe_ms: float, kernels_per_step: int, observed_step_ms: float
                  ) -> pd.DataFrame:
    """The most each tuning the investigation tried could have sped up a step of `observed_step_ms` (the
    recorded VM's), derived: the MoE runner acts on the MoE block only (`moe_ms`, its time on the
    recorded GPU); CUDA graphs on launch costs only (`kernels_per_step` x the eager-minus-graph cost per
    kernel measured here); the memory fraction on none of a step's work (it sizes the KV cache)."""
    if observed_step_ms <= 0:
        raise mb.MeasuredBudgetError(f"observed step {observed_step_ms} ms: expected a positive time")
    eager = meas.meta.get("eager_us_per_kernel")
    if not eager:
        raise mb.MeasuredBudgetError(f"{meas.where}: no eager launch cost (meta eager_us_per_kernel)")
    launch_ms = kernels_per_step * (float(eager) - meas.floor_us()) / 1e3
    rows = [
        {"tuning": "MoE runner", "acts_on": "the MoE block", "removable_ms": moe_ms,
         "basis": "the MoE block's time on the recorded GPU (measured kernels)"},
        {"tuning": "CUDA graphs", "acts_on": "kernel launch costs", "removable_ms": launch_ms,
         "basis": "kernels per step x (eager - graph) cost per kernel measured here"},
        {"tuning": "--mem-fraction-static", "acts_on": "KV-cache capacity, not a step's work", "removable_ms": 0.0,
         "basis": "no term of the step depends on it"},
    ]
    df = pd.DataFrame(rows)
    left = (observed_step_ms - df["removable_ms"]).clip(lower=1e-9)
    df["max_speedup"] = observed_step_ms / left
    df["share_of_observed_step"] = df["removable_ms"] / observed_step_ms
    return df
