"""Chapter 02, the NaN crash: its parameters, the recorded backend matrix's figures, and this run's live
matrix in a phrase, a table of figures and the failed attempts' logs.

The live matrix itself (launch, smoke-test, decode, classify every configuration) is
helpers.serving.experiments.nan_matrix; whether it runs here is helpers.serving.experiments.nan_plan.
Every figure the prose cites is picked by `helpers.core.recorded.value`, which names the table, the
condition and what the table holds instead when a row is missing or a label was renamed.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from helpers.chapters._serving import ENGINE, MODE, SGLANG
from helpers.core import params
from helpers.core.recorded import value

#: the chapter's parameters (the notebook's validation cell and the runbook's precheck check them)
PARAMS = {**MODE, **ENGINE, **SGLANG, "startup_timeout_s": params.number(1, 3600),
          "never_healthy_timeout_s": params.number(1, 600),
          "decode_concurrency": params.number(1, 256, integer=True),
          "decode_tokens": params.number(1, 4096, integer=True), "request_timeout_s": params.number(1, 3600)}


@dataclass(frozen=True)
class RecordedMatrix:
    """What the prose says about the recorded backend matrix (recorded)."""
    rec_n_configs: int          # configurations tried
    rec_n_nan: int              # ... that produced NaN
    rec_n_ok: int               # ... that worked
    rec_n_unsupported: int      # ... that were refused
    rec_ok_decode: str          # the decode backend that worked


@dataclass(frozen=True)
class LiveMatrix:
    """This run's live matrix (measured)."""
    live_where: str             # where and how it ran
    live_n: int                 # configurations launched
    live_classes: int           # distinct outcomes
    live_wall_s: float          # seconds, all attempts together


def matrix_facts(matrix: pd.DataFrame) -> RecordedMatrix:
    """What the prose says about the recorded backend matrix: how many configurations, how many ended
    in each outcome, and the decode backend that worked."""
    counts = matrix.outcome.value_counts()
    return RecordedMatrix(rec_n_configs=int(len(matrix)), rec_n_nan=int(counts.get("nan", 0)),
                          rec_n_ok=int(counts.get("ok", 0)), rec_n_unsupported=int(counts.get("unsupported", 0)),
                          rec_ok_decode=str(value(matrix, "backend", component="nsa_decode", outcome="ok")))


def matrix_rows(matrix: pd.DataFrame, live: pd.DataFrame | None) -> list[tuple[str, str, str]]:
    """(label, outcome, kind) per configuration for plotting.outcome_matrix: recorded, then live."""
    rows = [(f"{r.component} {r.backend}", r.outcome, "recorded") for r in matrix.itertuples()]
    return rows + ([(r.name, r.outcome, "measured") for r in live.itertuples()] if live is not None else [])


def matrix_status(live: pd.DataFrame | None, where: str, why: str) -> str:
    """This run's live matrix in a phrase: where and how it ran, or why it did not."""
    if live is None:
        return f"no live matrix ({why})"
    return (f"{len(live)} configurations were launched live ({where}), ending in {live.outcome.nunique()} "
            f"different outcomes in {live.wall_s.sum():.0f} s")


def matrix_live_facts(live: pd.DataFrame | None, where: str) -> LiveMatrix | None:
    """The live matrix's figures (None without one)."""
    if live is None:
        return None
    return LiveMatrix(live_where=where, live_n=int(len(live)), live_classes=int(live.outcome.nunique()),
                      live_wall_s=float(live.wall_s.sum()))


def failure_logs(live: pd.DataFrame | None, lines: int = 6) -> str:
    """Markdown: the last lines of each failed attempt's log, then the backend lines the server logged."""
    if live is None:
        return ""
    out = [f"**{r.name}** ({r.outcome}): last lines of its log\n\n```text\n"
           + "\n".join(str(r.log_excerpt or "").splitlines()[-lines:]) + "\n```"
           for r in live[live.outcome != "ok"].itertuples()]
    backend = [ln for bl in live.backend_lines for ln in (bl or [])]
    if backend:
        out.append("Backend lines the server logged:\n\n```text\n" + "\n".join(backend[:lines]) + "\n```")
    return "\n\n".join(out)
