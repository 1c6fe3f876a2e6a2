"""Tables for readers: every table the book shows goes through `show` (one look, like plotting).

    from helpers.core import tables
    tables.show(df, units={"time": "us", "size": "bytes"}, digits={"time": 1})
    tables.show(long_df, fold_after=8, summary="27 recorded runs; the best at 64 requests")

What a reader gets, whatever the DataFrame looked like:

- no index column, unless the index means something (a named index, or labels that are not integer
  row counters): it becomes the first column(s);
- human headers with units: snake_case names become words (`tok_s_per_stream` -> `tokens/s per stream`),
  `units={"time": "us"}` makes the header `time (µs)`; a column named with a unit suffix (`time_us`,
  `beta_GBps`, `size_bytes`, `mem_GiB`, ...) gets the same treatment without being told; the unit `"bytes"`
  writes each value in B/KiB/MiB/GiB (2^10) instead, the unit `"%"` writes `12.5 %`; microseconds are
  written µs and tokens per second tokens/s everywhere (headers and text cells: `us` and `tok/s` are not);
- shares as percentages: a numeric column whose name says `share` or `fraction` (a word of its snake_case
  name) and whose values are fractions is written `12.5 %` (`pct`/`percent` columns are percentages already);
- booleans as `yes`/`no`; a recorded outcome whose text is `nan` as `NaN`;
- numbers rounded per column: `digits` (one int for every column, or a dict per column), otherwise
  three significant figures for the column's typical value (a value that would round to zero keeps two
  significant figures: `3.1e-09`, not `0.0000`);
- missing values (and empty text) written `n/a`, with a legend under the table (no `<NA>`, `nan`, `None`, no blank
  cell: the browser check fails on one); text is never cut short;
- a `source` column's ids link to the source's `url` in data/sources.yaml (`recorded.source_url`);
- long tables folded: with more than `fold_after` rows the table sits in a `<details>` block whose
  always-visible line is `summary` (a sentence the chapter writes; a default names the rows and columns);
- at most `MAX_COLUMNS` (7) columns in one table: a wider one is shown as stacked tables, each repeating
  the key column(s) (the meaningful index, else the leading text columns, one to three of them;
  `keys=` names others) beside the rest; long text breaks anywhere in its cell (the `book-table` CSS in `_static/custom.css`), so a
  table fits a 390 px phone where its content can.

The HTML is plain (a `<details>`, a `<table>`) so that it works in the static site with no script; the
text form (what `print` or a terminal shows) is the same table as aligned text.
"""
from __future__ import annotations

import html
import math
import numbers
import re
from typing import Mapping

import numpy as np
import pandas as pd

from helpers.core.pick import PickError

#: column-name suffixes that carry a unit, and the unit they mean (lowercase match on the last `_part`)
SUFFIX_UNITS = {
    "us": "us", "ms": "ms", "s": "s", "ns": "ns",
    "gbps": "GB/s", "mbps": "MB/s", "gb/s": "GB/s", "gb": "GB", "mb": "MB",
    "bytes": "bytes", "b": "bytes",
    "kib": "KiB", "mib": "MiB", "gib": "GiB",
    "pct": "%", "percent": "%",
    "tok/s": "tokens/s", "toks": "tokens/s", "tokps": "tokens/s",
    "w": "W", "mhz": "MHz", "c": "°C",
}
#: units that may stand inside a name, before qualifiers (`time_us_p10` -> "time p10 (µs)")
_INNER_UNITS = {"us", "ms", "ns", "gbps", "mbps", "bytes", "kib", "mib", "gib", "pct"}
_QUALIFIER = re.compile(r"^(p\d+|\d+|min|max|mean|median|std|low|high|mid|lo|hi|iqr)$")
#: how many rows a table shows unfolded when the caller does not say
FOLD_AFTER = 15
#: the most columns one table shows: a wider DataFrame is stacked (see the module's docstring)
MAX_COLUMNS = 7
#: words of a column name that make it a share (a fraction written as %), and names that are exempt
#: (a server flag's value, such as `mem_fraction_static` 0.85, is shown as the flag takes it)
SHARE_WORDS = {"share", "fraction", "frac"}
SHARE_EXEMPT = re.compile(r"^mem_fraction|fraction_static|cuda_graphs")
#: how a unit is written for a reader (headers and text cells)
UNIT_WORDS = {"us": "µs", "tok/s": "tokens/s", "toks": "tokens/s", "GBps": "GB/s", "MBps": "MB/s"}
#: snake_case words written out in headers
HEADER_WORDS = {"toks": "tokens/s", "gbps": "GB/s", "mbps": "MB/s", "pct": "%", "us": "µs", "avg": "mean",
                "num": "number of", "gpu": "GPU", "gpus": "GPUs", "tp": "TP", "ep": "EP", "kv": "KV", "moe": "MoE",
                "cpu": "CPU", "vm": "VM", "p2p": "P2P", "nccl": "NCCL", "aic": "AIC", "fp8": "FP8",
                "bf16": "BF16", "fp4": "FP4", "nvfp4": "NVFP4", "rel": "relative", "l2": "L2", "err": "error"}

_UNIT_IN_NAME = re.compile(r"\(([^()]*)\)\s*$")
_BINARY = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _split_unit(name: str) -> tuple[str, str | None]:
    """`time_us` -> ("time", "us"); `beta_GBps` -> ("beta", "GB/s"); `time (us)` -> ("time", "us");
    `ceiling_tok_s` -> ("ceiling", "tokens/s") (never "tok (s)"); `time_us_p10` -> ("time_p10", "us")."""
    m = _UNIT_IN_NAME.search(name)
    if m:
        return name[:m.start()].rstrip(), m.group(1)
    if name == "tok_s" or name.endswith("_tok_s"):
        return name[: -len("tok_s")].rstrip("_"), "tokens/s"
    if "_tok_s_" in f"_{name}_":
        return name, None  # tokens/s inside the name (`tok_s_per_stream`): words, no unit suffix
    base, sep, suffix = name.rpartition("_")
    if sep and base and suffix == "B":  # `params_B`: billions (of parameters), never bytes
        return base, "billions"
    if sep and base and suffix.lower() in SUFFIX_UNITS:
        return base, SUFFIX_UNITS[suffix.lower()]
    parts = name.split("_")
    for i in range(len(parts) - 2, 0, -1):  # a unit before qualifiers only
        if parts[i].lower() in _INNER_UNITS and all(_QUALIFIER.match(q.lower()) for q in parts[i + 1:]):
            return "_".join(parts[:i] + parts[i + 1:]), SUFFIX_UNITS[parts[i].lower()]
    return name, None


def unit_word(unit: str | None) -> str | None:
    """A unit as the book writes it: 'us' -> 'µs', 'tok/s' -> 'tokens/s'; others as they are."""
    if unit is None:
        return None
    return UNIT_WORDS.get(unit, re.sub(r"\btok/s\b", "tokens/s", re.sub(r"(?<![\w/])us\b", "µs", unit)))


def human_name(name: str) -> str:
    """A column name in words: `tok_s_per_stream` -> 'tokens/s per stream', `memory_total` -> 'memory
    total', `n_gpus` -> 'number of GPUs', `bf16` -> 'BF16'. Words with spaces are kept as they are."""
    if "_" not in name:
        return name if name.lower() in ("n", "num") or " " in name else HEADER_WORDS.get(name.lower(), name)
    parts = [p for p in name.split("_") if p != ""]
    out, i = [], 0
    while i < len(parts):
        p = parts[i]
        if p.lower() == "tok" and i + 1 < len(parts) and parts[i + 1].lower() == "s":
            out.append("tokens/s")
            i += 2
            continue
        if p.lower() == "n" and i == 0 and len(parts) > 1:
            out.append("number of")
        else:
            out.append(HEADER_WORDS.get(p.lower(), p))
        i += 1
    return " ".join(out)


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


#: how a table writes a missing value (and what its legend says of it)
MISSING = "n/a"
MISSING_LEGEND = "n/a: no value (not measured, not priced or not applicable here)"


def _missing(v) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    if isinstance(v, str):
        return not v.strip()
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def auto_digits(values) -> int:
    """Decimals that give the column's typical (median absolute, non-zero) value three significant
    figures: 1234.5 -> 0, 12.345 -> 1, 1.2345 -> 2, 0.012345 -> 4 (at most 4, at least 0)."""
    xs = [abs(float(v)) for v in values if not _missing(v) and isinstance(v, numbers.Real)
          and not _is_bool(v) and math.isfinite(float(v)) and float(v) != 0]
    if not xs:
        return 0
    if all(float(x).is_integer() for x in xs):
        return 0
    xs.sort()
    typical = xs[len(xs) // 2]
    return max(0, min(4, 2 - math.floor(math.log10(typical))))


def _is_bool(v) -> bool:
    return isinstance(v, (bool, np.bool_))


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not _is_bool(v)


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


def _is_share(name: str, values) -> bool:
    """A column whose name says it is a share or fraction (a word of its snake_case name) and whose
    values are fractions (|x| <= 20, so an already-percent column is left alone)."""
    words = {w.lower() for w in re.split(r"[_\s]+", name)}
    if not words & SHARE_WORDS or SHARE_EXEMPT.search(name):
        return False
    xs = [abs(float(v)) for v in values if _is_number(v) and not _missing(v) and math.isfinite(float(v))]
    return bool(xs) and max(xs) <= 20


def _meaningful_index(df: pd.DataFrame) -> bool:
    """An index worth showing: named, several levels, or labels that are not integers. Unnamed integer
    labels are row counters (0..n-1, or what is left of them after filtering or sorting): dropped."""
    idx = df.index
    if idx.nlevels > 1 or any(n is not None for n in idx.names):
        return True
    return not pd.api.types.is_integer_dtype(idx.dtype)


def _source_links(values) -> dict[str, str]:
    """id -> url for the ids of a `source` column that data/sources.yaml gives a `url`."""
    try:
        from helpers.core.recorded import source_url
    except Exception:  # noqa: BLE001 - a table shows without links rather than not at all
        return {}
    out = {}
    for v in values:
        if isinstance(v, str):
            for token in re.split(r"[,;\s]+", v):
                if token and token not in out:
                    try:
                        url = source_url(token)
                    except Exception:  # noqa: BLE001 - no sources file, an unreadable one
                        url = None
                    if url:
                        out[token] = url
    return out


class Table:
    """A table ready for a reader: `.html` (what the site shows), `.text` (a terminal's view), and
    `columns` / `rows` (the formatted strings, for tests); `parts` (column positions per stacked table)."""

    def __init__(self, columns: list[str], rows: list[list[str]], numeric: list[bool],
                 fold_after: int | None, summary: str | None, caption: str | None,
                 keys: int = 1, links: list[dict[str, str]] | None = None, max_columns: int = MAX_COLUMNS):
        self.columns, self.rows, self.numeric = columns, rows, numeric
        self.fold_after, self.summary, self.caption = fold_after, summary, caption
        self.keys = max(0, min(keys, len(columns)))
        self.links = links or [{} for _ in columns]
        self.max_columns = max_columns

    @property
    def folded(self) -> bool:
        return self.fold_after is not None and len(self.rows) > self.fold_after

    @property
    def parts(self) -> list[list[int]]:
        """Column positions of each stacked table: all of them when they fit in `max_columns`, else the key
        column(s) and at most `max_columns - keys` others per table, in balanced groups."""
        n = len(self.columns)
        if n <= self.max_columns:
            return [list(range(n))]
        keys = list(range(min(self.keys, self.max_columns - 1)))
        others = list(range(len(keys), n))
        room = self.max_columns - len(keys)
        k = math.ceil(len(others) / room)
        size = math.ceil(len(others) / k)
        return [keys + others[i:i + size] for i in range(0, len(others), size)]

    #: a text column whose longest value is at most this long never wraps on a wide screen (on a phone
    #: it may: _static/custom.css)
    NOWRAP_CHARS = 24
    #: a text column with a value longer than this (a reason, a note) keeps a readable width (class `long`)
    LONG_CHARS = 60

    def _cell_text(self, i: int, text: str) -> str:
        links = self.links[i]
        if not links or not text:
            return _code_spans(html.escape(text))
        return "".join(f'<a href="{html.escape(links[t], quote=True)}">{html.escape(t)}</a>' if t in links
                       else html.escape(t) for t in re.split(r"([,;\s]+)", text))

    def _part_html(self, cols: list[int], caption: str | None) -> str:
        longest = {i: max([len(r[i]) for r in self.rows] + [0]) for i in cols}

        def cell(tag, i, text):
            num, keep, long = self.numeric[i], longest[i] <= self.NOWRAP_CHARS, longest[i] > self.LONG_CHARS
            classes = " ".join(c for c, on in (("num", num), ("nowrap", keep and not num),
                                               ("long", long and not num)) if on)
            cls = f' class="{classes}"' if classes else ""
            # a header may break after a slash between words ("total/output"), never inside "tokens/s"
            inner = (re.sub(r"(?<=\w{4})/(?=\w{4})", "/<wbr>", html.escape(text)) if tag == "th"
                     else self._cell_text(i, text))
            return f"<{tag}{cls}>{inner}</{tag}>"

        head = "".join(cell("th", i, self.columns[i]) for i in cols)
        body = "\n".join("<tr>" + "".join(cell("td", i, r[i]) for i in cols) + "</tr>" for r in self.rows)
        cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
        return (f'<div class="book-table-scroll"><table class="book-table">{cap}'
                f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>")

    def _table_html(self) -> str:
        parts = self.parts
        if len(parts) == 1:
            return self._part_html(parts[0], self.caption)
        n = len(parts)
        return "\n".join(self._part_html(cols, (f"{self.caption} " if self.caption and j == 0 else "")
                                         + f"({j + 1} of {n})") for j, cols in enumerate(parts))

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
        if any(c == MISSING for r in self.rows for c in r):
            inner += f'<p class="book-table-legend">{html.escape(MISSING_LEGEND)}</p>'
        return f'<div class="book-table-wrap">{inner}</div>'

    @property
    def text(self) -> str:
        widths = [max([len(c)] + [len(r[i]) for r in self.rows]) for i, c in enumerate(self.columns)]

        def line(vals, cols):
            return "  ".join(vals[i].rjust(widths[i]) if self.numeric[i] else vals[i].ljust(widths[i])
                             for i in cols).rstrip()

        out = [self.summary] if self.summary else []
        for j, cols in enumerate(self.parts):
            if j:
                out.append("")
            out += [line(self.columns, cols)] + [line(r, cols) for r in self.rows]
        return "\n".join(out)

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text


def table(df: pd.DataFrame, units: Mapping[str, str] | None = None,
          digits: int | Mapping[str, int] | None = None, fold_after: int | None = FOLD_AFTER,
          summary: str | None = None, index: bool | None = None, caption: str | None = None,
          rename: Mapping[str, str] | None = None, drop_empty: bool = True,
          keys: list[str] | None = None, max_columns: int = MAX_COLUMNS) -> Table:
    """Format `df` for a reader (see the module's docstring) and return the Table; `show` displays it.

    units: column -> unit ("us", "GB/s", "bytes", "%", ...), added to the header as `name (unit)`.
    digits: decimals for every numeric column (int) or per column (dict); others get `auto_digits`.
    fold_after: fold a table with more rows than this behind a toggle (None: never fold).
    summary: the line a reader sees (above the table, or as the fold's visible line).
    index: show the index as leading column(s): True, False, or None (only when it means something).
    rename: column -> header text, applied before the unit is added (kept as written: not put into words).
    drop_empty: leave out a column with no value in any row (a blank column tells a reader nothing).
    keys: the column(s) every stacked part of a wide table repeats, moved to the front (default: the
    shown index, else the leading text columns, one to three).
    max_columns: the most columns one stacked part shows (default MAX_COLUMNS, 7)."""
    if not isinstance(df, pd.DataFrame):
        if isinstance(df, pd.Series):
            df = df.to_frame()
        else:
            raise TypeError(f"tables.table: expected a pandas DataFrame or Series, got {type(df).__name__}")
    units, rename = dict(units or {}), dict(rename or {})
    keys = [str(k) for k in (keys or [])]
    unknown = (set(units) | set(rename) | set(keys) | (set(digits) if isinstance(digits, Mapping) else set())) - {
        str(c) for c in df.columns} - {str(n) for n in df.index.names if n is not None}
    if unknown:
        raise KeyError(f"tables.table: units/digits/rename/keys name column(s) {sorted(unknown)} that the table "
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
    n_index = len(names)
    names += [str(c) for c in frame.columns]
    series = levels + [frame.iloc[:, i] for i in range(frame.shape[1])]
    if keys:  # the named key columns first, in the order given
        order = [names.index(k) for k in keys] + [i for i, n in enumerate(names) if n not in keys]
        names, series = [names[i] for i in order], [series[i] for i in order]

    headers, cols, numeric, links, kept = [], [], [], [], []
    for name, values in zip(names, series):
        values = list(values)
        if drop_empty and values and all(_missing(v) or (isinstance(v, str) and not v.strip()) for v in values):
            continue
        header, formatted, is_num = _format_column(name, values, units, rename, digits)
        headers.append(_TOK_S.sub("tokens/s", re.sub(r"(?<![\w/])us\b", "µs", header)))  # a caller's rename too
        cols.append(formatted)
        numeric.append(is_num)
        links.append(_source_links(values) if name.lower() in ("source", "sources") and not is_num else {})
        kept.append(name)
    rows = [list(r) for r in zip(*cols)] if cols else []
    if keys:
        n_keys = sum(1 for k in keys if k in kept)
    elif show_index and n_index:
        n_keys = sum(1 for n in names[:n_index] if n in kept)
    else:  # the leading text columns (what a row is about: op, backend, ...), one to three of them
        n_keys = next((i for i, num in enumerate(numeric) if num), len(numeric))
        n_keys = min(3, max(1, n_keys))
    return Table(headers, rows, numeric, fold_after, summary, caption, keys=max(1, n_keys), links=links,
                 max_columns=max_columns)


def _format_column(name: str, values: list, units: dict, rename: dict, digits) -> tuple[str, list[str], bool]:
    """One column as a reader sees it: (header with its unit, formatted cells, whether it is numeric)."""
    base, unit = _split_unit(name)
    if name in units:  # the caller's unit; a suffix saying the same unit is dropped from the words
        base, unit = (base if unit and unit.lower() == units[name].lower() else name), units[name]
    base = rename[name] if name in rename else human_name(base)
    is_num = bool(values) and all(_is_number(v) or _missing(v) for v in values) and any(
        _is_number(v) and not _missing(v) for v in values)
    d = digits.get(name) if isinstance(digits, Mapping) else digits
    if unit is None and is_num and name not in units and _is_share(name, values):
        values, unit = [v if _missing(v) else 100 * float(v) for v in values], "%"
    if unit == "bytes" and is_num:
        formatted = [human_bytes(v) for v in values]
        header = base
    elif unit == "%" and is_num:
        d = auto_digits(values) if d is None else d
        formatted = [MISSING if _missing(v) else f"{_fmt_small(v) if _too_small(v, d) else _fmt_number(v, d)} %"
                     for v in values]
        header = base
    elif is_num:
        whole = all(isinstance(v, numbers.Integral) for v in values if not _missing(v))
        auto = d is None and not whole
        d = 0 if whole else auto_digits(values) if d is None else d
        formatted = [MISSING if _missing(v) else _fmt_small(v) if auto and _too_small(v, d) else _fmt_number(v, d)
                     for v in values]
        header = _header(base, unit)
    else:
        formatted = [MISSING if _missing(v) else human_bytes(v) if unit == "bytes" and _is_number(v) else _text(v)
                     for v in values]
        written = unit == "bytes" and any(_is_number(v) and not _missing(v) for v in values)
        header = base if written else _header(base, unit)
    return header, formatted, is_num


#: a Markdown code span (`a command`, `--a-flag`): a cell shows it as code, a plain-text glue as its text
CODE_SPAN = re.compile(r"`([^`\n]+)`")


def _code_spans(escaped: str) -> str:
    """Text in backticks inside a cell (a command, a flag) as code, the way MyST shows it in prose."""
    return CODE_SPAN.sub(r"<code>\1</code>", escaped)


class ColumnError(PickError, KeyError):
    """A table lacks a column a page view names (`view`); the message names it and the columns there are."""

    def __str__(self) -> str:   # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def view(df: pd.DataFrame, columns: Mapping[str, str], percent=(), what: str = "table") -> pd.DataFrame:
    """The page's view of `df`: `columns`' keys in that order under their values as headers, the columns
    named in `percent` (fractions) as percent. A column `df` lacks raises ColumnError naming `what`, the
    column and the columns there are."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ColumnError(f"{what}: no column(s) {missing}; it has {list(df.columns)}")
    out = df[list(columns)].copy()
    for c in percent:
        if c in out.columns:
            out[c] = 100 * pd.to_numeric(out[c], errors="coerce")
    return out.rename(columns=dict(columns)).reset_index(drop=True)


def _header(base: str, unit: str | None) -> str:
    """`base (unit)` with the unit in the book's words; the unit alone where the name was only a unit."""
    if not unit:
        return base
    return f"{base} ({unit_word(unit)})" if base.strip() else unit_word(unit)


_NUM_US = re.compile(r"(?<=\d)\s*us\b")
_TOK_S = re.compile(r"\btok/s\b")


def _text(v) -> str:
    """A text cell: booleans as yes/no, a number in a text column to three significant figures (whole
    numbers whole), a recorded 'nan' outcome as NaN, units written the book's way (µs, tokens/s)."""
    if _is_bool(v):
        return "yes" if v else "no"
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, numbers.Real):
        x = float(v)
        if not math.isfinite(x):
            return "NaN" if math.isnan(x) else str(x)
        if x.is_integer():
            return f"{int(x)}"
        return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.3g}"
    s = str(v)
    if s.strip().lower() == "nan":
        return "NaN"
    if s.strip() == "us":
        return "µs"
    return _TOK_S.sub("tokens/s", _NUM_US.sub(" µs", s))

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


def show_all(shown) -> None:
    """Display each (DataFrame, keyword arguments of `show`) pair in order: the tables a chapter's section
    function returns for the page (helpers.chapters: a `Part`'s `shown`)."""
    for df, kw in shown:
        show(df, **kw)


class Folded:
    """Several tables behind one toggle (what only a sceptic opens): each a Table with its own one-line title,
    the toggle's visible line `summary`. `show(Folded(...))` displays it; its text form is the tables' text one
    after the other."""

    def __init__(self, summary: str, parts: list[tuple[str, "object"]]):
        if not parts:
            raise ValueError(f"a fold '{summary}' with no tables")
        self.summary, self.parts = summary, parts

    def _repr_html_(self) -> str:
        inner = "".join(f'<p class="book-table-summary">{html.escape(title)}</p>{t.html}' for title, t in self.parts)
        return (f'<div class="book-table-wrap"><details class="book-table-fold"><summary>{html.escape(self.summary)} '
                f'<span class="book-table-count">(show {len(self.parts)} tables)</span></summary>{inner}</details></div>')

    def __repr__(self) -> str:
        return "\n\n".join([self.summary] + [f"{title}\n{t.text}" for title, t in self.parts])


def folded(summary: str, parts: list[tuple[str, "object"]]) -> Folded:
    """One toggle over several tables: `parts` are (title, Table) pairs, in order."""
    return Folded(summary, parts)


def show_folded(summary: str, shown) -> None:
    """Display several tables behind one toggle whose visible line is `summary`: `shown` holds (DataFrame, keyword
    arguments of `show`) pairs, as `show_all` takes them, each shown whole under its own `summary` as its title;
    a None DataFrame is left out, and a single table keeps a fold of its own."""
    from IPython.display import display

    parts = []
    for df, kw in shown:
        if df is None:
            continue
        kw = dict(kw)
        title = kw.pop("summary", None)
        if not title:
            raise ValueError(f"tables.show_folded('{summary}'): every table needs a `summary` to title it")
        kw["fold_after"] = None
        parts.append((title, table(df, **kw)))
    if len(parts) == 1:
        title, t = parts[0]
        t.fold_after, t.summary = 0, title
        display(t)
    elif parts:
        display(Folded(summary, parts))

