"""Every figure of the book, drawn one way: one style, lowercase unit-bearing axis labels, log axes
for size sweeps, no titles (captions come from myst-nb figure metadata).

Series labels say whose numbers they are ("recorded: original VM", "measured: this machine") so
that the two are never confused.
"""
from __future__ import annotations

from typing import Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

#: colours by whose number it is: recorded (the original investigation), measured (this run),
#: reference (public figures from other machines), model (a prediction)
PALETTE = {
    "recorded": "#b2182b",
    "measured": "#2166ac",
    "reference": "#4d9221",
    "model": "#7b3294",
    "other": "#666666",
}
CYCLE = ["#2166ac", "#b2182b", "#4d9221", "#7b3294", "#e08214", "#35978f", "#878787", "#c51b7d"]


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


def size_axis(ax, axis: str = "x") -> None:
    """A log2 axis of message sizes labelled in B/KiB/MiB/GiB."""
    getattr(ax, f"set_{axis}scale")("log", base=2)
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
    return PALETTE.get(kind, PALETTE["other"])


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


def as_image(fig, dpi: int | None = None):
    """`fig` as an IPython PNG image, for glue: the book forces the Agg backend, so a bare Figure has
    no image/png display of its own and myst-nb's {glue:figure} would show only its text form."""
    import io

    from IPython.display import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi or plt.rcParams["savefig.dpi"], bbox_inches="tight")
    return Image(data=buf.getvalue(), format="png")
