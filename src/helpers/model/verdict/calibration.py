"""The predictor held against observations it was not built beside: each held-out observation
(data/reference/holdouts.csv) against the band registered for it before any comparison
(data/reference/holdout_bands.csv, benchmarks/register_holdouts.py), and the calibration over all of them.

An observation's percentile is read from the registered draws' quantiles (every 5 %, linear between them;
0 below the lowest draw's 0 % quantile, 100 above the highest): the predictor is not run again, so a later change
to it cannot move a registered band. `rel_err` is (point - observed) / observed in the holdout's own unit.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.core import recorded
from helpers.model.verdict.ranges import BAND, VerdictInputError


def percentile_in(quantiles: str, observed: float) -> float:
    """The registered distribution's percentile of `observed` (quantiles: ';'-joined values at 0, 5, ..., 100 %)."""
    q = np.array([float(v) for v in str(quantiles).split(";")])
    if len(q) != 21:
        raise VerdictInputError(f"a registered band has {len(q)} quantiles; expected 21 (0, 5, ..., 100 %)")
    if observed <= q[0]:
        return 0.0
    if observed >= q[-1]:
        return 100.0
    return float(np.interp(observed, q, np.arange(0, 101, 5)))


def holdout_table() -> pd.DataFrame:
    """Every held-out observation beside its registered band: observed, point, band, error, percentile, inside."""
    h = recorded.load("reference/holdouts.csv")
    b = recorded.load("reference/holdout_bands.csv")
    missing = sorted(set(h["key"]) - set(b["key"]))
    if missing:
        raise VerdictInputError(f"held-out observations without a registered band: {missing}; run "
                                f"benchmarks/register_holdouts.py and commit its output before comparing")
    t = h.merge(b[["key", "per", "point", "band_low", "band_high", "quantiles", "registered"]], on="key")
    t["observed"] = t["observed"].astype(float)
    t["rel_err"] = (t["point"].astype(float) - t["observed"]) / t["observed"]
    t["percentile"] = [percentile_in(q, o) for q, o in zip(t["quantiles"], t["observed"])]
    t["inside"] = (t["band_low"].astype(float) <= t["observed"]) & (t["observed"] <= t["band_high"].astype(float))
    return t.drop(columns=["quantiles"])


def calibration(t: pd.DataFrame | None = None) -> dict:
    """The calibration over the held-out observations: how many, on how many machine kinds, the share inside their
    5-95 % bands, the median and worst absolute error (and which observation), how many fell below and above."""
    t = holdout_table() if t is None else t
    err = t["rel_err"].abs()
    worst = t.loc[err.idxmax()]
    return {"n": int(len(t)), "n_systems": int(t["system"].nunique()), "n_inside": int(t["inside"].sum()),
            "share_inside": float(t["inside"].mean()), "median_abs_err": float(err.median()),
            "worst_abs_err": float(err.max()), "worst_key": str(worst["key"]), "worst_system": str(worst["system"]),
            "n_below": int((t["percentile"] < BAND[0]).sum()), "n_above": int((t["percentile"] > BAND[1]).sum()),
            "median_percentile": float(t["percentile"].median())}


def by_system(t: pd.DataFrame | None = None) -> pd.DataFrame:
    """The calibration per machine kind."""
    t = holdout_table() if t is None else t
    rows = []
    for s, g in t.groupby("system", sort=False):
        c = calibration(g)
        rows.append({"system": s, **{k: c[k] for k in ("n", "n_inside", "median_abs_err", "worst_abs_err",
                                                       "median_percentile")}})
    return pd.DataFrame(rows)
