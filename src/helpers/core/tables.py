"""Tables for readers: every table the book shows goes through `show` (one look, like plotting).

    from helpers.core import tables
    tables.show(df, units={"time": "us", "size": "bytes"}, digits={"time": 1})
    tables.show(long_df, fold_after=8, summary="27 recorded runs; the best at 64 requests")

What a reader gets, whatever the DataFrame looked like:

- no index column, unless the index means something (a named index, or labels that are not integer
  row counters): it becomes the first column(s);
- units in the headers: `units={"time": "us"}` makes the header `time (us)`; a column named with a unit
  suffix (`time_us`, `beta_GBps`, `size_bytes`, `mem_GiB`, ...) gets the same treatment without being
  told; the unit `"bytes"` writes each value in B/KiB/MiB/GiB (2^10) instead, the unit `"%"` writes `12.5 %`;
- numbers rounded per column: `digits` (one int for every column, or a dict per column), otherwise
  three significant figures for the column's typical value (a value that would round to zero keeps two
  significant figures: `3.1e-09`, not `0.0000`);
- missing values blank (no `<NA>`, `nan`, `None`);
- long tables folded: with more than `fold_after` rows the table sits in a `<details>` block whose
  always-visible line is `summary` (a sentence the chapter writes; a default names the rows and columns);
- wide tables scroll within the page (the `book-table` CSS in `_static/custom.css`).

The HTML is plain (a `<details>`, a `<table>`) so that it works in the static site with no script; the
text form (what `print` or a terminal shows) is the same table as aligned text.
"""
from __future__ import annotations

import html
import math
import numbers
import re
from typing import Mapping

import pandas as pd

#: column-name suffixes that carry a unit, and the unit they mean (lowercase match on the last `_part`)
SUFFIX_UNITS = {
    "us": "us", "ms": "ms", "s": "s", "ns": "ns",
    "gbps": "GB/s", "mbps": "MB/s", "gb/s": "GB/s",
    "bytes": "bytes", "b": "bytes",
    "kib": "KiB", "mib": "MiB", "gib": "GiB",
    "pct": "%", "percent": "%",
    "tok/s": "tokens/s", "toks": "tokens/s",
    "w": "W", "mhz": "MHz", "c": "°C",
}
#: how many rows a table shows unfolded when the caller does not say
FOLD_AFTER = 15

_UNIT_IN_NAME = re.compile(r"\(([^()]*)\)\s*$")
_BINARY = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _split_unit(name: str) -> tuple[str, str | None]:
    """`time_us` -> ("time", "us"); `beta_GBps` -> ("beta", "GB/s"); `time (us)` -> ("time", "us")."""
    m = _UNIT_IN_NAME.search(name)
    if m:
        return name[:m.start()].rstrip(), m.group(1)
    base, sep, suffix = name.rpartition("_")
    if sep and base and suffix.lower() in SUFFIX_UNITS:
        return base, SUFFIX_UNITS[suffix.lower()]
    return name, None


def human_bytes(n) -> str:
    """4096 -> '4 KiB', 1536 -> '1.5 KiB', 100 -> '100 B' (binary prefixes, 2^10)."""
    if _missing(n):
        return ""
    n = float(n)
    for unit, scale in _BINARY:
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v.is_integer() or abs(v) >= 100 else f"{v:.3g} {unit}"
    return f"{n:.0f} B"


def _missing(v) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def auto_digits(values) -> int:
    """Decimals that give the column's typical (median absolute, non-zero) value three significant
    figures: 1234.5 -> 0, 12.345 -> 1, 1.2345 -> 2, 0.012345 -> 4 (at most 4, at least 0)."""
    xs = [abs(float(v)) for v in values if not _missing(v) and isinstance(v, numbers.Real)
          and not isinstance(v, bool) and math.isfinite(float(v)) and float(v) != 0]
    if not xs:
        return 0
    if all(float(x).is_integer() for x in xs):
        return 0
    xs.sort()
    typical = xs[len(xs) // 2]
    return max(0, min(4, 2 - math.floor(math.log10(typical))))


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _fmt_number(v, digits: int) -> str:
    if float(v).is_integer() and digits == 0:
        return f"{int(v)}"
    if not math.isfinite(float(v)):
        return str(v)
    return f"{float(v):.{digits}f}"


def _too_small(v, digits: int) -> bool:
    """A non-zero value that `digits` decimals would show as zero."""
    x = abs(float(v))
    return 0 < x < 0.5 * 10 ** (-digits)


def _fmt_small(v) -> str:
    return f"{float(v):.2g}"


def _meaningful_index(df: pd.DataFrame) -> bool:
    """An index worth showing: named, several levels, or labels that are not integers. Unnamed integer
    labels are row counters (0..n-1, or what is left of them after filtering or sorting): dropped."""
    idx = df.index
    if idx.nlevels > 1 or any(n is not None for n in idx.names):
        return True
    return not pd.api.types.is_integer_dtype(idx.dtype)


class Table:
    """A table ready for a reader: `.html` (what the site shows), `.text` (a terminal's view), and
    `columns` / `rows` (the formatted strings, for tests)."""

    def __init__(self, columns: list[str], rows: list[list[str]], numeric: list[bool],
                 fold_after: int | None, summary: str | None, caption: str | None):
        self.columns, self.rows, self.numeric = columns, rows, numeric
        self.fold_after, self.summary, self.caption = fold_after, summary, caption

    @property
    def folded(self) -> bool:
        return self.fold_after is not None and len(self.rows) > self.fold_after

    #: a text column whose longest value is at most this long never wraps (a wide table scrolls instead)
    NOWRAP_CHARS = 24

    def _table_html(self) -> str:
        short = [max([len(r[i]) for r in self.rows] + [0]) <= self.NOWRAP_CHARS for i in range(len(self.columns))]

        def cell(tag, text, num, keep):
            classes = " ".join(c for c, on in (("num", num), ("nowrap", keep and not num)) if on)
            cls = f' class="{classes}"' if classes else ""
            return f"<{tag}{cls}>{html.escape(text)}</{tag}>"

        head = "".join(cell("th", c, n, k) for c, n, k in zip(self.columns, self.numeric, short))
        body = "\n".join("<tr>" + "".join(cell("td", v, n, k) for v, n, k in zip(r, self.numeric, short))
                         + "</tr>" for r in self.rows)
        cap = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return (f'<div class="book-table-scroll"><table class="book-table">{cap}'
                f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>")

    @property
    def html(self) -> str:
        inner = self._table_html()
        if self.folded:
            cols = [c for c in self.columns if c]
            summary = self.summary or (f"A table of {len(self.rows)} rows: " + ", ".join(cols[:4])
                                       + (", ..." if len(cols) > 4 else ""))
            inner = (f'<details class="book-table-fold"><summary>{html.escape(summary)} '
                     f'<span class="book-table-count">(show all {len(self.rows)} rows)</span></summary>'
                     f"{inner}</details>")
        elif self.summary:
            inner = f'<p class="book-table-summary">{html.escape(self.summary)}</p>{inner}'
        return f'<div class="book-table-wrap">{inner}</div>'

    @property
    def text(self) -> str:
        widths = [max([len(c)] + [len(r[i]) for r in self.rows]) for i, c in enumerate(self.columns)]

        def line(vals):
            return "  ".join(v.rjust(w) if n else v.ljust(w)
                             for v, w, n in zip(vals, widths, self.numeric)).rstrip()

        out = ([self.summary] if self.summary else []) + [line(self.columns)]
        out += [line(r) for r in self.rows]
        return "\n".join(out)

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text


def table(df: pd.DataFrame, units: Mapping[str, str] | None = None,
          digits: int | Mapping[str, int] | None = None, fold_after: int | None = FOLD_AFTER,
          summary: str | None = None, index: bool | None = None, caption: str | None = None,
          rename: Mapping[str, str] | None = None, drop_empty: bool = True) -> Table:
    """Format `df` for a reader (see the module's docstring) and return the Table; `show` displays it.

    units: column -> unit ("us", "GB/s", "bytes", "%", ...), added to the header as `name (unit)`.
    digits: decimals for every numeric column (int) or per column (dict); others get `auto_digits`.
    fold_after: fold a table with more rows than this behind a toggle (None: never fold).
    summary: the line a reader sees (above the table, or as the fold's visible line).
    index: show the index as leading column(s): True, False, or None (only when it means something).
    rename: column -> header text, applied before the unit is added.
    drop_empty: leave out a column with no value in any row (a blank column tells a reader nothing)."""
    if not isinstance(df, pd.DataFrame):
        if isinstance(df, pd.Series):
            df = df.to_frame()
        else:
            raise TypeError(f"tables.table: expected a pandas DataFrame or Series, got {type(df).__name__}")
    units, rename = dict(units or {}), dict(rename or {})
    unknown = (set(units) | set(rename) | (set(digits) if isinstance(digits, Mapping) else set())) - {
        str(c) for c in df.columns} - {str(n) for n in df.index.names if n is not None}
    if unknown:
        raise KeyError(f"tables.table: units/digits/rename name column(s) {sorted(unknown)} that the table "
                       f"does not have; its columns: {[str(c) for c in df.columns]}")
    show_index = _meaningful_index(df) if index is None else index
    frame = df.copy()
    if isinstance(frame.columns, pd.MultiIndex):
        frame.columns = [" ".join(str(p) for p in c if str(p) != "").strip() for c in frame.columns]
    if show_index:
        levels = [frame.index.get_level_values(i) for i in range(frame.index.nlevels)]
        names = [str(n) if n is not None else "" for n in frame.index.names]
    else:
        levels, names = [], []
    names += [str(c) for c in frame.columns]
    series = levels + [frame.iloc[:, i] for i in range(frame.shape[1])]

    headers, cols, numeric = [], [], []
    for name, values in zip(names, series):
        values = list(values)
        if drop_empty and values and all(_missing(v) or (isinstance(v, str) and not v.strip()) for v in values):
            continue
        base, unit = (name, units[name]) if name in units else _split_unit(name)
        base = rename.get(name, base)
        is_num = bool(values) and all(_is_number(v) or _missing(v) for v in values) and any(
            _is_number(v) and not _missing(v) for v in values)
        if unit == "bytes" and is_num:
            formatted = [human_bytes(v) for v in values]
            header = base
        elif unit == "%" and is_num:
            d = digits.get(name) if isinstance(digits, Mapping) else digits
            d = auto_digits(values) if d is None else d
            formatted = ["" if _missing(v) else f"{_fmt_number(v, d)} %" for v in values]
            header = base
        elif is_num:
            d = digits.get(name) if isinstance(digits, Mapping) else digits
            whole = all(isinstance(v, numbers.Integral) for v in values if not _missing(v))
            auto = d is None and not whole
            d = 0 if whole else auto_digits(values) if d is None else d
            formatted = ["" if _missing(v) else _fmt_small(v) if auto and _too_small(v, d) else _fmt_number(v, d)
                         for v in values]
            header = f"{base} ({unit})" if unit else base
        else:
            formatted = ["" if _missing(v) else _text(v) for v in values]
            header = f"{base} ({unit})" if unit else base
        headers.append(header)
        cols.append(formatted)
        numeric.append(is_num)
    rows = [list(r) for r in zip(*cols)] if cols else []
    return Table(headers, rows, numeric, fold_after, summary, caption)


def _text(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def show(df: pd.DataFrame, **kw) -> None:
    """Display `df` as a reader's table (arguments as `table`). Works anywhere in a cell and returns
    nothing, so a cell that ends with it shows the table once. Anything that is not a DataFrame or a
    Series (a Markdown object, a dict) is displayed as it is."""
    from IPython.display import display

    if df is None:  # as a cell ending in an expression that returns None shows nothing
        return
    if not isinstance(df, (pd.DataFrame, pd.Series)):
        display(df)
        return
    display(table(df, **kw))
