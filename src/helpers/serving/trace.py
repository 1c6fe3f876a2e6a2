"""Request traces to replay: arrival offsets and input/output lengths, one JSON object a line.

The format is Mooncake's published trace (kvcache-ai/Mooncake, `FAST25-release/traces/*.jsonl`):
`{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [...]}`, `timestamp` in
milliseconds from the trace's start; `hash_ids` (prefix-cache block ids) are read past. A public trace of that
shape replays as it is; the book commits a small synthetic one (`data/traces/synthetic.jsonl`, made by
`python -m helpers.serving.trace data/traces/synthetic.jsonl`: Poisson arrivals, log-normal lengths, seeded),
so a replay runs on any machine without a download.

    read("data/traces/synthetic.jsonl") -> [TraceEntry(t_s, input_len, output_len), ...]
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .client import MAX_TOKENS
from .loadspec import LoadSpecError


@dataclass(frozen=True)
class TraceEntry:
    t_s: float          # arrival offset from the trace's start (s)
    input_len: int
    output_len: int


def _entry(d, where: str) -> TraceEntry:
    if not isinstance(d, dict):
        raise LoadSpecError(f"{where}: expected a JSON object with timestamp, input_length, output_length")
    try:
        t, a, b = float(d["timestamp"]), d["input_length"], d["output_length"]
    except (KeyError, TypeError, ValueError):
        raise LoadSpecError(f"{where}: needs timestamp (ms from the trace's start), input_length and output_length "
                            f"(Mooncake's keys); got {sorted(d)[:6]}") from None
    for name, v in (("input_length", a), ("output_length", b)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TOKENS:
            raise LoadSpecError(f"{where}: {name} = {str(v)[:40]}: expected a whole number of tokens, 1 to {MAX_TOKENS}")
    if not math.isfinite(t) or t < 0:
        raise LoadSpecError(f"{where}: timestamp = {t}: expected milliseconds >= 0 from the trace's start")
    return TraceEntry(t / 1e3, a, b)


def read(path: str | Path, limit: int | None = None) -> list[TraceEntry]:
    """The entries of a JSONL trace (at most `limit`), sorted by arrival and shifted to start at 0."""
    p = Path(path)
    if not p.is_file():
        raise LoadSpecError(f"trace {str(path)[:200]!r} is not a file: give a JSONL trace (Mooncake's format) or "
                            "'synthetic' for the committed one")
    out = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError:
            raise LoadSpecError(f"{p.name}, line {n}: not JSON") from None
        out.append(_entry(d, f"{p.name}, line {n}"))
        if limit and len(out) >= limit:
            break
    if not out:
        raise LoadSpecError(f"{p.name}: no entries")
    out.sort(key=lambda e: e.t_s)
    t0 = out[0].t_s
    return [TraceEntry(e.t_s - t0, e.input_len, e.output_len) for e in out]


def synthetic(n: int = 40, rate: float = 4.0, input_median: int = 48, output_median: int = 24, sigma: float = 0.5,
              seed: int = 0, max_len: int = 256) -> list[TraceEntry]:
    """A seeded synthetic trace: Poisson arrivals at `rate` requests/s, log-normal lengths around the medians."""
    rng = np.random.default_rng(seed)
    t = np.concatenate([[0.0], np.cumsum(rng.exponential(1.0 / rate, n - 1))])
    lens = lambda med: np.clip(np.round(med * np.exp(rng.normal(0, sigma, n))), 1, max_len).astype(int)  # noqa: E731
    return [TraceEntry(round(float(a), 3), int(i), int(o)) for a, i, o in zip(t, lens(input_median), lens(output_median))]


def dumps(entries: list[TraceEntry]) -> str:
    return "".join(json.dumps({"timestamp": round(e.t_s * 1e3), "input_length": e.input_len,
                               "output_length": e.output_len}) + "\n" for e in entries)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="write the synthetic trace (Mooncake's JSONL format)")
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    Path(a.out).write_text(dumps(synthetic(a.n, a.rate, seed=a.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
