"""Resumable concurrency sweeps and attempt matrices.

Each finished point is appended at once to a JSON-lines file (helpers.book.results.append_row); a sweep
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
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import pandas as pd

from helpers.book import results
from helpers.serving import client as cl


class PointsLost(RuntimeError):
    """Points a sweep planned have no row in its file afterwards, neither done nor failed."""


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
    for i, (w, c) in enumerate(todo):
        n = cl.requests_for(c, per_concurrency, min_requests)
        row = {**labels, **cl.run_point(base_url, model, w, c, n, tokenizer=tokenizer, timeout_s=timeout_s),
               "settings_id": sid, "requests_per_concurrency": per_concurrency,
               "point": json.dumps([labels, w.name, c, sid], sort_keys=True, default=str),
               **(extra_columns() if extra_columns else {}),
               "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        results.append_row(rows_path, row)
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
    keys = [*labels, "workload", "concurrency", "settings_id"]
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
               progress: bool = True) -> pd.DataFrame:
    """Run `run_one(name)` (returning a row with an `outcome`) for every name not yet in `rows_path`."""
    rows_path = Path(rows_path)
    done = {r.get("name") for r in results.read_rows(rows_path)}
    todo = [n for n in names if n not in done]
    it = todo
    if progress and todo:
        from tqdm.auto import tqdm

        it = tqdm(todo, desc="configurations", leave=False)
    for name in it:
        row = run_one(name)
        results.append_row(rows_path, {**row, "name": name, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
    df = pd.DataFrame(results.read_rows(rows_path))
    lost = [n for n in names if df.empty or n not in set(df["name"])]
    if lost:
        raise PointsLost(f"{rows_path}: {len(lost)} planned configuration(s) have no row, neither done nor "
                         f"failed: {_few(lost)}; their rows were lost (a write cut short, or the file changed "
                         f"while the matrix ran). Continue the run (--resume) to try them")
    return df[df["name"].isin(names)].drop_duplicates("name", keep="last").reset_index(drop=True)
