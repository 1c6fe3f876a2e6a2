"""How sure the load study can be of its capacity, and whether the server changed while it ran.

    capacity_of(loads, shares, good_share)              the highest load that held below the first that did not
    capacity_interval(points, good_share)               a bootstrap of the points' requests: (low, high) at 90 %
    drift(first, again)                                 the study's first point measured again at its end

The bootstrap draws each point's requests again with replacement (`draws` times, seeded), recomputes every
point's share inside the SLOs and the capacity those shares give; the interval is the 5th to the 95th
percentile of those capacities. It measures the sampling noise of a few requests a point, not a server that
changed between points (the drift check's job) nor a second launch of the server.

The drift rule: the repeated point's median TTFT or TPOT is flagged when it differs from the first measurement's
by more than DRIFT_MIN (10 %, assumed) and lies outside the first measurement's 90 % bootstrap interval of
that median.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: the bootstrap's draws, its seed and its interval
DRAWS, SEED, LEVEL = 1000, 0, 0.9
#: a change smaller than this is never flagged as drift (assumed: 10 %)
DRIFT_MIN = 0.10


def capacity_of(loads: Sequence[float], shares: Sequence[float], good_share: float) -> float:
    """The highest load that held (share >= good_share) below the lowest load that did not; NaN where the
    lowest load already failed."""
    order = np.argsort(loads)
    best = math.nan
    for i in order:
        if not shares[i] >= good_share:
            break
        best = float(loads[i])
    return best


def capacity_interval(points: Sequence[tuple[float, Sequence[bool]]], good_share: float, draws: int = DRAWS,
                      seed: int = SEED, level: float = LEVEL) -> tuple[float, float]:
    """(low, high): the `level` interval of the capacity over bootstrap draws of each point's requests
    (`points`: (load, whether each measured request met the SLOs)). NaN where a draw has no capacity counts as
    below every load: the interval's low end is then NaN ("none")."""
    pts = [(float(x), np.asarray(m, dtype=float)) for x, m in points if len(m)]
    if not pts:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    loads = [x for x, _ in pts]
    caps = np.empty(draws)
    for b in range(draws):
        shares = [m[rng.integers(0, len(m), len(m))].mean() for _, m in pts]
        c = capacity_of(loads, shares, good_share)
        caps[b] = -math.inf if math.isnan(c) else c
    lo, hi = np.percentile(caps, [50 * (1 - level), 100 - 50 * (1 - level)], method="lower")
    return (math.nan if lo == -math.inf else float(lo)), (math.nan if hi == -math.inf else float(hi))


def median_interval(values: Sequence[float], draws: int = DRAWS, seed: int = SEED,
                    level: float = LEVEL) -> tuple[float, float]:
    """The `level` bootstrap interval of the median of `values` (NaN for none)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if not len(v):
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    meds = np.median(v[rng.integers(0, len(v), (draws, len(v)))], axis=1)
    return tuple(float(x) for x in np.percentile(meds, [50 * (1 - level), 100 - 50 * (1 - level)]))


@dataclass(frozen=True)
class DriftCheck:
    """The study's first point measured again at its end (measured) and the rule's verdict (derived)."""
    key: str
    metric: str               # the metric that moved most: ttft or tpot
    first_ms: float
    again_ms: float
    change_pct: float
    interval_ms: tuple         # the first measurement's 90 % bootstrap interval of that median
    flagged: bool


def _values(records: Sequence[dict], name: str) -> list[float]:
    return [r[name] for r in records if r.get("ok") and not r.get("ramp") and r.get(name) is not None]


def drift(key: str, first: Sequence[dict], again: Sequence[dict]) -> DriftCheck | None:
    """The drift rule (module docstring) on two measurements of one point (their request records); None where
    either has no completed request."""
    out = []
    for name in ("ttft", "tpot"):
        a, b = _values(first, f"{name}_s"), _values(again, f"{name}_s")
        if not a or not b:
            continue
        m1, m2 = float(np.median(a)), float(np.median(b))
        lo, hi = median_interval(a)
        change = (m2 - m1) / m1 if m1 > 0 else math.inf
        flagged = abs(change) > DRIFT_MIN and not (lo <= m2 <= hi)
        out.append(DriftCheck(key, name, m1 * 1e3, m2 * 1e3, 100 * change, (lo * 1e3, hi * 1e3), flagged))
    if not out:
        return None
    return max(out, key=lambda d: (d.flagged, abs(d.change_pct)))
