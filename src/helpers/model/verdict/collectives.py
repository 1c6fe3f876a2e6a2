"""Bare-metal collectives for the predictor, from measured curves.

Two curves per all-reduce size where both exist:

* **aiconfigurator's NCCL table** of the system (reference: measured on its collection host with NCCL's
  defaults), made monotone. The RTX PRO 6000 table is not: 156.1 us at 512 KiB, 131.5 us at 1 MiB, where NCCL
  switches protocol. Between grid points the table is read linearly (as aiconfigurator's engine reads it:
  143.8 us at 768 KiB); the protocol switch is carried as a range around that reading: from the fastest time
  any larger message took (the protocol NCCL uses above the switch, already chosen) to the slowest any smaller
  message took (the protocol below it, kept). Where the table is monotone, low = mid = high.
* **The community's tuned curve** (data/reference/nccl_community.csv; RTX PRO 6000, 8 GPUs): nccl-tests with the
  NCCL settings the bare-metal reference's page requires (graph XML, 8 channels, P2P level SYS) up to 256 KiB,
  and above that the same community's 8-GPU baseline from its tuner-plugin page (a second run, derived from its
  bus bandwidth). Read linearly between its points after a running maximum (monotone); below its smallest size
  it is held flat (assumed), above its largest it does not exist.

A draw places the all-reduce `u` of the way from the community curve (0) to the table (1) and the table at its
protocol quantile `q` (0: low, 0.5: the linear reading, 1: high). SGLang's custom all-reduce, where a table has
it for the system and the setting is on, is taken from its own table (no range).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from helpers.core import recorded
from helpers.model import kernels as kt

TP = 8


@lru_cache(maxsize=None)
def community() -> pd.DataFrame:
    """The community's measured all-reduce curve used for pricing: the tuned points, then the tuner page's
    baseline above the largest tuned size (data/reference/nccl_community.csv)."""
    c = recorded.load("reference/nccl_community.csv")
    tuned = c[c["curve"] == "tuned"]
    above = c[(c["curve"] == "tuner page baseline") & (c["message_bytes"] > tuned["message_bytes"].max())]
    out = pd.concat([tuned, above]).sort_values("message_bytes")
    out = out.assign(monotone_us=np.maximum.accumulate(out["latency_us"].astype(float).to_numpy()))
    return out.reset_index(drop=True)


def has_community(system: str, gpus: int = TP) -> bool:
    c = community()
    return bool(((c["system"] == system) & (c["gpus"] == gpus)).any())


def community_us(system: str, kind: str, size: float, gpus: int = TP) -> float | None:
    """The community curve at `size` bytes (None where it has no curve for this system, op and size)."""
    if kind != "all_reduce":
        return None
    c = community()
    c = c[(c["system"] == system) & (c["gpus"] == gpus) & (c["op"] == kind)]
    if not len(c):
        return None
    x = c["message_bytes"].astype(float).to_numpy()
    y = c["monotone_us"].to_numpy()
    if size > x[-1]:
        return None
    return float(np.interp(float(size), x, y))      # flat below the smallest size (np.interp holds the end)


@lru_cache(maxsize=4096)
def envelope(system: str, kind: str, size: float, gpus: int = TP, library: str = "nccl") -> tuple[float, float, float]:
    """(low, mid, high) of the table at `size` bytes: the linear reading and the protocol-switch range around it
    (see the module docstring)."""
    mid = kt.comm_us(system, kind, gpus, size, library)
    d = kt.table("comm")
    d = d[d["library"].str.startswith(library) & (d["system"] == system) & (d["op"] == kind) & (d["num_gpus"] == gpus)]
    if "kernel_source" in d and d["kernel_source"].nunique() > 1:
        graph = d[~d["kernel_source"].astype(str).str.endswith("_eager")]
        d = graph if len(graph) else d
    x = d["message_bytes"].astype(float).to_numpy()
    y = d["latency_us"].astype(float).to_numpy()
    below, above = y[x <= size + 1e-9], y[x >= size - 1e-9]
    high = max(mid, float(below.max())) if len(below) else mid
    low = min(mid, float(above.min())) if len(above) else mid
    return low, mid, high


@lru_cache(maxsize=4096)
def curve_points(system: str, kind: str, size: float) -> tuple:
    """(table low, table high, community us or None, custom all-reduce us or None) for one collective."""
    low, _, high = envelope(system, kind, size)
    custom = None
    if kind == "all_reduce":
        try:
            custom = kt.comm_us(system, kind, TP, size, library="sglang")
        except kt.KernelTableError:
            custom = None
    return low, high, community_us(system, kind, size), custom


def table_us(mid: float, low: float, high: float, q) -> np.ndarray:
    """The table at protocol quantile q: the linear reading at 0.5, its low at 0 and its high at 1."""
    q = np.asarray(q, dtype=float)
    return np.where(q >= 0.5, mid + (q - 0.5) * 2 * (high - mid), mid - (0.5 - q) * 2 * (mid - low))


def collectives_us(p, system: str, u, q, custom: bool = False, factor=1.0) -> np.ndarray:
    """The step's collectives per draw (us): each `u` of the way from the community curve to the table at
    protocol quantile `q`; SGLang's custom all-reduce where `custom` and a table has it; times `factor` (the
    collective range as first registered: a factor on the table)."""
    total = 0.0
    for (_, kind, n, size, mid), (low, high, comm, cust) in zip(p.collectives, p.curves):
        if custom and cust is not None:
            t = np.full_like(np.asarray(q, dtype=float), cust)
        else:
            t = table_us(mid, low, high, q)
            if comm is not None:
                t = comm + np.asarray(u, dtype=float) * (t - comm)
        total = total + n * t * factor
    return total


def EAGER_FLOOR_US() -> float:  # noqa: N802 - read from data, a constant for its callers
    """The assumed CPU cost of one eager kernel launch (data/reference/budget_assumptions.csv)."""
    a = recorded.load("reference/budget_assumptions.csv")
    return float(a.loc[a["item"] == "kernel_floor_eager", "value"].iloc[0])
