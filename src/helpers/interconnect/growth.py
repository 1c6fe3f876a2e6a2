"""How an all-reduce's cost grows with the number of ranks: fitted to the host-path study's measured world
sizes, and the figure at eight ranks (the original VM's count) where fewer were measured.

    at_world_size(sweep, 8)    # measured at 8 ranks, or derived (extrapolated) from 2 and 4 where 8 was not
    extrapolate(sweep, 8)      # derived from the measured world sizes only, with each growth model's figure

`sweep` is the host-path study's table (helpers.interconnect.hostpath.run_study's "sweep").
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd


class GrowthError(ValueError):
    """Too few measured world sizes to say how an all-reduce's cost grows with the number of ranks."""


def ranks_text(ns) -> str:
    """[2, 4] -> '2 and 4 ranks'."""
    ns = list(ns)
    return ", ".join(map(str, ns[:-1])) + (" and " if len(ns) > 1 else "") + f"{ns[-1]} ranks"


#: How an all-reduce's time is assumed to grow with the number of ranks N: time = a + b x g(N), fitted per
#: arm and size to the measured world sizes (N >= 2). name -> (g, the assumption in words).
GROWTH_MODELS: dict[str, tuple[Callable[[float], float], str]] = {
    "ring_steps": (lambda n: 2.0 * (n - 1),
                   "the time grows linearly with the ring's 2(N-1) steps, each one more pass through the "
                   "transport (the latency-bound case)"),
    "log2": (lambda n: math.log2(n), "each doubling of the ranks adds what the last doubling added"),
    "ring_bytes": (lambda n: 2.0 * (n - 1) / n,
                   "the time grows with the bytes each rank moves, 2(N-1)/N of the message (the "
                   "bandwidth-bound ring)"),
}
GROWTH_MODEL = "ring_steps"
GROWTH_COLUMNS = ["arm", "arm_settings", "method", "size_bytes", "world_size", "time_us", "time_us_low",
                  "time_us_high", "from_world_sizes", "model", "assumption", "kind"]


def extrapolate(sweep: pd.DataFrame, target: int = 8, model: str = GROWTH_MODEL) -> pd.DataFrame:
    """Per arm and size, the all-reduce time at `target` ranks fitted to the measured world sizes (2 or
    more ranks; least squares of time = a + b x g(N), exact through two points), labelled derived with
    its assumption; time_us_low/high: the lowest and highest of the GROWTH_MODELS' figures. GrowthError
    where an arm and size has fewer than two measured world sizes."""
    if model not in GROWTH_MODELS:
        raise GrowthError(f"growth model {model!r} is unknown; choose one of {list(GROWTH_MODELS)}")
    if sweep is None or not len(sweep):
        raise GrowthError("no measured all-reduce rows to extrapolate from")
    s = sweep[(sweep.op == "all_reduce") & (sweep.world_size >= 2)]
    rows = []
    for (arm, method, size), g in s.groupby(["arm", "method", "size_bytes"], sort=False):
        g = g.groupby("world_size", as_index=False).time_us.median()
        ns = sorted(int(n) for n in g.world_size)
        if len(ns) < 2:
            raise GrowthError(f"arm {arm!r} at {int(size)} B was measured at {ns or 'no'} world size(s) of 2 ranks "
                              f"or more; extrapolating to {target} ranks needs two (e.g. 2 and 4)")
        figs = {}
        for name, (fn, _) in GROWTH_MODELS.items():
            x = np.array([fn(n) for n in g.world_size], dtype=float)
            b, a = np.polyfit(x, g.time_us.to_numpy(dtype=float), 1)
            figs[name] = float(a + b * fn(target))
        fn, why = GROWTH_MODELS[model]
        first = sweep[(sweep.arm == arm) & (sweep.method == method)].iloc[0]
        rows.append({"arm": arm, "arm_settings": first.get("arm_settings", ""), "method": method,
                     "size_bytes": int(size), "world_size": target, "time_us": figs[model],
                     "time_us_low": min(figs.values()), "time_us_high": max(figs.values()),
                     "from_world_sizes": ",".join(map(str, ns)), "model": model, "assumption": why,
                     "kind": f"derived: extrapolated to {target} ranks from the measured {ranks_text(ns)} "
                             f"(time = a + b x g(N), g for {model}: {why})"})
    return pd.DataFrame(rows, columns=GROWTH_COLUMNS)


def at_world_size(sweep: pd.DataFrame, target: int = 8, model: str = GROWTH_MODEL) -> pd.DataFrame:
    """The all-reduce time per arm and size at `target` ranks: measured where the study ran that many
    (kind 'measured'; time_us_low/high: the point's p10 and p90 over repeats), else extrapolated from the
    world sizes it did run (extrapolate; derived; low/high: the growth models' range). Only arms that were
    not measured at `target` are extrapolated."""
    s = sweep[sweep.op == "all_reduce"]
    meas = s[s.world_size == target]
    rows = [{"arm": r.arm, "arm_settings": r.arm_settings, "method": r.method, "size_bytes": int(r.size_bytes),
             "world_size": target, "time_us": r.time_us, "time_us_low": r.time_us_p10,
             "time_us_high": r.time_us_p90, "from_world_sizes": str(target), "model": "", "assumption": "",
             "kind": r.kind} for r in meas.itertuples()]
    out = pd.DataFrame(rows, columns=GROWTH_COLUMNS)
    rest = s[~s.arm.isin(set(meas.arm))]
    if len(rest):
        out = pd.concat([out, extrapolate(rest, target, model)], ignore_index=True)
    return out
