"""Chapter 02, the NaN crash: its parameters, the recorded backend matrix's figures, and this run's live
matrix in a phrase, a table of figures and the failed attempts' logs.

The live matrix itself (launch, smoke-test, decode, classify every configuration) is
helpers.serving.experiments.nan_matrix; whether it runs here is helpers.serving.experiments.nan_plan.
Every figure the prose cites is picked by `helpers.core.recorded.value`, which names the table, the
condition and what the table holds instead when a row is missing or a label was renamed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from helpers.chapters._serving import ENGINE, MODE, SGLANG, server_choice, short_why
from helpers.core import params
from helpers.core.recorded import value
from helpers.serving import classify
from helpers.serving import sglang as sg
from helpers.serving.config import NanConfig, ServerChoice

#: the chapter's parameters (the notebook's validation cell and the runbook's precheck check them)
PARAMS = {**MODE, **ENGINE, **SGLANG, "startup_timeout_s": params.number(1, 3600),
          "health_timeout_s": params.number(0.5, 600),
          "never_healthy_timeout_s": params.number(1, 600),
          "decode_concurrency": params.number(1, 256, integer=True),
          "decode_tokens": params.number(1, 4096, integer=True), "request_timeout_s": params.number(1, 3600)}


def config(P: dict) -> tuple[ServerChoice, NanConfig]:
    """The chapter's validated parameters, typed once (the server it launches; the decode wave it sends)."""
    return server_choice(P), NanConfig(int(P["decode_concurrency"]), int(P["decode_tokens"]),
                                       float(P["never_healthy_timeout_s"]))


@dataclass(frozen=True)
class RecordedMatrix:
    """What the prose says about the recorded backend matrix (recorded)."""
    rec_n_configs: int          # configurations tried
    rec_n_nan: int              # ... that produced NaN
    rec_n_ok: int               # ... that worked
    rec_n_unsupported: int      # ... that were refused
    rec_ok_decode: str          # the decode backend that worked
    rec_n_decode: int           # decode backends tried (the attention rows of the matrix)
    rec_n_decode_nan: int       # ... of them that produced NaN


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
                          rec_ok_decode=str(value(matrix, "backend", component="nsa_decode", outcome="ok")),
                          rec_n_decode=int((matrix.component == "nsa_decode").sum()),
                          rec_n_decode_nan=int(((matrix.component == "nsa_decode") & (matrix.outcome == "nan")).sum()))


def attention_rows(matrix: pd.DataFrame) -> pd.DataFrame:
    """The recorded matrix's sparse-attention rows (the MoE runners are chapter 04's table)."""
    return matrix[matrix.component.str.startswith("nsa_")]


def launch_block(cfg: "sg.SGLangConfig", env: dict[str, str], port: int, flag_set: str) -> str:
    """Markdown: the launch command of `cfg` under `flag_set` as one copyable shell block, its environment
    first and one flag (with its value) per line (derived from the recorded configuration)."""
    argv = sg.build_argv(cfg, flag_set, port=port, python="python")
    lines = [f"export {k}={v}" for k, v in env.items()]
    head, rest = argv[:3], argv[3:]           # python -m sglang.launch_server
    parts, i = [], 0
    while i < len(rest):
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            parts.append(f"{rest[i]} {rest[i + 1]}")
            i += 2
        else:
            parts.append(rest[i])
            i += 1
    lines.append(" ".join(head) + " \\")
    lines += [f"    {a} \\" for a in parts[:-1]] + [f"    {parts[-1]}"]
    return "```bash\n" + "\n".join(lines) + "\n```"


def fix_flags(flag_set: str) -> str:
    """The NaN fix's two flags as spelled under `flag_set` (derived from the recorded configuration)."""
    cfg = sg.SGLangConfig("m", prefill_backend="trtllm", decode_backend="trtllm")
    argv = sg.build_argv(cfg, flag_set)
    return " ".join(f"{a} {argv[i + 1]}" for i, a in enumerate(argv) if a.endswith(("prefill-backend", "decode-backend")))


def matrix_rows(matrix: pd.DataFrame, live: pd.DataFrame | None) -> list[tuple[str, str, str]]:
    """(label, outcome, kind) per configuration for plotting.outcome_matrix: recorded, then live."""
    rows = [(f"{r.component} {r.backend}", r.outcome, "recorded") for r in matrix.itertuples()]
    return rows + ([(r.name, r.outcome, "measured") for r in live.itertuples()] if live is not None else [])


def elapsed_s(live: pd.DataFrame) -> float:
    """Seconds from the earliest attempt's start to the latest one's end (derived: each start is its
    `finished_at`, kept to the second, less its `wall_s`); the attempts' summed wall time where a row
    lacks `finished_at`."""
    if "finished_at" not in live.columns or live.finished_at.isna().any():
        return float(live.wall_s.sum())
    end = pd.to_datetime(live.finished_at)
    start = end - pd.to_timedelta(live.wall_s.astype(float), unit="s")
    return float((end.max() - start.min()).total_seconds())


def matrix_status(live: pd.DataFrame | None, where: str, why: str) -> str:
    """This run's live matrix in a phrase: where and how it ran (its elapsed time and, where attempts ran
    side by side, their summed time), or why it did not."""
    if live is None:
        return f"no live matrix: {short_why(why)}"
    w = pd.to_numeric(live["workers"], errors="coerce").max() if "workers" in live.columns else float("nan")
    head = (f"{len(live)} configurations were launched live ({where}), ending in {live.outcome.nunique()} "
            "different outcomes")
    if pd.notna(w) and w > 1:
        return (f"{head} in about {elapsed_s(live):.0f} s (derived from the attempts' end times, kept to the "
                f"second; up to {int(w)} ran side by side, {live.wall_s.sum():.0f} s of attempts summed)")
    return f"{head} in {live.wall_s.sum():.0f} s of attempts"


def matrix_live_facts(live: pd.DataFrame | None, where: str) -> LiveMatrix | None:
    """The live matrix's figures (None without one)."""
    if live is None:
        return None
    return LiveMatrix(live_where=where, live_n=int(len(live)), live_classes=int(live.outcome.nunique()),
                      live_wall_s=float(live.wall_s.sum()))


_GARBLE = re.compile(r"(?:[^\x20-\x7e\u00a0-\u024f]|\\x[0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4})+")
_ERROR_LINE = re.compile(r"^\s*[\w.]*(Error|Exception)\b.*:")


def plain_text(text: str) -> str:
    """`text` without the bytes a reader cannot read (a tiny random model's reply is mostly such bytes):
    every run of unprintable characters becomes one space."""
    return re.sub(r" +", " ", _GARBLE.sub(" ", str(text))).strip()


def key_line(outcome: str, log_excerpt: str | None, detail: str) -> str:
    """The one line that shows why an attempt ended as it did: the NaN line, the refusal or the exception
    from its log tail (the last exception line among them, else the first), else the attempt's own detail."""
    lines = [ln.strip() for ln in str(log_excerpt or "").splitlines() if ln.strip()]
    pattern = {"nan": classify.NAN_PATTERNS, "unsupported": classify.UNSUPPORTED_PATTERNS}.get(outcome, _ERROR_LINE)
    hits = [ln for ln in lines if pattern.search(ln)] if outcome not in ("ok", "wrong-answer", "startup-timeout") else []
    errors = [ln for ln in hits if _ERROR_LINE.search(ln)]
    return plain_text(errors[-1] if errors else hits[0] if hits else detail)


def failure_lines(live: pd.DataFrame | None) -> pd.DataFrame | None:
    """Per attempt what it stands for and the one line that shows how it ended (measured): for a failed
    attempt the line of its log that matters, for a served one its reply; the whole logs stay in the run
    folder."""
    if live is None:
        return None
    return pd.DataFrame({"attempt": live.name, "outcome": live.outcome, "stands for": live.stands_for,
                         "the line that shows it": [key_line(r.outcome, r.log_excerpt, r.detail)
                                                    for r in live.itertuples()]})


def live_table(live: pd.DataFrame) -> pd.DataFrame:
    """The live attempts' times and replies for the folded table (what `failure_lines` shows is not repeated):
    replies without unreadable bytes."""
    out = live[["name", "startup_s", "wall_s", "detail"]].copy()
    out["detail"] = [plain_text(d) for d in out.detail]
    return out.rename(columns={"name": "attempt", "startup_s": "start-up_s"})


def classes_text(live: pd.DataFrame | None) -> str:
    """Which of the classifier's outcomes this run's live matrix met (measured), or that it had none."""
    if live is None:
        return "none, since no live matrix ran"
    seen = [o for o in classify.OUTCOMES if o in set(live.outcome)]
    return f"{len(seen)} ({', '.join(seen)})"


def renamed_flags(cfg: "sg.SGLangConfig") -> int:
    """How many flags of `cfg`'s early-2026 command are spelled differently (or gone) under 0.5.23 (derived)."""
    def flags(fs):
        return {a for a in sg.build_argv(cfg, fs) if a.startswith("--")}
    return len(flags("early-2026") - flags("0.5.23"))


def backend_lines(live: pd.DataFrame | None, lines: int = 6) -> str:
    """Markdown: the first lines in which the live servers named the backends they chose (a code block), or
    "" where none did."""
    if live is None or "backend_lines" not in live:
        return ""
    found = [ln for bl in live.backend_lines for ln in (bl or [])]
    return "```text\n" + "\n".join(found[:lines]) + "\n```" if found else ""
