"""The tables the machine verdict's page folds under its parts (each with a summary line saying what it holds)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.chapters.this_machine.parts import MachineVerdict
from helpers.machine import virt


def signals(v: MachineVerdict) -> list:
    if v.virt is None:
        return []
    return [(pd.DataFrame(virt.signal_rows(v.virt)),
             {"fold_after": 0, "summary": f"Every signal of the probe and what it says ({v.virt.outcome}: measured)"})]


def pairs(v: MachineVerdict) -> list:
    if v.pairs is None or not len(v.pairs):
        return []
    return [(v.pairs, {"fold_after": 0, "summary": f"Every GPU pair four ways, and the remedy for the first that fails "
                                                   f"({len(v.pairs)} pairs, measured)"})]


def allreduce(v: MachineVerdict) -> list:
    if v.allreduce is None:
        return []
    t = v.allreduce.rename(columns={"measured_us": "measured here_us", "reference_us": "reference_us",
                                    "ratio": "measured / reference"})
    return [(t, {"fold_after": 0, "units": {"size_bytes": "bytes"},
                 "summary": "The all-reduce at every decode size: measured here against the healthy reference"})]


def loss(v: MachineVerdict) -> list:
    if v.loss is None:
        return []
    t = v.loss[["end", "batch", "observed_step_ms", "predicted_step_ms", "loss_ms", "message_bytes", "reference_us",
                "measured_us", "explains_us", "cannot_us", "share"]].rename(
        columns={"explains_us": "80 % mark_us", "cannot_us": "25 % mark_us", "share": "host-path share"})
    return [(t, {"fold_after": 0, "units": {"message_bytes": "bytes"},
                 "summary": "This machine's loss per step and the thresholds derived from it (derived)"})]


def remedies(v: MachineVerdict) -> list:
    if not v.remedies:
        return []
    t = pd.DataFrame([{"rank": i + 1, "remedy": r.what, "setting": r.setting, "moves": r.moves,
                       "one stream_tok/s": r.tok_s_1 if np.isfinite(r.tok_s_1) else np.nan, "called for by": r.why}
                      for i, r in enumerate(v.remedies)])
    return [(t, {"fold_after": 0, "summary": f"The remedies this machine's failed checks call for ({len(t)}, ranked)"})]
