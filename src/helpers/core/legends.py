"""Legends that never cover data (issue 15's reader conventions): a legend beside or below the axes,
one legend for a figure's panels, the test whether a legend covers a plotted point, and the move of
every such legend off the data that `plotting.figure_image` (so every glued figure) makes.

These work on the figures and axes they are given; `helpers.core.plotting` re-exports them, so
`plotting.legend_outside(...)` and the others are called as before.
"""
from __future__ import annotations

#: the most entries a legend should hold: a figure function with more series groups them (one entry per
#: workload, one for several lines named at their ends) or says so in the caption
MAX_ENTRIES = 6
#: the smallest legend type that stays legible on a phone
MIN_FONTSIZE = 7.5


def legend_outside(ax, where: str = "right", ncols: int | None = None, **kw):
    """The axes' legend beside the data, never over it: `where` is "right" (beside the axes, top
    aligned) or "below" (under the x label, in `ncols` columns; default: up to 4). Returns the legend,
    or None when nothing is labelled."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    if isinstance(kw.get("fontsize"), (int, float)):
        kw["fontsize"] = max(MIN_FONTSIZE, kw["fontsize"])
    if where == "right":
        place = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0}
    elif where == "below":
        place = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.18), "ncols": min(ncols or 4, len(handles))}
    else:
        raise ValueError(f"legend_outside: where={where!r}; expected 'right' or 'below'")
    return ax.legend(handles, labels, **{**place, **kw})


def figure_legend(fig, where: str = "right", ncols: int | None = None, **kw):
    """One legend for every panel of `fig`, outside all of them ("right" or "below"): the panels'
    own legends are removed and repeated labels shown once. Returns the legend, or None."""
    seen: dict[str, object] = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab and not lab.startswith("_") and lab not in seen:
                seen[lab] = h
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if not seen:
        return None
    constrained = fig.get_layout_engine() is not None and "Constrained" in type(fig.get_layout_engine()).__name__
    if where == "right":
        place = ({"loc": "outside right upper"} if constrained else
                 {"loc": "upper left", "bbox_to_anchor": (1.0, 1.0)})
    elif where == "below":
        place = ({"loc": "outside lower center"} if constrained else
                 {"loc": "upper center", "bbox_to_anchor": (0.5, 0.0)})
        place["ncols"] = ncols or min(4, len(seen))
    else:
        raise ValueError(f"figure_legend: where={where!r}; expected 'right' or 'below'")
    return fig.legend(list(seen.values()), list(seen), **{**place, **kw})


def legend_overlaps_data(ax) -> bool:
    """Whether the axes' legend box covers any plotted point (lines' vertices, scatter points, bar
    tops): a check for tests, since a reader cannot read what a legend hides."""
    import numpy as np

    leg = ax.get_legend()
    if leg is None:
        return False
    fig = ax.figure
    ax.get_xlim(), ax.get_ylim()  # apply any pending autoscaling before reading transforms
    fig.canvas.draw()
    box = leg.get_window_extent()
    pts = []
    for line in ax.get_lines():
        xy = np.column_stack(line.get_data()) if len(line.get_xdata()) else np.empty((0, 2))
        if len(xy):
            pts.append(line.get_transform().transform(xy.astype(float)))
    for coll in ax.collections:
        offs = coll.get_offsets()
        if len(offs):
            pts.append(coll.get_offset_transform().transform(np.asarray(offs, dtype=float)))
    for patch in ax.patches:
        bb = patch.get_window_extent()
        pts.append(np.array([[bb.x0, bb.y1], [bb.x1, bb.y1], [(bb.x0 + bb.x1) / 2, bb.y1]]))
    if not pts:
        return False
    allpts = np.vstack(pts)
    allpts = allpts[np.isfinite(allpts).all(axis=1)]
    inside = ((allpts[:, 0] >= box.x0) & (allpts[:, 0] <= box.x1) & (allpts[:, 1] >= box.y0)
              & (allpts[:, 1] <= box.y1))
    return bool(inside.any())


def legend_entries(fig) -> int:
    """The most entries any one legend of `fig` holds (axes legends and figure legends)."""
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    return max((len(leg.get_texts()) for leg in legends), default=0)


def keep_legends_off_data(fig, max_share: float = 0.2) -> int:
    """Move every axes legend of `fig` that covers a plotted point, covers more than `max_share` of its
    axes, or holds more than MAX_ENTRIES entries while inside the axes, out of the axes: beside them
    (right) for a few entries, below them in two columns for more than four; type no smaller than
    MIN_FONTSIZE. Returns how many moved. `figure_image` (so every glued Figure) does this."""
    moved = 0
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is None:
            continue
        fig.canvas.draw()
        lb, ab = leg.get_window_extent(), ax.get_window_extent()
        inside = ab.x0 <= lb.x0 and lb.x1 <= ab.x1 and ab.y0 <= lb.y0 and lb.y1 <= ab.y1
        big = inside and (lb.width * lb.height) > max_share * (ab.width * ab.height)
        n = len(leg.get_texts())
        crowded = inside and n > MAX_ENTRIES
        if not big and not crowded and not legend_overlaps_data(ax):
            continue
        size = leg.get_texts()[0].get_fontsize() if leg.get_texts() else None
        kw = {"fontsize": max(MIN_FONTSIZE, size)} if size else {}
        if n > 4:
            legend_outside(ax, "below", ncols=2, **kw)
        else:
            legend_outside(ax, "right", **kw)
        moved += 1
    return moved
