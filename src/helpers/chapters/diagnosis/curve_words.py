"""Where the diagnosis's bare-metal collective and step figures come from, in words a reader can recompute: the
community curves' source at each message size (tuned, held flat, or the tuner-page baseline with its two points),
aiconfigurator's NCCL points around a size, and the community decode table's points a bare-metal step is read
between (site-read4 to site-read10)."""
from __future__ import annotations

import pandas as pd

from helpers.core.pick import PickError as FindingError
from helpers.model import kernels as kt
from helpers.model import verdict as vd


def tuned_curve_words(sizes: list[float], short: bool = False) -> str:
    """Which community all-reduce figure the bare-metal middle values take at each message size, and from what part
    of data/reference/nccl_community.csv (helpers.model.verdict.collectives.community): the tuned points where
    the size lies among them, the smallest tuned point held flat below them (assumed), the tuner page's
    baseline (derived from its bus bandwidth) above them. `short`: the same per size in a clause page 1 and
    section 3 give beside the all-reduces' share (site-read5 N2). Above the tuned points the time is derived from the
    baseline's bus bandwidth (reference), in both forms and as the collective_curve row says (site-read6 R4)."""
    from helpers.model.verdict import collectives as cl

    c = cl.community()
    c = c[(c["system"] == kt.RTX) & (c["gpus"] == cl.TP) & (c["op"] == "all_reduce")]
    tuned = c[c["curve"] == "tuned"]["message_bytes"].astype(float)
    lo, hi = float(tuned.min()), float(tuned.max())
    words = []
    for size in sizes:
        us = cl.community_us(kt.RTX, "all_reduce", size)
        if us is None:
            raise FindingError(f"the community's all-reduce curve has no point at or above {size:.0f} B; "
                               "extend data/reference/nccl_community.csv or drop the size")
        if short:
            where = (f"the tuned curve's {lo / 1024:.0f} KiB point held flat, assumed" if size < lo
                     else "the community's tuned curve, reference" if size <= hi
                     else ("derived from the reference bus bandwidth of the community's tuner-page baseline, a "
                           "second run without the tuner plugin"))
            words.append(f"{size / 1024:.0f} KiB: {us:.0f} µs, {where}")
            continue
        where = (f"the tuned curve's smallest point, at {lo / 1024:.0f} KiB, held flat below it: assumed" if size < lo
                 else f"the tuned curve, timed from {lo / 1024:.0f} to {hi / 1024:.0f} KiB: reference" if size <= hi
                 else (f"above the tuned curve's largest size, {hi / 1024:.0f} KiB, the same community's tuner-page "
                       f"baseline (reference), a second run without the tuner plugin: derived from its bus bandwidth "
                       f"and read between its points, not extrapolated: {_baseline_points(c, size)}"))
        words.append(f"{us:.0f} µs at {size / 1024:.0f} KiB ({where})")
    return "; ".join(words)


#: what a bare-metal step read by Verdict.bare_metal_steps adds in words, by its source: one decode table of the
#: community's, its 1- and 64-stream points the reference, the others held out (site-read10 V1)
SOURCE_WORDS = {"rtx6kpro-glm5": "", "rtx6kpro-glm5-bench": ", held out"}


def table_points_words(size: float) -> str:
    """aiconfigurator's two NCCL all-reduce points (8 RTX PRO 6000s) around `size` bytes, so a figure read between
    them recomputes from the page (site-read10 V5)."""
    d = kt.table("comm")
    d = d[d["library"].str.startswith("nccl") & (d["system"] == kt.RTX) & (d["op"] == "all_reduce")
          & (d["num_gpus"] == vd.TP)]
    d = d[~d["kernel_source"].astype(str).str.endswith("_eager")].sort_values("message_bytes")
    lo, hi = d[d["message_bytes"] <= size].tail(1), d[d["message_bytes"] >= size].head(1)
    pts = [f"{float(r.message_bytes) / 1024:.0f} KiB: {float(r.latency_us):.1f} µs"
           for r in pd.concat([lo, hi]).drop_duplicates("message_bytes").itertuples()]
    return "between its points at " + " and ".join(pts)


def _baseline_points(c: pd.DataFrame, size: float) -> str:
    """The tuner-page baseline's two points around `size`, each with its bus bandwidth (reference) and the time it
    gives (derived), so the figure read between them recomputes from the page (site-read8 T10)."""
    b = c[c["curve"] == "tuner page baseline"].sort_values("message_bytes")
    below, above = b[b["message_bytes"] <= size].tail(1), b[b["message_bytes"] >= size].head(1)
    pts = [f"{int(r.message_bytes) / 1024:.0f} KiB at {r.busbw_gbs:.2f} GB/s, {r.latency_us:.1f} µs"
           for r in pd.concat([below, above]).drop_duplicates("message_bytes").itertuples()]
    return " and ".join(pts) + " (time = bytes x 2(n-1)/n / bus bandwidth)"
