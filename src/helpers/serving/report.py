"""The serving chapters' tables and figures: recorded points, the seeds' disagreements settled from
data, live sweeps beside them, and the spread across repeats.

Per-stream tokens/s is derived the same way for every series: output throughput / concurrency (the
nominal number of requests in flight), so recorded and measured points compare like with like.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.book import plotting, recorded

SWEEP_EXPERIMENTS = {"sweep_256_256": "256/256", "sweep_128_512": "128/512", "first_baseline": "256/256"}


def recorded_serving() -> pd.DataFrame:
    return recorded.load("recorded/serving.csv")


def recorded_points(df: pd.DataFrame | None = None) -> pd.DataFrame:
    """The recorded output/total throughput points with a workload label (one row per source)."""
    df = recorded_serving() if df is None else df
    m = df.metric.isin(["output_throughput", "total_throughput"]) & df.concurrency.notna() & (df.experiment != "target")
    out = df[m].copy()
    out["workload"] = [f"{int(a)}/{int(b)}" if pd.notna(a) and pd.notna(b) else "unstated"
                       for a, b in zip(out.input_len, out.output_len)]
    out["kind"] = "recorded"
    return out[["experiment", "moe_runner", "workload", "concurrency", "metric", "value", "value_low", "value_high",
                "approx", "source", "note", "kind"]].reset_index(drop=True)


def server_log_point(df: pd.DataFrame | None = None) -> dict:
    """The one decode-batch line of the server log (running requests, generation throughput)."""
    df = recorded_serving() if df is None else df
    r = df[(df.experiment == "server_log_decode_batch") & (df.metric == "generation_throughput")].iloc[0]
    return {"concurrency": int(r.concurrency), "value": float(r.value), "source": r.source}


def total_disagreement(df: pd.DataFrame | None = None) -> pd.DataFrame:
    """The two recorded totals at concurrency 64 (256/256), each with the output figure of the same run,
    and the derived total/output ratio that tells whether they are one run mis-quoted or two runs."""
    df = recorded_serving() if df is None else df
    rows = []
    for exp in ("first_baseline", "sweep_256_256"):
        sub = df[(df.experiment == exp) & (df.concurrency == 64)]
        for src in sorted(set(sub.source)):
            s = sub[sub.source == src]
            tot = s[s.metric == "total_throughput"].value
            out = s[s.metric == "output_throughput"].value
            if len(tot) and len(out):
                rows.append({"experiment": exp, "source": src, "total_tok_s (recorded)": float(tot.iloc[0]),
                             "output_tok_s (recorded)": float(out.iloc[0]),
                             "total/output (derived)": float(tot.iloc[0] / out.iloc[0]),
                             "approx": bool(s.approx.any())})
    return pd.DataFrame(rows)


def saturation_claims(df: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every recorded statement of saturated output throughput (concurrency 64), with its workload."""
    df = recorded_serving() if df is None else df
    m = (df.metric == "output_throughput") & (df.concurrency == 64) & ~df.experiment.str.startswith("moe_runner")
    out = df[m].copy()
    out["workload"] = [f"{int(a)}/{int(b)}" if pd.notna(a) and pd.notna(b) else "not stated"
                       for a, b in zip(out.input_len, out.output_len)]
    out["figure"] = [f"{v:g}" if pd.notna(v) else f"{lo:g}-{hi:g}"
                     for v, lo, hi in zip(out.value, out.value_low, out.value_high)]
    return out[["experiment", "workload", "figure", "value", "value_low", "value_high", "approx", "source", "note"]
               ].drop_duplicates(["experiment", "figure", "source"]).reset_index(drop=True)


def nearest_workload(value: float, claims: pd.DataFrame) -> tuple[str, float]:
    """The workload whose exact recorded figure is closest to `value`, and the relative gap."""
    exact = claims[claims.value.notna() & (claims.workload != "not stated")]
    gaps = (exact.value.astype(float) - value).abs() / exact.value.astype(float)
    i = gaps.idxmin()
    return str(exact.workload[i]), float(gaps[i])


def per_stream(df: pd.DataFrame, value_col: str = "output_throughput") -> pd.Series:
    return df[value_col].astype(float) / df["concurrency"].astype(float)


def plot_sweeps(rec: pd.DataFrame, live: pd.DataFrame | None, log_point: dict | None, per_stream_axis: bool,
                live_label: str = "measured: this machine"):
    """Output throughput (or per-stream tokens/s) against concurrency: recorded points by workload and
    source, the server-log point, and live sweeps by variant and workload (dashed lines)."""
    fig, ax = plotting.figure()
    markers = {"256/256": "o", "128/512": "s", "unstated": "D"}
    outp = rec[rec.metric == "output_throughput"]
    for (wl, exp), g in outp.groupby(["workload", "experiment"], sort=False):
        g = g[g.value.notna()].drop_duplicates(["concurrency", "value"])
        if g.empty:
            continue
        y = g.value.astype(float) / (g.concurrency.astype(float) if per_stream_axis else 1.0)
        ax.plot(g.concurrency.astype(float), y, marker=markers.get(wl, "D"), ls="none",
                color=plotting.kind_color("recorded"), alpha=0.85, ms=5,
                label=f"recorded: {exp.replace('_', ' ')} ({wl})")
    ranges = outp[outp.value.isna() & outp.value_low.notna()]
    for r in ranges.itertuples():
        div = float(r.concurrency) if per_stream_axis else 1.0
        ax.vlines(float(r.concurrency) * 1.04, float(r.value_low) / div, float(r.value_high) / div,
                  color=plotting.kind_color("recorded"), lw=3, alpha=0.4)
    if len(ranges):
        ax.plot([], [], color=plotting.kind_color("recorded"), lw=3, alpha=0.4, label="recorded: stated ranges at 64")
    if log_point:
        y = log_point["value"] / (log_point["concurrency"] if per_stream_axis else 1.0)
        ax.plot([log_point["concurrency"]], [y], marker="*", ms=11, ls="none", color=plotting.kind_color("recorded"),
                label="recorded: one server-log decode batch")
    if live is not None and len(live):
        for i, ((var, wl), g) in enumerate(live.groupby(["variant", "workload"], sort=False)):
            g = g.sort_values("concurrency")
            y = per_stream(g) if per_stream_axis else g.output_throughput.astype(float)
            ax.plot(g.concurrency.astype(float), y, marker=markers.get(wl, "^"), ls="--", ms=4,
                    color=plotting.CYCLE[i % len(plotting.CYCLE)] if i else plotting.kind_color("measured"),
                    label=f"{live_label}: {var} ({wl})")
    plotting.concurrency_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("per-stream output (tok/s per request)" if per_stream_axis else "output throughput (tok/s)")
    ax.legend(fontsize=7, loc="best")
    return fig


def headline_table(rec: pd.DataFrame, live: pd.DataFrame | None, where: str) -> pd.DataFrame:
    """Single-stream and saturated output throughput: recorded (original VM) and measured (this machine)."""
    rows = []
    outp = rec[(rec.metric == "output_throughput") & rec.value.notna() & rec.experiment.str.startswith("sweep_")]
    for wl in ("256/256", "128/512"):
        s = outp[outp.workload == wl]
        c1, c64 = s[s.concurrency == 1].value, s[s.concurrency == 64].value
        if len(c1) and len(c64):
            rows.append({"who": "recorded: original VM (sglang TP8, 8 GPUs)", "variant": "best configuration",
                         "workload": wl, "single_stream_tok_s": float(c1.iloc[0]), "max_concurrency": 64,
                         "saturated_tok_s": float(c64.iloc[0]),
                         "scaling (derived)": float(c64.iloc[0] / c1.iloc[0])})
    if live is not None and len(live):
        for (var, wl), g in live.groupby(["variant", "workload"], sort=False):
            g = g.sort_values("concurrency")
            one = g[g.concurrency == 1].output_throughput
            top = g.iloc[g.output_throughput.astype(float).argmax()]
            rows.append({"who": f"measured: {where}", "variant": var, "workload": wl,
                         "single_stream_tok_s": float(one.iloc[0]) if len(one) else np.nan,
                         "max_concurrency": int(top.concurrency), "saturated_tok_s": float(top.output_throughput),
                         "scaling (derived)": float(top.output_throughput / one.iloc[0]) if len(one) else np.nan})
    return pd.DataFrame(rows)


def repeat_spread(df: pd.DataFrame, by: str = "runner") -> pd.DataFrame:
    """Mean, min, max and relative range of output throughput across repeats per (runner, concurrency)."""
    g = df.groupby([by, "workload", "concurrency"]).output_throughput
    out = g.agg(["mean", "min", "max", "count"]).reset_index()
    out["range_pct"] = 100 * (out["max"] - out["min"]) / out["mean"]
    return out


def distinguishable(spread: pd.DataFrame, by: str = "runner") -> pd.DataFrame:
    """For each concurrency, each pair of runners: the difference of means, and whether their
    repeat ranges overlap (overlap: the difference is within run-to-run noise)."""
    rows = []
    for (wl, c), g in spread.groupby(["workload", "concurrency"]):
        g = g.reset_index(drop=True)
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                a, b = g.iloc[i], g.iloc[j]
                overlap = not (a["max"] < b["min"] or b["max"] < a["min"])
                rows.append({"workload": wl, "concurrency": c, "a": a[by], "b": b[by],
                             "diff_pct (derived)": 100 * (a["mean"] - b["mean"]) / b["mean"],
                             "ranges_overlap": overlap,
                             "verdict": "within noise" if overlap else "a real difference"})
    return pd.DataFrame(rows)


def plot_runners(rec_runners: pd.DataFrame, spread: pd.DataFrame | None, by: str = "runner"):
    """Recorded runner figures at 64 (points and ranges) and live runners' mean with min-max across repeats."""
    fig, ax = plotting.figure()
    for i, r in enumerate(rec_runners.itertuples()):
        c = float(r.concurrency) * (1 + 0.05 * i)
        if pd.notna(r.value):
            ax.plot([c], [float(r.value)], "o", color=plotting.kind_color("recorded"), ms=5)
        else:
            ax.vlines(c, float(r.value_low), float(r.value_high), color=plotting.kind_color("recorded"), lw=3, alpha=0.5)
        ax.annotate(f"recorded: {r.moe_runner}", (c, float(r.value) if pd.notna(r.value) else float(r.value_high)),
                    fontsize=6, xytext=(3, 3), textcoords="offset points")
    if spread is not None and len(spread):
        for i, (name, g) in enumerate(spread.groupby(by, sort=False)):
            g = g.sort_values("concurrency")
            x = g.concurrency.astype(float) * (1 + 0.04 * i)
            line, = ax.plot(x, g["mean"], marker="o", ms=4, ls="--", color=plotting.CYCLE[i % len(plotting.CYCLE)],
                            label=f"measured: {name} (mean, min-max of repeats)")
            ax.vlines(x, g["min"], g["max"], color=line.get_color(), lw=2, alpha=0.6)
    plotting.concurrency_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("output throughput (tok/s)")
    ax.legend(fontsize=7)
    return fig
