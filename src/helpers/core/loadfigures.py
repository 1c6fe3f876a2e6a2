"""The load study's figure in the book's look (helpers.core.plotting): the latency-throughput curve.

    load_curve(points, ttft_slo_ms, speed_floor) -> Figure

Left: per-user output speed (1000 / median TPOT, tokens/s) against aggregate output throughput (tokens/s), as
InferenceX draws interactivity against throughput; right: median TTFT (ms) against the completed request rate
(requests/s). Closed-loop points are joined in order of concurrency and labelled with it; open-loop points
(requests arriving at a rate) and a trace replay are markers of their own. The SLO lines are dashed. `points`
are plain dicts (kind, load, output_throughput, per_user_tokens_per_s, request_throughput, median_ttft_ms).
"""
from __future__ import annotations

import math

from .legends import figure_legend
from .plotting import figure, kind_color

#: marker and label of each kind of point
KINDS = {"closed": ("o", "closed loop (requests in flight)"), "open": ("s", "open loop (requests/s arriving)"),
         "trace": ("D", "trace replay")}


def _ok(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def load_curve(points: list[dict], ttft_slo_ms: float | None, speed_floor: float | None, label: str = "measured"):
    """The two panels (module docstring); a panel without points says 'no data' in its alt text."""
    fig, axes = figure(ncols=2, height=3.6)
    left, right = axes[0]
    color = kind_color("measured")
    for kind, (marker, name) in KINDS.items():
        pts = [p for p in points if p.get("kind") == kind and _ok(p.get("output_throughput"))]
        pts.sort(key=lambda p: p["load"])
        ls = "-" if kind == "closed" else "none"
        xs = [p["output_throughput"] for p in pts if _ok(p.get("per_user_tokens_per_s"))]
        ys = [p["per_user_tokens_per_s"] for p in pts if _ok(p.get("per_user_tokens_per_s"))]
        if xs:
            left.plot(xs, ys, marker=marker, ls=ls, color=color, ms=5, alpha=0.9, label=f"{label}: {name}")
        rx = [p["request_throughput"] for p in pts if _ok(p.get("median_ttft_ms"))]
        ry = [p["median_ttft_ms"] for p in pts if _ok(p.get("median_ttft_ms"))]
        if rx:
            right.plot(rx, ry, marker=marker, ls=ls, color=color, ms=5, alpha=0.9)
        if kind == "closed":
            for p in pts:
                if _ok(p.get("per_user_tokens_per_s")):
                    left.annotate(f"{int(p['load'])}", (p["output_throughput"], p["per_user_tokens_per_s"]),
                                  xytext=(3, 3), textcoords="offset points", fontsize=7)
    if _ok(speed_floor):
        left.axhline(speed_floor, ls="--", color=kind_color("assumed"), lw=1, label="SLO: output speed floor")
    if _ok(ttft_slo_ms):
        right.axhline(ttft_slo_ms, ls="--", color=kind_color("assumed"), lw=1, label="SLO: TTFT ceiling")
    left.set_xlabel("aggregate output throughput (tokens/s)")
    left.set_ylabel("per-user output speed (tokens/s)")
    right.set_xlabel("completed request rate (requests/s)")
    right.set_ylabel("median TTFT (ms)")
    for ax in (left, right):
        if ax.has_data():
            ax.set_ylim(bottom=0)
            ax.set_xlim(left=0)
    figure_legend(fig, "below", ncols=2, fontsize=8)
    return fig
