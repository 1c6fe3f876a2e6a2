"""Resumable concurrency sweeps and attempt matrices.

Each finished point is appended at once to a JSON-lines file (helpers.book.results.append_row); a sweep
started again with the same file skips the points already there, so an interrupted sweep resumes
without repeating them. Rows carry their labels (configuration, repeat, ...) so one file can hold
several sweeps.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import pandas as pd

from helpers.book import results
from helpers.serving import client as cl


def _key(row: dict, keys: Sequence[str]) -> tuple:
    return tuple(str(row.get(k)) for k in keys)


def done_points(rows_path: Path, keys: Sequence[str]) -> set[tuple]:
    return {_key(r, keys) for r in results.read_rows(rows_path)}


def sweep(rows_path: str | Path, base_url: str, model: str, workloads: Iterable[cl.Workload],
          concurrencies: Sequence[int], labels: dict | None = None, per_concurrency: int = 5,
          min_requests: int = 1, tokenizer=None, timeout_s: float = 600.0, progress: bool = True,
          on_point: Callable[[dict], None] | None = None) -> pd.DataFrame:
    """Benchmark every (workload, concurrency) not yet in `rows_path`; return all rows with these labels."""
    concurrencies = cl.check_concurrencies(concurrencies)
    workloads = list(workloads)
    labels = dict(labels or {})
    keys = [*labels, "workload", "concurrency"]
    rows_path = Path(rows_path)
    done = done_points(rows_path, keys)
    todo = [(w, c) for w in workloads for c in concurrencies
            if _key({**labels, "workload": w.name, "concurrency": c}, keys) not in done]
    if todo:
        cl.check_reachable(base_url)
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=" ".join(f"{k}={v}" for k, v in labels.items()) or "sweep", leave=False)
    for w, c in todo:
        n = cl.requests_for(c, per_concurrency, min_requests)
        row = {**labels, **cl.run_point(base_url, model, w, c, n, tokenizer=tokenizer, timeout_s=timeout_s),
               "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        results.append_row(rows_path, row)
        if bar is not None:
            bar.update(1)
        if on_point is not None:
            on_point(row)
    if bar is not None:
        bar.close()
    return rows_frame(rows_path, labels)


def rows_frame(rows_path: str | Path, labels: dict | None = None) -> pd.DataFrame:
    df = pd.DataFrame(results.read_rows(Path(rows_path)))
    for k, v in (labels or {}).items():
        if df.empty:
            break
        df = df[df[k].astype(str) == str(v)]
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
    return df[df["name"].isin(names)].drop_duplicates("name", keep="last").reset_index(drop=True)
