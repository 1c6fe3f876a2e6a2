"""Every figure of the book, drawn one way: one style, lowercase unit-bearing axis labels, log axes
for size sweeps, no titles (captions come from myst-nb figure metadata).

Series labels say whose numbers they are ("recorded: original VM", "measured: this machine") so
that the two are never confused.

The palette: one colour per meaning across the book (`kind_color`), saturated, and never used for
anything else:

- recorded (the original investigation's numbers, and an observed step drawn over a breakdown): red #b2182b
- measured (by this run's code): blue #2166ac
- reference (public figures from other machines): green #4d9221
- model / derived / fit / prediction (including a kernel-launch floor): purple #7b3294
- anything else: grey #666666

Several series of one kind take `CYCLE`, which holds none of the other kinds' colours (measured blue
first, then orange, teal, brown, pink, grey, ...); the parts of a stacked breakdown take `PART_COLORS`,
light tints that no kind uses. Axes in log scale carry plain tick labels (3, 4, 6, 10, 20, 400: never
"3x10^0"); legends hold at most `legends.MAX_ENTRIES` (6) entries where the figure function groups its
series, and always stand outside the data (helpers.core.legends). A figure with nothing to draw says so
(`no_data`), and its alt text then starts "no data", which the site's browser check reports.
"""
from __future__ import annotations

import math
from typing import Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogFormatter  # noqa: E402

# the legend conventions live in helpers.core.legends; plotting.<name> keeps working for each
from helpers.core.legends import (MAX_ENTRIES, figure_legend, keep_legends_off_data,  # noqa: E402,F401
                                  legend_outside, legend_overlaps_data)

#: colours by whose number it is: recorded (the original investigation), measured (this run),
#: reference (public figures from other machines), model (a prediction, a fit, a derived figure)
PALETTE = {
    "recorded": "#b2182b",
    "measured": "#2166ac",
    "reference": "#4d9221",
    "model": "#7b3294",
    "other": "#666666",
}
#: other words for the kinds (a table's `kind` column says "derived", a caption "fit")
KIND_ALIASES = {"derived": "model", "fit": "model", "prediction": "model", "predicted": "model",
                "assumed": "model", "published": "reference", "observed": "recorded"}
#: several series of one kind: no colour of another kind (no red, green or purple)
CYCLE = ["#2166ac", "#e08214", "#35978f", "#8c510a", "#de77ae", "#878787", "#92c5de", "#bf812d"]
#: the parts of a stacked breakdown: light tints no kind uses, so an observed (red) or model (purple)
#: line drawn over them reads as what it is
PART_COLORS = ["#92c5de", "#fdb863", "#80cdc1", "#dfc27d", "#f1b6da", "#bababa", "#c7eae5", "#fee0b6"]
#: readable names for internal series ids (experiments, runners, backends); chapters may add their own
#: (`plotting.SERIES_NAMES.update({...})`) before drawing; `series_name` falls back to words
SERIES_NAMES = {
    "first_baseline": "first baseline", "single_stream_test": "single-stream test",
    "sweep_256_256": "sweep, 256 in / 256 out tokens", "sweep_128_512": "sweep, 128 in / 512 out tokens",
    "summary_311": "status-report summary", "moe_runner_cutedsl": "CuteDSL runner test",
    "moe_runner_cutlass": "CUTLASS runner test", "server_log_decode_batch": "server-log decode batch",
    "flashinfer_cutlass": "FlashInfer CUTLASS", "flashinfer_cutedsl": "FlashInfer CuteDSL",
    "flashinfer_trtllm": "FlashInfer TRT-LLM", "triton": "Triton", "cutlass": "CUTLASS",
    "flashmla_kv": "FlashMLA KV", "flashmla_sparse": "FlashMLA sparse", "trtllm": "TRT-LLM",
    "256/256": "256 in / 256 out tokens", "128/512": "128 in / 512 out tokens", "unstated": "lengths not stated",
}


def series_name(key) -> str:
    """A series id as a reader reads it: SERIES_NAMES, else its words ('moe_runner_x' -> 'moe runner x')."""
    k = str(key)
    return SERIES_NAMES.get(k, k.replace("_", " "))


def plain_number(x: float) -> str:
    """A tick value as a plain number: 3, 0.5, 400, 20000; 1e6 and beyond (or below 1e-4) as 1e6."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    if 1e-4 <= abs(x) < 1e6:
        return f"{x:.6g}"
    m, e = f"{x:.0e}".split("e")
    return f"{m}e{int(e)}"


class PlainLogFormatter(LogFormatter):
    """matplotlib's log formatter (which ticks get a label) writing each label as a plain number."""

    def _num_to_string(self, x, vmin, vmax):
        return plain_number(x)


def plain_log_ticks(fig) -> int:
    """Give every log axis of `fig` still on matplotlib's default (scientific, '3x10^0') labels plain
    numbers; an axis with its own formatter (sizes in KiB, a FuncFormatter) keeps it. Returns how many
    axes changed. `figure_image` (so every glued figure) does this."""
    changed = 0
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            for get, put in ((axis.get_major_formatter, axis.set_major_formatter),
                             (axis.get_minor_formatter, axis.set_minor_formatter)):
                f = get()
                if isinstance(f, LogFormatter) and not isinstance(f, PlainLogFormatter):
                    put(PlainLogFormatter(base=f._base, labelOnlyBase=f.labelOnlyBase,
                                          minor_thresholds=f.minor_thresholds,
                                          linthresh=getattr(f, "_linthresh", None)))
                    changed += 1
    return changed


def style() -> None:
    """Apply the book's look to matplotlib (idempotent)."""
    plt.rcParams.update(
        {
            "figure.figsize": (6.4, 3.8),
            "figure.dpi": 110,
            "savefig.dpi": 110,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.prop_cycle": matplotlib.cycler(color=CYCLE),
            "font.size": 10,
            "legend.frameon": False,
            "legend.fontsize": 9,
        }
    )


def figure(ncols: int = 1, nrows: int = 1, width: float | None = None, height: float | None = None):
    """A new figure in the book's style; returns (fig, axes)."""
    style()
    w = width or 6.4 * min(ncols, 2) ** 0.8
    h = height or 3.8 * nrows
    fig, axes = plt.subplots(nrows, ncols, figsize=(w, h), squeeze=False, layout="constrained")
    plt.close(fig)  # shown through glue or an explicit display, never twice
    return fig, (axes[0, 0] if nrows == ncols == 1 else axes)


def _bytes_label(x: float, _pos=None) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= scale:
            v = x / scale
            return f"{v:.0f} {unit}" if v >= 10 or v.is_integer() else f"{v:.1f} {unit}"
    return f"{x:.0f} B"


#: At most this many size labels on an axis: a full sweep (4 B to 256 MiB, 26 powers of two) labelled every
#: eighth power still ran nine labels into each other ("32 KiB256 KiB2 MiB") on the collective and variant
#: figures, whose legend stands beside narrower axes (the two-GPU run's page)
SIZE_TICKS = 6


def size_axis(ax, axis: str = "x") -> None:
    """A log2 axis of message sizes labelled in B/KiB/MiB/GiB, at most SIZE_TICKS labels."""
    from matplotlib.ticker import LogLocator

    getattr(ax, f"set_{axis}scale")("log", base=2)
    getattr(ax, f"{axis}axis").set_major_locator(LogLocator(base=2, numticks=SIZE_TICKS))
    getattr(ax, f"{axis}axis").set_major_formatter(FuncFormatter(_bytes_label))


def size_sweep(ax, sizes: Iterable[float], values: Iterable[float], label: str, kind: str = "measured",
               lower=None, upper=None, marker: str = "o", **kw):
    """One series of a size sweep (x: bytes, log2), with an optional spread band."""
    sizes = list(sizes)
    color = kw.pop("color", None)
    line, = ax.plot(sizes, list(values), marker=marker, ms=3.5, label=label, color=color, **kw)
    if lower is not None and upper is not None:
        ax.fill_between(sizes, list(lower), list(upper), alpha=0.2, color=line.get_color(), lw=0)
    size_axis(ax)
    return line


def concurrency_axis(ax) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: f"{x:g}"))
    ax.set_xlabel("concurrency (requests in flight)")


def kind_color(kind: str) -> str:
    """The colour of a kind of number (the module's palette): 'recorded', 'measured', 'reference',
    'model', and their other words ('derived', 'fit', ...; 'recorded: original VM' reads as 'recorded')."""
    k = str(kind).split(":", 1)[0].strip().lower()
    k = KIND_ALIASES.get(k, k)
    return PALETTE.get(k, PALETTE["other"])


# ---- serving and machine figures

#: colours of the `nvidia-smi topo -p2p` legend codes in `p2p_matrix`
P2P_COLORS = {"OK": "#4d9221", "CNS": "#e08214", "GNS": "#e08214", "TNS": "#e08214", "NS": "#b2182b",
              "U": "#bababa", "X": "#ffffff"}


def p2p_matrix(ax, codes, label: str | None = None) -> None:
    """A GPU-pair P2P status matrix (rows, columns: GPU index) coloured by legend code, each cell
    labelled with its code. `codes` is an N x N list of strings ("OK", "NS", ..., "X" on the
    diagonal); `label` goes under the x axis (say whose matrix it is). An empty or None `codes`
    (no GPU pair) leaves the axes blank but for `label`, which should then say why."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    if not codes:  # nothing to draw: say why instead
        ax.axis("off")
        ax.text(0.5, 0.5, label or "no GPU pair", ha="center", va="center", transform=ax.transAxes)
        return
    keys = list(P2P_COLORS)
    n = len(codes)
    unknown = {c for row in codes for c in row} - set(keys)
    if unknown or any(len(row) != n for row in codes):
        raise ValueError(f"p2p_matrix: expected an {n} x {n} matrix of codes from {keys}; "
                         f"got rows of lengths {[len(r) for r in codes]} and codes {sorted(unknown) or 'ok'}")
    grid = [[keys.index(c) for c in row] for row in codes]
    ax.imshow(grid, cmap=ListedColormap([P2P_COLORS[k] for k in keys]), vmin=-0.5, vmax=len(keys) - 0.5)
    for i, row in enumerate(codes):
        for j, c in enumerate(row):
            ax.text(j, i, c, ha="center", va="center", fontsize=7 if n > 4 else 9,
                    color="white" if c in ("NS", "OK") else "black")
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.grid(False)
    ax.set_xlabel(f"peer GPU{' (' + label + ')' if label else ''}")
    ax.set_ylabel("GPU")
    present = [k for k in keys if k != "X" and any(k in row for row in codes)]
    ax.legend(handles=[Patch(color=P2P_COLORS[k], label=k) for k in present], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=8)


def outcome_matrix(rows, outcomes):
    """One marker per server configuration at its outcome. `rows`: (label, outcome, kind) with kind
    "recorded" or "measured"; `outcomes`: the outcome words in axis order (classify.OUTCOMES)."""
    rows = list(rows)
    unknown = sorted({o for _, o, _ in rows} - set(outcomes))
    if unknown:
        raise ValueError(f"outcome_matrix: outcome(s) {unknown} are not among {list(outcomes)}")
    fig, ax = figure(height=2.8 if len(rows) < 10 else 4.2)
    for i, (_, outcome, kind) in enumerate(rows):
        ax.plot([list(outcomes).index(outcome)], [i], "s", ms=9, color=kind_color(kind))
    ax.set_yticks(range(len(rows)), [f"{kind}: {label}" for label, _, kind in rows], fontsize=7)
    ax.set_xticks(range(len(outcomes)), list(outcomes), fontsize=8, rotation=20)
    ax.set_xlim(-0.5, len(outcomes) - 0.5)
    ax.invert_yaxis()
    ax.set_xlabel("outcome")
    return fig


SWEEP_MARKERS = {"256/256": "o", "128/512": "s", "unstated": "D"}


def serving_sweeps(rec, live, log_point: dict | None, per_stream: bool, live_label: str = "measured: this machine"):
    """Output throughput (or per-stream tokens/s: throughput / concurrency) against concurrency: recorded
    points by workload and experiment, stated ranges, the server-log point, and live sweeps by variant and
    workload (dashed). `rec` is helpers.chapters.baselines_tuning.recorded_points(); `live` a sweep table or None."""
    import pandas as pd

    fig, ax = figure()
    outp = rec[rec.metric == "output_throughput"]
    # one legend entry per workload (the marker), not per experiment: the recorded table names each point
    labelled: set[str] = set()
    for (wl, exp), g in outp.groupby(["workload", "experiment"], sort=False):
        g = g[g.value.notna()].drop_duplicates(["concurrency", "value"])
        if g.empty:
            continue
        y = g.value.astype(float) / (g.concurrency.astype(float) if per_stream else 1.0)
        label = f"recorded: {series_name(wl)}"
        ax.plot(g.concurrency.astype(float), y, marker=SWEEP_MARKERS.get(wl, "D"), ls="none",
                color=kind_color("recorded"), alpha=0.85, ms=5, label=None if label in labelled else label)
        labelled.add(label)
    ranges = outp[outp.value.isna() & outp.value_low.notna()]
    for r in ranges.itertuples():
        div = float(r.concurrency) if per_stream else 1.0
        ax.vlines(float(r.concurrency) * 1.04, float(r.value_low) / div, float(r.value_high) / div,
                  color=kind_color("recorded"), lw=3, alpha=0.4)
    if len(ranges):
        ax.plot([], [], color=kind_color("recorded"), lw=3, alpha=0.4, label="recorded: stated ranges at 64")
    if log_point:
        y = log_point["value"] / (log_point["concurrency"] if per_stream else 1.0)
        ax.plot([log_point["concurrency"]], [y], marker="*", ms=11, ls="none", color=kind_color("recorded"),
                label="recorded: one server-log decode batch")
    if live is not None and len(live):
        groups = list(live.groupby(["variant", "workload"], sort=False))
        room = MAX_ENTRIES - len(ax.get_legend_handles_labels()[1])
        for i, ((var, wl), g) in enumerate(groups):
            g = g.sort_values("concurrency")
            y = pd.to_numeric(g.output_throughput) / (g.concurrency.astype(float) if per_stream else 1.0)
            name = f"{series_name(var)} ({series_name(wl)})"
            if len(groups) <= room:
                label = f"{live_label}: {name}"
            else:  # too many for the legend: one entry for all, each line named at its end
                label = f"{live_label} (dashed; named at the line's end)" if i == 0 else None
            line, = ax.plot(g.concurrency.astype(float), y, marker=SWEEP_MARKERS.get(wl, "^"), ls="--", ms=4,
                            color=CYCLE[i % len(CYCLE)], label=label)
            if len(groups) > room and len(g):
                ax.annotate(name, (float(g.concurrency.iloc[-1]), float(y.iloc[-1])), xytext=(3, 0),
                            textcoords="offset points", fontsize=7, color=line.get_color(), va="center")
    concurrency_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("per-stream output (tokens/s per request)" if per_stream else "output throughput (tokens/s)")
    legend_outside(ax, "below" if len(ax.get_legend_handles_labels()[1]) > 3 else "right", ncols=2, fontsize=8)
    return fig


def runner_spread(rec_runners, spread, by: str = "runner"):
    """Recorded runner figures (points, and bars for stated ranges) and live runners' mean with the
    min-max of their repeats (helpers.chapters.moe_runners.repeat_spread), against concurrency."""
    import pandas as pd

    fig, ax = figure()
    for i, r in enumerate(rec_runners.itertuples()):
        c = float(r.concurrency) * (1 + 0.05 * i)
        if pd.notna(r.value):
            ax.plot([c], [float(r.value)], "o", color=kind_color("recorded"), ms=5)
        else:
            ax.vlines(c, float(r.value_low), float(r.value_high), color=kind_color("recorded"), lw=3, alpha=0.5)
        ax.annotate(f"recorded: {series_name(r.moe_runner)}", (c, float(r.value) if pd.notna(r.value) else float(r.value_high)),
                    fontsize=6, xytext=(3, 3), textcoords="offset points")
    if spread is not None and len(spread):
        for i, (name, g) in enumerate(spread.groupby(by, sort=False)):
            g = g.sort_values("concurrency")
            x = g.concurrency.astype(float) * (1 + 0.04 * i)
            line, = ax.plot(x, g["mean"], marker="o", ms=4, ls="--", color=CYCLE[i % len(CYCLE)],
                            label=f"measured: {series_name(name)} (mean, min-max of repeats)")
            ax.vlines(x, g["min"], g["max"], color=line.get_color(), lw=2, alpha=0.6)
    concurrency_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("output throughput (tokens/s)")
    if ax.get_legend_handles_labels()[0]:  # recorded runners are annotated, not in the legend
        legend_outside(ax, "below", ncols=1, fontsize=8)
    return fig


def ep_tp_volume(wide, tp_col: str, ep_col: str):
    """Bytes one GPU sends per MoE layer against the tokens in the batch: TP ring all-reduce and EP
    dispatch + combine (`wide`: index tokens, one column per layout; both derived)."""
    fig, ax = figure()
    ax.plot(wide.index, wide[tp_col], marker="o", ms=3.5, label=f"{tp_col} (ring), derived")
    ax.plot(wide.index, wide[ep_col], marker="s", ms=3.5, label=f"{ep_col} (dispatch + combine), derived")
    concurrency_axis(ax)
    ax.set_xlabel("tokens in the decode batch")
    size_axis(ax, "y")
    ax.set_ylabel("bytes sent per GPU per MoE layer")
    legend_outside(ax, "below", ncols=1, fontsize=8)
    return fig


def as_image(fig, dpi: int | None = None):
    """`fig` as an IPython PNG image, for glue: the book forces the Agg backend, so a bare Figure has
    no image/png display of its own and myst-nb's {glue:figure} would show only its text form."""
    import io

    from IPython.display import Image

    plain_log_ticks(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi or plt.rcParams["savefig.dpi"], bbox_inches="tight")
    return Image(data=buf.getvalue(), format="png")


# ---- interconnect figures
# The VM/P2P chapter's figures (helpers.interconnect draws none of its own). Tables come in as the
# interconnect helpers make them: copy sweeps (helpers.interconnect.copies), tidy collective sweeps and
# fidelity comparisons carrying their method columns (helpers.interconnect.method).

COPY_HARNESS_STYLE = {"eager": "-", "graph": "--", "queued": ":"}


def bytes_label(x: float) -> str:
    """A byte count as the size axes label it: '12 KiB', '16 MiB', '8 B'."""
    return _bytes_label(x)


def harness_figure(copy_sweep, recorded):
    """Per decode size: the recorded VM copy beside this machine's same-device (or CPU) copy per harness
    and, on a GPU machine, the copy through pinned host memory."""
    import numpy as np

    fig, ax = figure(width=7.0, height=3.8)
    x = np.arange(len(recorded))
    bars = [("GPU0 to GPU1, eager (recorded: original VM)", recorded["time_us"].to_numpy(), PALETTE["recorded"])]
    if copy_sweep is not None and len(copy_sweep):
        floor_path = "same_device" if (copy_sweep["path"] == "same_device").any() else "cpu_memcpy"
        for h, c in (("eager", PALETTE["measured"]), ("graph", "#92c5de"), ("queued", "#d1e5f0")):
            g = copy_sweep[(copy_sweep.path == floor_path) & (copy_sweep.harness == h)].set_index("size_bytes")
            if len(g):
                vals = [g["time_us"].get(s, np.nan) for s in recorded["size_bytes"]]
                name = "same GPU" if floor_path == "same_device" else "cpu memcpy"
                bars.append((f"{name}, {h} (measured: this machine)", np.array(vals), c))
        hb = copy_sweep[(copy_sweep.path == "host_bounce") & (copy_sweep.harness == "eager")].set_index("size_bytes")
        if len(hb):
            bars.append(("GPU to pinned host to GPU, eager (measured: this machine)",
                         np.array([hb["time_us"].get(s, np.nan) for s in recorded["size_bytes"]]), "#4d9221"))
    w = 0.8 / len(bars)
    for i, (lab, vals, c) in enumerate(bars):
        ax.bar(x + (i - (len(bars) - 1) / 2) * w, vals, w, label=lab, color=c)
    ax.set_xticks(x, [f"{int(t)} tok\n{s / 1024:g} KiB" for t, s in zip(recorded["tokens"], recorded["size_bytes"])])
    ax.set_yscale("log")
    ax.set_ylabel("time per copy (µs)")
    ax.set_xlabel("message size (tokens x hidden x 2 B)")
    legend_outside(ax, "below", ncols=2, fontsize=8)
    return fig


def _no_data(ax, statement: str) -> None:
    """Write `statement` in place of a plot and mark the figure as having no data (`no_data`)."""
    ax.text(0.5, 0.5, statement, ha="center", va="center", transform=ax.transAxes, wrap=True, fontsize=9)
    ax.set_axis_off()
    ax.book_no_data = statement
    ax.figure.book_no_data = statement


def no_data(fig) -> str | None:
    """Why `fig` shows no data (the statement a figure function wrote in place of a plot), or None when it
    draws something. A chapter that gets a statement shows it as a sentence instead of the figure; a
    figure drawn anyway gets alt text starting "no data" (`figure_image`), which the browser check reports.
    A figure whose panels hold no line, point, bar or image at all counts as having no data too."""
    if fig is None:
        return "no figure"
    said = getattr(fig, "book_no_data", None)
    if said:
        return said
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    drawn = any(any(len(line.get_xdata()) for line in ax.get_lines()) or ax.images or ax.patches
                or any(len(c.get_offsets()) or len(c.get_paths()) for c in ax.collections) for ax in panels)
    if drawn:
        return None
    words = " ".join(t.get_text() for ax in panels for t in ax.texts).strip()
    return words or "nothing drawn"


def _sweep_lines(ax, sweep, keys, label_of, decode_sizes) -> None:
    for i, (k, g) in enumerate(sweep.groupby(keys, sort=False)):
        k = k if isinstance(k, tuple) else (k,)
        g = g.sort_values("size_bytes")
        # more series than colours: the second round of colours is dashed, so no two lines look alike
        style = {"color": CYCLE[i % len(CYCLE)], "ls": "-" if i < len(CYCLE) else "--"}
        size_sweep(ax, g["size_bytes"], g["time_us"], label_of(k) + " (measured)", lower=g["time_us_p10"],
                   upper=g["time_us_p90"], **style)
    for s in decode_sizes:
        ax.axvline(s, color="#999999", lw=0.6, ls=":")
    ax.set_yscale("log")
    ax.set_xlabel("message size per rank (dotted: decode sizes)")
    ax.set_ylabel("time per collective (µs)")
    legend_outside(ax, "right" if len(ax.get_legend_handles_labels()[1]) <= MAX_ENTRIES else "below",
                   ncols=2, fontsize=8)


def collectives_figure(sweep, decode_sizes, method: str, statement: str = ""):
    """Collective time against size, one line per op, backend and world size, for the default setting
    timed by `method` (a method label; the sweep's method column); `statement` where nothing was measured."""
    fig, ax = figure(width=7.2, height=4.2)
    if sweep is None or not len(sweep):
        _no_data(ax, statement or "no collective measured on this machine")
        return fig

    def label(k):
        unit = ("GPU" if k[1] == "nccl" else "process") + ("" if k[2] == 1 else ("s" if k[1] == "nccl" else "es"))
        return f"{k[0].replace('_', '-')}, {k[1]}, {k[2]} {unit}"
    _sweep_lines(ax, sweep[(sweep.variant == "default") & (sweep.method == method)], ["op", "backend", "world_size"],
                 label, decode_sizes)
    return fig


def variants_figure(rows, decode_sizes, statement: str = ""):
    """All-reduce time against size, one line per NCCL variant (rows: suite.variant_rows of a sweep)."""
    fig, ax = figure(width=7.2, height=4.2)
    if rows is None or not len(rows):
        _no_data(ax, statement or "no NCCL variant measured on this machine")
        return fig
    _sweep_lines(ax, rows, ["variant"], lambda k: k[0] if k[0].startswith("default") else f"NCCL_{k[0]}", decode_sizes)
    return fig


def p2p_figure(recorded_codes, here_codes, here_label: str):
    """The original VM's P2P matrix (left) beside this machine's (right; `here_codes` None: only
    `here_label`, which says why there is none)."""
    fig, axes = figure(ncols=2, width=9.0, height=3.8)
    p2p_matrix(axes[0][0], recorded_codes, "recorded: original VM")
    p2p_matrix(axes[0][1], here_codes, here_label)
    return fig


# ---- diagnosis figures
# The decode-step chapter's and the diagnosis's figures, drawn from the tables helpers.chapters.decode_step and
# helpers.chapters.diagnosis make. Their legends stand beside the axes, never over the data.

def legend_beside(ax, fontsize: float = 8) -> None:
    """The axes' legend beside the data (at most MAX_ENTRIES entries), or below it in two columns when
    the figure has more series than that; never over the data, never in type smaller than 7.5 pt."""
    n = len([lab for lab in ax.get_legend_handles_labels()[1] if lab and not lab.startswith("_")])
    legend_outside(ax, "right" if n <= MAX_ENTRIES else "below", ncols=2, fontsize=max(7.5, fontsize))


def describe(fig, limit: int = 600) -> str:
    """Alt text for `fig`, from what it draws: per panel the axes (label, log scale) and the labelled
    series. Used when a chapter gives none (`{glue:figure}`'s `:alt:` wins over it)."""
    panels = [ax for ax in fig.axes if ax.get_visible() and (ax.has_data() or ax.texts)
              and ax.get_label() != "<colorbar>"]
    parts = []
    for i, ax in enumerate(panels, 1):
        if not ax.axison:  # a panel of text only
            words = " ".join(t.get_text() for t in ax.texts).strip()
            parts.append(f"panel {i}: {words}" if len(panels) > 1 else words)
            continue
        x, y = ax.get_xlabel() or "x", ax.get_ylabel() or "y"
        xs = " (log scale)" if ax.get_xscale() == "log" else ""
        ys = " (log scale)" if ax.get_yscale() == "log" else ""
        kind = "matrix" if ax.images else "chart"
        labels = [lab for lab in ax.get_legend_handles_labels()[1] if lab and not lab.startswith("_")]
        s = f"{kind} of {y}{ys} against {x}{xs}"
        if labels:
            s += "; series: " + ", ".join(labels[:8]) + (f" and {len(labels) - 8} more" if len(labels) > 8 else "")
        parts.append(f"panel {i}: {s}" if len(panels) > 1 else s)
    legends = [lab.get_text() for leg in fig.legends for lab in leg.get_texts()]
    if legends and not all(f"series: {lab}" in " ".join(parts) or lab in " ".join(parts) for lab in legends):
        parts.append("series: " + ", ".join(legends[:8]))
    text = ("Figure with %d panels. " % len(panels) if len(panels) > 1 else "Figure: ") + "; ".join(parts)
    empty = no_data(fig)
    if empty:  # the browser check reports an image whose alt says "no data"
        text = f"no data: {empty}"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def figure_image(fig, alt: str | None = None, dpi: int | None = None):
    """`fig` as a PNG image for glue (as `as_image`), legends moved off the data
    (`keep_legends_off_data`), carrying its alt text in the output's metadata
    (`alt`, default `describe(fig)`); the runbook's staging puts it on the page's `<img>` where the
    chapter's `{glue:figure}` gives no `:alt:` of its own."""
    from IPython.display import Image

    keep_legends_off_data(fig)
    img = as_image(fig, dpi=dpi)  # plain log ticks too
    text = alt or describe(fig)
    if no_data(fig) and "no data" not in text.lower():
        text = f"no data: {text}"
    return Image(data=img.data, format="png", alt=text)  # metadata {"image/png": {"alt"}}
