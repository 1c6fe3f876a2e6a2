"""Resumable concurrency sweeps and attempt matrices.

Each finished point is appended at once to a JSON-lines file (helpers.core.results.append_row); a sweep
started again with the same file skips the points already there, so an interrupted sweep resumes
without repeating them. Rows carry their labels (configuration, repeat, ...) so one file can hold
several sweeps.

A point is identified by its labels, workload and concurrency *and by the settings it was measured
under* (`settings_id`: the model, requests per point, the prompts' tokenizer and, for a launched
server, its command line): a point made with 1 request per point is never taken for one made with 20,
and a frame of results only ever holds points of one set of settings (the latest, unless asked). A
point whose requests all failed is not done: a resumed sweep measures it again. A server whose every
request of a point ran out of time is not asked for the rest of its points (they stay to do). A point
the sweep planned that has no row afterwards, neither done nor failed (its row was lost: a write cut short,
a file changed under the sweep), fails the sweep with `PointsLost`, never a table that silently lacks it.

Each point has its own time budget within the notebook cell's limit (the runbook passes it to the kernel as
$BOOK_CELL_TIMEOUT_S; `start_cell_clock()` starts it where the cell's long work starts): before a point, its time
is estimated from the points measured under the same settings (seconds per request and output token, as the
rows record them) or, with nothing measured yet, from a short probe (`probe_point_s`: the point's concurrency of
short requests at once), and, where it would not end before the cell's limit, the sweep stops there. The points
left are recorded (`results.mark_partial`) and the runbook reports the chapter as "partial, resume with ...", not
as a cell that ran out of time. A cell that stops so before measuring any point cannot progress (a resume would
start and stop the same way): it raises SweepCannotProgress, saying what execution_timeout the point needs and
how to set it; so does a point whose estimate is more than the cell's whole limit, at once, whatever the cell
measured before it (issue 47: such a point first cost a run ending "partial", rc 0, and only its resume said so).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import pandas as pd

from helpers.core import results
from helpers.serving import client as cl


class PointsLost(RuntimeError):
    """Points a sweep planned have no row in its file afterwards, neither done nor failed."""


class SweepCannotProgress(RuntimeError):
    """A point does not fit in what is left of the cell's time limit and the cell has measured no point: a
    resumed run would start the same way and stop at the same point, for ever. The message says what to change."""


CELL_TIMEOUT_ENV = results.CELL_TIMEOUT_ENV
_CLOCK: dict = {"deadline": None, "limit": None, "cell": "none", "measured": 0}
#: the most output tokens a probe request asks for (the first point of a sweep is estimated from c of them)
PROBE_TOKENS = 8


def _cell() -> int | None:
    """Which notebook cell runs now (IPython's execution count; None outside IPython)."""
    try:
        from IPython import get_ipython

        ip = get_ipython()
    except ImportError:
        return None
    return None if ip is None else ip.execution_count


def start_cell_clock(margin_s: float | None = None) -> float | None:
    """Start the time budget of the notebook cell now running: its limit ($BOOK_CELL_TIMEOUT_S, set by the
    runbook) less `margin_s` (default: a tenth of it, at least 10 s) for what the cell does after its sweeps.
    Returns the limit (None where no limit is set: no budget). Without a call, the first sweep of a cell starts
    its clock."""
    given = os.environ.get(CELL_TIMEOUT_ENV, "")
    try:
        limit = float(given)
    except ValueError:
        limit = float("nan")
    if not math.isfinite(limit) or limit <= 0:
        _CLOCK.update(deadline=None, limit=None, cell=_cell(), given=given, measured=0)
        return None
    margin = max(10.0, 0.1 * limit) if margin_s is None else float(margin_s)
    _CLOCK.update(deadline=time.monotonic() + limit - margin, limit=limit, cell=_cell(), given=given, measured=0,
                  margin=margin)
    return limit


def time_left() -> float | None:
    """Seconds left of the running cell's budget (None: no budget). A new cell, or a limit other than the one
    the clock was started under ($BOOK_CELL_TIMEOUT_S changed or unset since: outside a notebook one process
    runs many sweeps, as pytest does), starts the budget again."""
    if _CLOCK["cell"] != _cell() or _CLOCK.get("given") != os.environ.get(CELL_TIMEOUT_ENV, ""):
        start_cell_clock()
    d = _CLOCK["deadline"]
    return None if d is None else d - time.monotonic()


def _point_cost(rows: list[dict]) -> float | None:
    """Seconds per request and output token of the points measured (warm-up included), the largest."""
    costs = []
    for r in rows:
        try:
            n, out, t = int(r.get("num_requests") or 0), int(r.get("output_len") or 0), float(r.get("point_s") or 0)
        except (TypeError, ValueError):
            continue
        if n > 0 and out > 0 and t > 0:
            costs.append(t / ((n + 1) * out))
    return max(costs) if costs else None


def probe_point_s(base_url: str, model: str, w: cl.Workload, concurrency: int, n: int, budget_s: float,
                  tokenizer=None, timeout_s: float = 600.0) -> tuple[float | None, str]:
    """(estimated seconds, how) of a point of `n` requests at `concurrency` of workload `w` that has nothing
    measured to go by: `concurrency` requests of the point's prompt length and min(output_len, PROBE_TOKENS)
    output tokens are sent at once, within `budget_s`. Each request's time is scaled to the full output (its
    time to first token, plus the rest times output_len / probe tokens); a round of the point takes the slowest
    of them, and the point ceil((n + 1) / concurrency) rounds (its warm-up request included). The probe runs
    twice and the faster estimate counts: a server's first requests run kernels and allocations for the first
    time (issue 47: one point's estimate read 141 s, then 78 s on the same server). A probe that ran out of
    `budget_s` gives infinity (the point is longer still); one whose requests all failed, or ran out of the
    request time limit `timeout_s` (shorter than the budget), gives None (the point is run, and its failures
    recorded as before)."""
    t0 = time.monotonic()
    first, how, took = _probe(base_url, model, w, concurrency, n, budget_s, tokenizer, timeout_s)
    if first is None or not math.isfinite(first):
        return first, how
    second, _, again = _probe(base_url, model, w, concurrency, n, budget_s - (time.monotonic() - t0), tokenizer,
                              timeout_s)
    if second is None or not math.isfinite(second):
        return first, how
    return min(first, second), (f"the faster of two probes of {concurrency} request(s) of "
                                f"{min(w.output_len, PROBE_TOKENS)} token(s) at once, which took {took:.1f} and "
                                f"{again:.1f} s")


def _probe(base_url, model, w, concurrency, n, budget_s, tokenizer, timeout_s) -> tuple[float | None, str, float]:
    """One probe of probe_point_s: (estimated seconds, how, seconds it took)."""
    k = min(w.output_len, PROBE_TOKENS)
    limit = max(0.1, min(timeout_s, budget_s))
    prompts = cl.make_prompts(concurrency, w.input_len, tokenizer, seed=7)
    res, took = cl.run_sync(cl.run_requests(base_url, model, prompts, k, concurrency, timeout_s=limit,
                                            until=time.monotonic() + limit))
    how = f"a probe of {concurrency} request(s) of {k} token(s) at once took {took:.1f} s"
    if any(r.error_kind in ("timeout", "not-run") for r in res):
        if limit < budget_s:   # cut off by the request time limit, not the budget: a server not answering, whose
            return None, how, took   # point is run and its time-outs recorded, as any point's
        return math.inf, f"a probe of {concurrency} request(s) of {k} token(s) at once did not end within " \
                         f"{limit:.0f} s", took
    ok = [r for r in res if r.ok]
    if not ok:
        return None, how, took
    scale = w.output_len / k
    round_s = max(r.ttft_s + (r.e2e_s - r.ttft_s) * scale if math.isfinite(r.ttft_s) else r.e2e_s * scale for r in ok)
    return round_s * math.ceil((n + 1) / concurrency), how, took


def cannot_progress(point: str, need: float | None, how: str, never: bool = False) -> str:
    """What a sweep that cannot progress says: the point, its estimate, the cell's limit and what to change.
    `never`: the point needs more than the cell's whole limit, so no run, fresh or resumed, can measure it."""
    limit, margin = _CLOCK.get("limit") or 0, _CLOCK.get("margin") or 0
    want = math.ceil(((need if need is not None and math.isfinite(need) else 2 * limit) + margin) * 1.25)
    est = ("more than the time left" if need is None or not math.isfinite(need) else f"about {need:.0f} s")
    why = ("more than the cell's whole time limit allows, so no run can measure it, a resumed one neither" if never
           else "this cell measured no point, so --resume would start and stop the same way")
    return (f"point {point} would need {est} ({how}), and the cell's time limit, execution_timeout = {limit:g} s "
            f"(less {margin:.0f} s kept for the rest of the cell), leaves too little: {why}. Raise "
            f"execution_timeout to at least {want} s: copy "
            f"the run's target to targets/<yours>.yaml with `execution_timeout: {want}` and start a new run, "
            f"python -m helpers.book.runbook --target targets/<yours>.yaml (--resume keeps the plan it started "
            f"with); or make the point smaller (fewer requests per concurrency, a shorter workload, a lower "
            f"concurrency) with -p")


def _key(row: dict, keys: Sequence[str]) -> tuple:
    return tuple(str(row.get(k)) for k in keys)


def point_settings(model: str, per_concurrency: int, min_requests: int = 1, tokenizer=None,
                   extra: dict | None = None) -> dict:
    """What a sweep point's figures depend on besides its labels, workload and concurrency."""
    tok = getattr(tokenizer, "name_or_path", None) if tokenizer is not None else None
    return {"model": str(model), "requests_per_concurrency": int(per_concurrency), "min_requests": int(min_requests),
            "tokenizer": str(tok) if tokenizer is not None else None, **(extra or {})}


def settings_id(settings: dict) -> str:
    return hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _finished(row: dict) -> bool:
    """A point counts as done when at least one of its requests completed."""
    try:
        return int(row.get("completed", 1) or 0) > 0
    except (TypeError, ValueError):
        return False


def done_points(rows_path: Path, keys: Sequence[str]) -> set[tuple]:
    """Keys of the points in `rows_path` that are done (a point whose requests all failed is not)."""
    return {_key(r, keys) for r in results.read_rows(rows_path) if _finished(r)}


def pending(rows_path: str | Path, labels: dict, workloads: Iterable[cl.Workload], concurrencies: Sequence[int],
            settings: dict) -> list[tuple[cl.Workload, int]]:
    """The (workload, concurrency) points of a sweep not yet done under `settings`."""
    sid = settings_id(settings)
    keys = [*labels, "workload", "concurrency", "settings_id"]
    done = done_points(Path(rows_path), keys)
    return [(w, c) for w in workloads for c in concurrencies
            if _key({**labels, "workload": w.name, "concurrency": c, "settings_id": sid}, keys) not in done]


def _estimate(base_url, model, w, c, n, measured, tokenizer, timeout_s) -> tuple[float | None, str, float | None]:
    """(seconds the point of `n` requests at `c` needs, how that is known, seconds the cell has left): from the
    points measured, or a probe where none is. A point needing more than the cell's whole limit raises
    SweepCannotProgress at once: no cell, fresh or resumed, can hold it."""
    budget, cost = time_left(), _point_cost(measured)
    need = None if cost is None else cost * (n + 1) * w.output_len
    how = "estimated from the points measured"
    if budget is not None and budget > 0 and need is None:   # nothing measured yet: not started blind
        need, how = probe_point_s(base_url, model, w, c, n, budget, tokenizer, timeout_s)
        budget = time_left()
    whole = (_CLOCK["limit"] - _CLOCK.get("margin", 0)) if _CLOCK.get("limit") else None
    if whole is not None and need is not None and need > whole:
        raise SweepCannotProgress(cannot_progress(f"{w.name} x {c}", need, how, never=True))
    return need, how, budget


def sweep(rows_path: str | Path, base_url: str, model: str, workloads: Iterable[cl.Workload],
          concurrencies: Sequence[int], labels: dict | None = None, per_concurrency: int = 5,
          min_requests: int = 1, tokenizer=None, timeout_s: float = 600.0, progress: bool = True,
          on_point: Callable[[dict], None] | None = None, settings: dict | None = None,
          extra_columns: Callable[[], dict] | None = None) -> pd.DataFrame:
    """Benchmark every (workload, concurrency) not yet done in `rows_path` under these settings; return
    the rows with these labels and settings. `settings`: more of what the figures depend on (a launched
    server's command line); `extra_columns()`: columns added to each row as it is written (the
    server's memory)."""
    concurrencies = cl.check_concurrencies(concurrencies)
    workloads = list(workloads)
    labels = dict(labels or {})
    st = point_settings(model, per_concurrency, min_requests, tokenizer, settings)
    sid = settings_id(st)
    rows_path = Path(rows_path)
    todo = pending(rows_path, labels, workloads, concurrencies, st)
    if todo:
        cl.check_reachable(base_url)
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=" ".join(f"{k}={v}" for k, v in labels.items()) or "sweep", leave=False)
    left: list[tuple[cl.Workload, int]] = []
    cut = ""
    keys = [*labels, "workload", "concurrency", "settings_id"]
    measured = [r for r in results.read_rows(rows_path) if r.get("settings_id") == sid]
    for i, (w, c) in enumerate(todo):
        n = cl.requests_for(c, per_concurrency, min_requests)
        need, how, budget = _estimate(base_url, model, w, c, n, measured, tokenizer, timeout_s)
        if budget is not None and (budget <= 0 or (need is not None and need > budget)):
            if not _CLOCK.get("measured"):
                raise SweepCannotProgress(cannot_progress(f"{w.name} x {c}", need, how))
            left = todo[i:]
            cut = (f"point {w.name} x {c} would need about {need:.0f} s ({how}), "
                   if need is not None and math.isfinite(need) else f"the cell's time was spent before point "
                   f"{w.name} x {c}, ")
            cut += (f"{max(budget, 0):.0f} s of the cell's {_CLOCK['limit']:g} s limit are left")
            break
        t_point = time.monotonic()
        row = {**labels, **cl.run_point(base_url, model, w, c, n, tokenizer=tokenizer, timeout_s=timeout_s),
               "point_s": round(time.monotonic() - t_point, 3),
               "settings_id": sid, "requests_per_concurrency": per_concurrency,
               "point": json.dumps([labels, w.name, c, sid], sort_keys=True, default=str),
               **(extra_columns() if extra_columns else {}),
               "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        results.append_row(rows_path, row)
        measured.append(row)
        _CLOCK["measured"] = _CLOCK.get("measured", 0) + 1
        if bar is not None:
            bar.update(1)
        if on_point is not None:
            on_point(row)
        if row["completed"] == 0 and row.get("timed_out", 0) == row["num_requests"] and i + 1 < len(todo):
            print(f"{base_url}: every request of point {w.name} x {c} ran out of its {timeout_s:g} s; the server "
                  f"is not answering, so its {len(todo) - i - 1} other point(s) are left for a resumed run")
            left = todo[i + 1:]
            break
    if bar is not None:
        bar.close()
    if cut:
        names = [f"{w.name} x {c}" for w, c in left]
        results.mark_partial(rows_path.parent, f"sweep {' '.join(f'{k}={v}' for k, v in labels.items()) or ''}"
                             f" stopped before the cell's time limit: {cut}; {len(left)} point(s) left "
                             f"({_few(names)})")
        print(f"partial: {cut}; {len(left)} point(s) left for a resumed run ({_few(names)})")
    have = {_key(r, keys) for r in results.read_rows(rows_path)}
    lost = [f"{w.name} x {c}" for w in workloads for c in concurrencies if (w, c) not in left
            and _key({**labels, "workload": w.name, "concurrency": c, "settings_id": sid}, keys) not in have]
    if lost:
        raise PointsLost(f"{rows_path}: {len(lost)} planned point(s) have no row, neither done nor failed: "
                         f"{_few(lost)}; their rows were lost (a write cut short, or the file changed while the "
                         f"sweep ran). Continue the run (--resume) to measure them")
    return rows_frame(rows_path, labels, settings_id=sid)


def _few(items: Sequence, n: int = 4) -> str:
    """At most `n` items of a long list, and how many more."""
    items = list(items)
    return ", ".join(map(str, items[:n])) + (f" and {len(items) - n} more" if len(items) > n else "")


def rows_frame(rows_path: str | Path, labels: dict | None = None, settings_id: str | None = None) -> pd.DataFrame:
    """The rows with these labels, of one set of settings (`settings_id`, or else the settings of the
    latest row written with these labels), one row per point (a point measured again after it failed:
    its latest row)."""
    df = pd.DataFrame(results.read_rows(Path(rows_path)))
    for k, v in (labels or {}).items():
        if df.empty:
            break
        df = df[df[k].astype(str) == str(v)]
    if not df.empty and "settings_id" in df.columns:
        sid = settings_id if settings_id is not None else df["settings_id"].dropna().iloc[-1] \
            if df["settings_id"].notna().any() else None
        if sid is not None:
            df = df[df["settings_id"] == sid]
    if not df.empty and "point" in df.columns:   # a point measured again: its finished row, else its latest
        df = df.assign(_done=[_finished(r) for r in df.to_dict("records")], _point=df["point"].fillna("").astype(str))
        df = df.sort_values("_done", kind="stable").drop_duplicates("_point", keep="last").sort_index()
        df = df.drop(columns=["_done", "_point"])
    return df.reset_index(drop=True)


def run_matrix(rows_path: str | Path, names: Sequence[str], run_one: Callable[[str], dict],
               progress: bool = True, workers: int = 1) -> pd.DataFrame:
    """Run `run_one(name)` (returning a row with an `outcome`) for every name not yet in `rows_path`, up to
    `workers` at once (threads: each run_one waits on a server process of its own); each row is appended as its
    run ends, from this thread, with `workers` recorded beside it."""
    if not (isinstance(workers, int) and workers >= 1):
        raise ValueError(f"workers={workers!r}: a whole number of at least 1")
    rows_path = Path(rows_path)
    done = {r.get("name") for r in results.read_rows(rows_path)}
    todo = [n for n in names if n not in done]
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="configurations", leave=False)

    def keep(name, row):
        results.append_row(rows_path, {**row, "name": name, "workers": workers,
                                       "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
        if bar is not None:
            bar.update(1)
    if workers == 1:
        for name in todo:
            keep(name, run_one(name))
    else:
        from concurrent.futures import ThreadPoolExecutor, as_completed

        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(run_one, name): name for name in todo}
            for f in as_completed(futures):
                keep(futures[f], f.result())
    if bar is not None:
        bar.close()
    df = pd.DataFrame(results.read_rows(rows_path))
    lost = [n for n in names if df.empty or n not in set(df["name"])]
    if lost:
        raise PointsLost(f"{rows_path}: {len(lost)} planned configuration(s) have no row, neither done nor "
                         f"failed: {_few(lost)}; their rows were lost (a write cut short, or the file changed "
                         f"while the matrix ran). Continue the run (--resume) to try them")
    return df[df["name"].isin(names)].drop_duplicates("name", keep="last").reset_index(drop=True)
