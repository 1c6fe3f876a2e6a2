"""Picking the rows a page cites out of a table, by column values, with an error that names what was
looked for and what the table has (a renamed label or a missing row fails loudly, never silently)."""
from __future__ import annotations

import pandas as pd


class PickError(LookupError):
    """A row, label or study that a chapter cites is not in the table; the message names it."""


def describe(where: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in where.items())


def rows(table: pd.DataFrame, what: str, **where) -> pd.DataFrame:
    """The rows of `table` whose columns equal `where`; PickError naming `what` when there are none."""
    missing = [c for c in where if c not in table.columns]
    if missing:
        raise PickError(f"{what}: the table has no column(s) {missing} (looked for {describe(where)})")
    m = pd.Series(True, index=table.index)
    for k, v in where.items():
        m &= table[k] == v
    out = table[m]
    if out.empty:
        near = {k: sorted(map(str, table[k].dropna().unique()))[:12] for k in where}
        raise PickError(f"{what}: no row with {describe(where)}; the table has {near}")
    return out


def one(table: pd.DataFrame, what: str, **where) -> pd.Series:
    """The single row of `table` with `where`; PickError when there is none or more than one."""
    out = rows(table, what, **where)
    if len(out) != 1:
        raise PickError(f"{what}: {len(out)} rows with {describe(where)}, expected one")
    return out.iloc[0]
