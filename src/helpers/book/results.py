"""A run's result tables: each chapter saves what it measured under <run>/results/<chapter>/.

Tables are written atomically (temporary file, then rename) so an interrupted chapter never leaves a
half-written file; `append_row` adds one finished point at a time so a sweep can resume.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def save_table(folder: Path, name: str, df: pd.DataFrame) -> None:
    """Write `df` as <folder>/<name>.csv atomically. (Returns nothing, so that a chapter cell
    ending with it shows nothing.)"""
    path = Path(folder) / f"{name}.csv"
    _atomic_write(path, df.to_csv(index=False))


def load_table(folder: Path, name: str) -> pd.DataFrame:
    path = Path(folder) / f"{name}.csv"
    if not path.exists():
        raise FileNotFoundError(f"result table {path} does not exist; run the chapter that writes it first")
    return pd.read_csv(path)


def save_json(folder: Path, name: str, obj) -> None:
    path = Path(folder) / f"{name}.json"
    _atomic_write(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


def load_json(folder: Path, name: str):
    path = Path(folder) / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"result file {path} does not exist; run the chapter that writes it first")
    return json.loads(path.read_text())


def append_row(path: Path, row: dict) -> None:
    """Append one finished point to a JSON-lines file (one object a line), flushed to disk at once."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_rows(path: Path) -> list[dict]:
    """Rows of a JSON-lines file; a torn last line (a crash mid-write) is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
