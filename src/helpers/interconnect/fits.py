"""The alpha-beta (latency-bandwidth) model of a transfer: time(size) = alpha + size / beta.

`fit` estimates alpha (us) and beta (GB/s, 10^9 B/s) from a size sweep by least squares on relative
error (each point weighted by 1/time, so a 10 us point counts as much as a 10 ms one), with both
parameters kept physical (alpha >= 0, beta > 0). The fit reports its own error so a reader can see
where the straight-line model stops describing the path.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Fit:
    alpha_us: float          # latency floor, microseconds
    beta_GBps: float         # asymptotic bandwidth, 10^9 bytes per second (inf: no size term)
    n_points: int
    min_bytes: float
    max_bytes: float
    median_rel_err: float    # |model - measured| / measured over the points
    max_rel_err: float

    def time_us(self, size_bytes) -> np.ndarray | float:
        """Predicted time in microseconds for a message of `size_bytes`."""
        s = np.asarray(size_bytes, dtype=float)
        inv = 0.0 if math.isinf(self.beta_GBps) else 1.0 / (self.beta_GBps * 1e3)  # us per byte
        out = self.alpha_us + s * inv
        return float(out) if out.ndim == 0 else out

    def as_dict(self) -> dict:
        return asdict(self)


def fit(sizes_bytes: Sequence[float], times_us: Sequence[float]) -> Fit:
    """Fit time = alpha + size/beta to measured (size in bytes, time in us) points."""
    s = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_us, dtype=float)
    if s.shape != t.shape or s.ndim != 1:
        raise ValueError(f"sizes and times must be 1-D and the same length (got {s.shape} and {t.shape})")
    if len(s) < 2:
        raise ValueError(f"an alpha-beta fit needs at least 2 points, got {len(s)}")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(t))):
        raise ValueError("sizes and times must be finite numbers")
    if np.any(s <= 0) or np.any(t <= 0):
        raise ValueError("sizes and times must be positive")
    if len(np.unique(s)) < 2:
        raise ValueError("an alpha-beta fit needs at least two distinct sizes")
    w = 1.0 / t
    A = np.column_stack([np.ones_like(s), s]) * w[:, None]
    b = t * w
    (alpha, inv_beta), *_ = np.linalg.lstsq(A, b, rcond=None)
    if alpha < 0:  # pure bandwidth: fit size term alone
        alpha = 0.0
        inv_beta = float(np.sum(w * w * s * t) / np.sum(w * w * s * s))
    if inv_beta <= 0:  # pure latency: weighted mean time
        inv_beta = 0.0
        alpha = float(np.sum(w * w * t) / np.sum(w * w))
    beta = math.inf if inv_beta == 0 else 1.0 / (inv_beta * 1e3)  # bytes/us -> GB/s
    f = Fit(float(alpha), float(beta), len(s), float(s.min()), float(s.max()), 0.0, 0.0)
    rel = np.abs(f.time_us(s) - t) / t
    return Fit(f.alpha_us, f.beta_GBps, f.n_points, f.min_bytes, f.max_bytes,
               float(np.median(rel)), float(np.max(rel)))


def bandwidth_GBps(size_bytes, time_us):
    """Achieved bandwidth in GB/s (10^9 B/s) of moving `size_bytes` in `time_us`."""
    return np.asarray(size_bytes, dtype=float) / (np.asarray(time_us, dtype=float) * 1e3)
