"""The measured studies the book shows, loaded from data/measured/ by their role in data/sources.yaml.

    studies.fidelity()      # every registered comparison of role `fidelity`, one table (fidelity.COLUMNS + study)
    studies.gap("allreduce-gap-stream")   # one all-reduce gap study (fidelity.GAP_COLUMNS + study)

Which study is shown is the registry's business (helpers.core.recorded.measured_studies checks it);
files recorded before methods were objects get today's method columns here, once, through
helpers.interconnect.recorded_labels.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from helpers.core import recorded
from helpers.interconnect import fidelity, recorded_labels

FIDELITY_ROLE = "fidelity"
GAP_ROLES = ("allreduce-gap-stream", "allreduce-gap-idle")


def read_fidelity(path: str | Path, study: str) -> pd.DataFrame:
    """One comparison table (a study's fidelity.csv) with every fidelity.COLUMNS column and `study`."""
    t = pd.read_csv(path)
    missing = [c for c in fidelity.BASE_COLUMNS if c not in t.columns]
    if missing:
        raise fidelity.ToolOutputError(f"{path} lacks columns {missing}; expected helpers.interconnect.fidelity."
                                       "COLUMNS (re-run benchmarks/fidelity.py, or --compare its raw files)")
    t = recorded_labels.from_fidelity(t, study)
    return t.assign(study=study)


def fidelity_tables() -> pd.DataFrame:
    """Every registered comparison of role `fidelity`, in registry order, as one table."""
    found = recorded.measured_studies(FIDELITY_ROLE)
    if not found:
        raise recorded.DataError(f"no measured study of role {FIDELITY_ROLE!r} in data/sources.yaml")
    return pd.concat([read_fidelity(s.path / "fidelity.csv", s.id).assign(date=str(s.entry["date"])) for s in found],
                     ignore_index=True)


def read_gap(path: str | Path, study: str = "") -> pd.DataFrame:
    """One all-reduce gap table (benchmarks/allreduce_gap.py's allreduce_gap.csv) with fidelity.GAP_COLUMNS."""
    t = recorded_labels.from_gap(pd.read_csv(path))
    missing = [c for c in fidelity.GAP_COLUMNS if c not in t.columns]
    if missing:
        raise fidelity.ToolOutputError(f"{path} lacks columns {missing}; expected helpers.interconnect.fidelity."
                                       "GAP_COLUMNS (benchmarks/allreduce_gap.py writes them)")
    return t.assign(study=study)


def gap(role: str) -> pd.DataFrame:
    """The registered all-reduce gap study of `role` (GAP_ROLES)."""
    if role not in GAP_ROLES:
        raise recorded.DataError(f"role {role!r} is not an all-reduce gap study; choose one of {GAP_ROLES}")
    s = recorded.study(role)
    return read_gap(s.path / "allreduce_gap.csv", s.id)

