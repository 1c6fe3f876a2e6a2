"""Chapter 06's own figures: copies by path and harness, and the fidelity ratio against nccl-tests. They
draw with helpers.core.plotting's conventions; the path order and the method labels come from
helpers.interconnect, so the base layer need not import it."""
from __future__ import annotations

from helpers.core.legends import MAX_ENTRIES, MIN_FONTSIZE, legend_outside
from helpers.core.plotting import COPY_HARNESS_STYLE, CYCLE, PALETTE, figure, size_sweep
from helpers.interconnect.copies import PATHS
from helpers.interconnect.method import Method


#: the copy paths as a reader names them (legend entries)
PATH_NAMES = {"same_device": "within one GPU", "peer": "GPU to GPU, peer", "host_bounce": "GPU to GPU via host",
              "h2d": "host to GPU", "d2h": "GPU to host", "cpu_memcpy": "CPU memory copy"}
#: the copy harnesses as a reader names them, with their line style
HARNESS_NAMES = {"eager": "eager (from Python)", "graph": "graph (one CUDA graph)", "queued": "queued"}


def copy_figure(copy_sweep, recorded, fit=None, what: str = "time_us", harnesses=("eager", "graph")):
    """Copy time (or bandwidth) against size per path and harness, the original VM beside it: `recorded`
    is its copy sweep (helpers.interconnect.suite.recorded_copy_sweep) and `fit` its alpha-beta fit (a row
    with alpha_us and beta_GBps), drawn on the time panel. The legend holds at most MAX_ENTRIES entries:
    one per path (its colour), the original VM, then the fit and the harnesses' line styles where there
    is room; a fit left out of the legend is named at its line's start, and the caption names the styles."""
    import numpy as np

    fig, ax = figure(width=7.2, height=2.8)
    entries = []   # (priority, handle-making call); paths and the recorded sweep always, the rest if room
    if copy_sweep is not None and len(copy_sweep):
        copy_sweep = copy_sweep[copy_sweep.harness.isin(harnesses)]
        for (path, harness), g in copy_sweep.groupby(["path", "harness"], sort=False):
            g = g.sort_values("size_bytes")
            lo = g[what.replace("time_us", "time_us_p10")] if what == "time_us" else None
            hi = g[what.replace("time_us", "time_us_p90")] if what == "time_us" else None
            color = CYCLE[list(PATHS).index(path) % len(CYCLE)]
            size_sweep(ax, g["size_bytes"], g[what], "_nolegend_", lower=lo, upper=hi, color=color,
                       ls=COPY_HARNESS_STYLE.get(harness, "-"))
            name = f"{PATH_NAMES.get(path, path.replace('_', ' '))} (measured)"
            if name not in [n for n, _ in entries]:
                entries.append((name, {"color": color, "ls": "-", "marker": "o", "ms": 3.5}))
        styles = [(HARNESS_NAMES.get(h, h), {"color": "0.35", "ls": COPY_HARNESS_STYLE.get(h, "-")})
                  for h in copy_sweep.harness.drop_duplicates()]
    else:
        styles = []
    if recorded is not None:
        col = "time_us" if what == "time_us" else "bandwidth_GBps"
        size_sweep(ax, recorded["size_bytes"], recorded[col], "original VM, GPU 0 to GPU 1 (recorded)",
                   color=PALETTE["recorded"], marker="s", lw=2.2)
    for name, kw in entries:
        ax.plot([], [], label=name, **kw)
    room = MAX_ENTRIES - len(ax.get_legend_handles_labels()[1])
    if what == "time_us" and fit is not None and recorded is not None:
        xs = np.geomspace(recorded["size_bytes"].min(), recorded["size_bytes"].max(), 30)
        fit_label = "alpha-beta fit to the original VM (derived)"
        ax.plot(xs, fit.alpha_us + xs / (fit.beta_GBps * 1e3), color=PALETTE["model"], lw=1, ls=(0, (1, 1)),
                label=fit_label if room > 0 else "_nolegend_")
        if room > 0:
            room -= 1
        else:   # no room in the legend: named where the line starts
            ax.annotate("alpha-beta fit (derived)", (xs[0], fit.alpha_us + xs[0] / (fit.beta_GBps * 1e3)),
                        xytext=(-6, 0), textcoords="offset points", fontsize=MIN_FONTSIZE, color=PALETTE["model"],
                        ha="right", va="center")
    if len(styles) > 1 and room >= len(styles):
        for name, kw in styles:
            ax.plot([], [], label=name, **kw)
    ax.set_yscale("log")
    ax.set_xlabel("message size")
    ax.set_ylabel("time per copy (µs)" if what == "time_us" else "bandwidth (GB/s)")
    n = len(ax.get_legend_handles_labels()[1])
    if n > 3:   # a legend below the axes takes its height from the figure's
        legend_outside(ax, "below", ncols=2, fontsize=MIN_FONTSIZE)
        fig.set_size_inches(7.2, 4.2)
    else:
        ax.legend(fontsize=MIN_FONTSIZE, loc="upper left")
    return fig


def fidelity_ratio_figure(table, tolerance: float):
    """Ours / tool against message size for the all-reduce rows timed by nccl-tests' method, one panel
    per nccl-tests mode (eager, -G 1), the tolerance band shaded and, where the tool ran more than once,
    each of its runs against their median in grey (the tool's own noise); NCCL's default settings only (the
    variants' ratios are in allreduce_ratio_table). `table` is one setup's
    comparison with its method columns (helpers.interconnect.studies)."""
    import matplotlib.ticker

    t = table[table.quantity.str.startswith("all_reduce") & table.same_method.astype(bool)
              & table.tool_setting.str.contains("in-place")]
    if t.tool_setting.str.startswith("-np").any():   # the like-for-like launch shape, where it ran
        t = t[t.tool_setting.str.startswith("-np")]
    fig, axes = figure(ncols=2, width=11, height=5.6)
    for ax, graph in zip(axes[0], (False, True)):
        sub = t[t.tool_setting.str.contains("-G") == graph]
        noise = sub[sub.method.isna()]                       # the tool's runs against their median
        for _, g in noise.groupby(["tool_setting", "ours_method"], sort=False):
            g = g.sort_values("size_bytes")
            ax.plot(g.size_bytes, g.ratio, color="0.6", lw=0.8, zorder=1)
        if len(noise):
            ax.plot([], [], color="0.6", lw=0.8, label="nccl-tests run / median of its runs")
        mine = sub[sub.method.notna() & (sub.tool_setting.str.count(", ") == 1)]   # NCCL's defaults only: the
        for (ts, _m), g in mine.groupby(["tool_setting", "method"], sort=False):      # variants are in the tables
            g = g.sort_values("size_bytes")
            shape = ts.split(", ")[0].replace(" -G 1", "")
            size_sweep(ax, g.size_bytes, g.ratio, f"{Method.from_row(g.iloc[0]).short} vs {shape}")
        ax.axhspan(1 - tolerance, 1 + tolerance, color="0.85", zorder=0)
        ax.set_yscale("log")
        lo, hi = ax.get_ylim()
        ticks = [x for x in (0.25, 0.5, 0.7, 1, 1.5, 2, 3, 5, 10, 20) if lo <= x <= hi]
        ax.set_yticks(ticks, [f"{x:g}" for x in ticks])
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("message size")
        ax.set_ylabel("ours / nccl-tests, time per call")
        ax.text(0.02, 0.95, "nccl-tests -G 1 (one CUDA graph)" if graph else "nccl-tests eager",
                transform=ax.transAxes, va="top")
        if ax.get_legend_handles_labels()[0]:   # below the panel: the curves fill the plot area
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    return fig
