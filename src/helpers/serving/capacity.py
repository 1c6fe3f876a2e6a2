"""Capacity at a service level: the highest load (concurrency or request rate) at which a stated share of
requests meets the SLO, found by a ramp (doubling) then bisection, with the points it rests on.

    search(measure, start, good_share, limit, integer=True, points_file=None, time_limit_s=..., known=())

`measure(x)` runs one point at load x and returns its row (with `good_share`, from openloop.run_spec).
Each measured point is appended to `points_file` (JSON lines) as it ends; a rerun reads them back and does
not measure those loads again (resumable like the other sweeps). The search stops at the time limit and
says so (complete False). A point that raises ends as failed (good_share 0) and keeps the rows measured.
`known` rows (each with `load` and `good_share`, e.g. the rate sweep's open points at the same SLO and
request count) count as measured points: the ramp does not measure a load at or above a known failed one (it
takes that one as its first failure, the monotonicity bisection assumes anyway), so a search seeded by a sweep
only bisects between the sweep's last pass and first failure. Those rows say `from_known: True`. Where the
first point fails and a pass is known below it, the search bisects up from that pass.
A point cut short by its time limit (its row says `cut_short`: some of its requests never ran) is no
evidence either way: it is listed in `not_run`, not kept as a point nor written to `points_file` (a rerun
measures it), and the search ends there incomplete. `measure` is expected to give a point no more than the time
the search has left (see loadstudy), so the search ends at most one request time limit after its own.
`held_above_failure` lists the loads that held above the first failure: the points are not monotonic (on a
shared machine, its load changed between points), and the capacity, the highest pass below the first failure
(none where the first point failed and no pass is known below it), is the cautious reading of them.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Callable

from .loadspec import LoadSpecError


def _load(points_file) -> dict:
    out = {}
    if points_file and Path(points_file).exists():
        for line in Path(points_file).read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                out[row["load"]] = row
    return out


def search(measure: Callable[[float], dict], start: float, good_share: float, limit: float,
           integer: bool = True, rel_tol: float = 0.1, points_file=None, time_limit_s: float = 600.0,
           known=()) -> dict:
    """Ramp from `start` doubling up to `limit` until a point fails, then bisect; see the module docstring."""
    if not (start > 0 and limit >= start):
        raise LoadSpecError(f"capacity search start = {start}, limit = {limit}: expected 0 < start <= limit")
    if not 0 < good_share <= 1:
        raise LoadSpecError(f"capacity search good_share = {good_share}: expected a share in (0, 1]")
    points = _load(points_file)
    for row in known:
        if row.get("good_share") is None or row.get("load") is None:
            continue
        key = int(row["load"]) if integer else round(float(row["load"]), 6)
        points.setdefault(key, {**row, "load": key, "passed": bool(row["good_share"] >= good_share),
                                "from_known": True})
    deadline = time.monotonic() + time_limit_s
    not_run = []

    def ok_at(x) -> bool | None:
        key = int(x) if integer else round(float(x), 6)
        if key not in points:
            if time.monotonic() >= deadline:
                return None
            try:
                row = dict(measure(key))
            except Exception as e:  # noqa: BLE001 - a server that falls over ends the point as failed
                row = {"good_share": 0.0, "error": f"{type(e).__name__}: {e}"[:500]}
            if row.get("cut_short"):   # its time ran out inside it: no evidence, measured again by a rerun
                not_run.append(key)
                return None
            points[key] = row = {**row, "load": key, "passed": bool(row.get("good_share", 0.0) >= good_share)}
            if points_file:
                with open(points_file, "a") as f:
                    f.write(json.dumps(row, default=str) + "\n")
        return points[key]["passed"]

    def norm(v):   # the load a point is keyed by, so a capacity is always one of its points' loads
        return int(v) if integer else round(float(v), 6)

    passed, failed, x, complete = None, None, norm(start), True
    while True:  # ramp
        r = ok_at(x)
        if r is None:
            complete = False
            break
        if not r:
            failed = x
            break
        passed = x
        if x >= norm(limit):   # norm rounds: a limit above its own rounding is otherwise never reached
            break
        # a point already known (measured by a sweep, or before a resume): the ramp moves to the highest known
        # pass below the first known failure above x without measuring, and never doubles past that failure
        fail_above = min((k for k, p in points.items() if k > x and not p["passed"]), default=math.inf)
        passes = [k for k, p in points.items() if x < k < fail_above and p["passed"] and k <= limit]
        x = max(passes) if passes else norm(min(limit, x * 2, fail_above))
    if passed is None and failed is not None:
        # the first point failed, and a pass is known below it (a resumed points file, seeded rows): bisect up
        # from the highest such pass to the lowest failure above it instead of reporting no capacity
        below = [k for k, p in points.items() if k < failed and p["passed"]]
        if below:
            passed = max(below)
            failed = min(k for k, p in points.items() if passed < k <= failed and not p["passed"])
    while complete and passed is not None and failed is not None:  # bisect
        if (integer and failed - passed <= 1) or (not integer and failed - passed <= rel_tol * passed):
            break
        mid = (passed + failed) // 2 if integer else norm((passed + failed) / 2)
        r = ok_at(mid)
        if r is None:
            complete = False
        elif r:
            passed = mid
        else:
            failed = mid
    rows = [points[k] for k in sorted(points)]
    above = sorted(k for k, p in points.items() if failed is not None and k > failed and p["passed"])
    return {"capacity": passed if passed is not None else math.nan, "first_failed": failed,
            "complete": complete, "hit_limit": failed is None and passed == limit, "points": rows,
            "held_above_failure": above, "not_run": not_run}
