"""The decode step's figures (chapters 07_decode_step and 07_diagnosis), drawn in the book's one style
(helpers.core.plotting: its palette, legends outside the data, plain log ticks): time per step against
batch, a step stacked by component with the observed step over it, the datasheet model mapped onto the
observation, what-if lines, and the bands of the headline attribution (page 1)."""
from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.ticker import FuncFormatter

from helpers.core.plotting import (CYCLE, PART_COLORS, legend_beside, figure, figure_legend, kind_color,
                                   size_sweep)


def _batch_axis(ax) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: f"{x:g}"))
    ax.set_xlabel("sequences decoding together (batch)")


#: stacked parts take light tints, never a kind's colour: an observation (recorded red) or a model line
#: (purple) drawn over them stays what it is
_PART_COLORS = PART_COLORS


def step_time_figure(steps):
    """Time per decode step against batch, one line per context and mode (stepreport.steps' table):
    solid with CUDA graphs, dashed eager."""
    fig, ax = figure(width=8.0, height=3.8)
    for (ctx, mode), g in steps.groupby(["context", "mode"]):
        ax.plot(g["batch"], g["step_ms"], marker="o", ms=3, linestyle="-" if mode == "graph" else "--",
                label=f"{ctx} tokens, {'CUDA graphs' if mode == 'graph' else 'eager'}")
    _batch_axis(ax)
    ax.set_ylabel("time per decode step (ms)")
    legend_beside(ax)
    return fig


def stacked_step_figure(bars, observed=None, observed_label: str = ""):
    """A decode step by part, stacked per batch: `bars` has one row per batch (its index) and one column per
    part (its label), in ms; `observed` (batch -> ms, optional) is drawn as a bar-wide line per batch."""
    import numpy as np

    fig, ax = figure(width=8.0, height=3.8)
    x = np.arange(len(bars))
    bottom = np.zeros(len(bars))
    for col, c in zip(bars.columns, _PART_COLORS):
        ax.bar(x, bars[col].to_numpy(), bottom=bottom, color=c, label=col)
        bottom += bars[col].to_numpy()
    if observed is not None:
        for j, (b, ms) in enumerate(observed.items()):
            i = list(bars.index).index(b)
            ax.plot([i - 0.4, i + 0.4], [ms, ms], color=kind_color("recorded"), lw=2,
                    label=observed_label if j == 0 else None)
    ax.set_xticks(x, [str(b) for b in bars.index])
    ax.set_xlabel("sequences decoding together (batch)")
    ax.set_ylabel("time per decode step (ms)")
    legend_beside(ax)
    return fig


_MAPPING_STYLES = ("-", "--", ":")


def mapping_figure(points, curves, points_label: str):
    """Copy points (size_bytes, latency_us) and curves in long form (series, kind, size_bytes, time_us;
    kind 'fit', 'mapping' or 'reference') against message size, log-log."""
    fig, ax = figure(width=8.4, height=3.8)
    size_sweep(ax, points.size_bytes, points.latency_us, points_label, kind="recorded",
               color=kind_color("recorded"), linestyle="none", marker="s")
    n = 0
    for name, g in curves.groupby("series", sort=False):
        kind = g["kind"].iloc[0]
        if kind == "mapping":
            ax.plot(g.size_bytes, g.time_us, _MAPPING_STYLES[n % 3], color=kind_color("other"), label=name)
            n += 1
        else:
            ax.plot(g.size_bytes, g.time_us, color=kind_color("model" if kind == "fit" else "reference"), label=name)
    ax.set_yscale("log")
    ax.set_xlabel("message size")
    ax.set_ylabel("time (µs)")
    legend_beside(ax)
    return fig


def whatif_figure(lines, observed):
    """Tokens/s per stream against aggregate tokens/s, log-log: one line per scenario (`lines`: scenario,
    tok_s_aggregate, tok_s_per_stream, fits; dotted where the weights do not fit) and the observed ends
    (`observed`: label, kind, tok_s_aggregate, tok_s_per_stream) as stars. More scenarios than colours:
    the second round of colours has square markers."""
    fig, ax = figure(width=9.0, height=4.2)
    for i, (name, g) in enumerate(lines.groupby("scenario", sort=False)):
        ax.plot(g.tok_s_aggregate, g.tok_s_per_stream, "-" if g["fits"].iloc[0] else ":",
                marker="o" if i < len(CYCLE) else "s", ms=3, color=CYCLE[i % len(CYCLE)], label=name)
    for label, g in observed.groupby("label", sort=False):
        ax.scatter(g.tok_s_aggregate, g.tok_s_per_stream, marker="*", s=80, color=kind_color(g["kind"].iloc[0]),
                   zorder=5, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("aggregate output tokens/s")
    ax.set_ylabel("tokens/s per stream")
    legend_beside(ax)
    return fig


# ---- reader conventions (issue 15): legends never cover data (helpers.core.legends); every figure has alt text


def band_figure(rows):
    """Predictions with their 5-95 % bands beside the observations, one panel per point (`rows`: panel,
    label, kind, band_low, predicted, band_high, observed, observed_kind, observed_label): a bar from band_low
    to band_high with a dot at the point prediction per row (rows in the same order in every panel, labelled
    once, on the left), and each distinct observation as a dashed vertical line in its kind's colour."""
    panels = list(dict.fromkeys(rows["panel"]))
    n = int(rows.groupby("panel").size().max())
    # panels stacked, each labelled: the figure keeps page 1's full width and reads on a phone (issue 35: side
    # by side at 9 inches it was shown 368 px wide with labels about 4 px high)
    fig, axes = figure(nrows=len(panels), width=7.0, height=len(panels) * (0.36 * n + 0.75) + 0.6)
    axes = np.atleast_1d(axes).ravel()
    for i, (ax, panel) in enumerate(zip(axes, panels)):
        g = rows[rows["panel"] == panel].reset_index(drop=True)
        ys = np.arange(len(g))[::-1]
        for y, r in zip(ys, g.itertuples()):
            color = kind_color(r.kind)
            ax.plot([r.band_low, r.band_high], [y, y], "-", lw=6, color=color, alpha=0.35, solid_capstyle="butt")
            ax.plot([r.predicted], [y], "o", ms=4, color=color)
        for (obs, okind, olabel), _ in g.groupby(["observed", "observed_kind", "observed_label"], sort=False):
            ax.axvline(float(obs), color=kind_color(okind), lw=1.2, ls="--", label=olabel)
        ax.set_yticks(ys)
        ax.set_yticklabels([textwrap.fill(str(lb), 30) for lb in g["label"]], fontsize=10)
        ax.set_xscale("log")
        lo = float(min(g["band_low"].min(), g["observed"].min())) * 0.8
        hi = float(max(g["band_high"].max(), g["observed"].max())) * 1.25
        ax.set_xlim(lo, hi)
        ticks = [t for t in (5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000) if lo <= t <= hi]
        ax.set_xticks(ticks)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: f"{x:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda x, _p: ""))
        ax.set_xlabel(f"tokens/s, {panel}")
    figure_legend(fig, "below")
    return fig
