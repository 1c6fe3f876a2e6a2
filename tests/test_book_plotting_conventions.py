"""helpers.core.plotting's reader conventions: legends off the data, alt text for every figure."""
import pytest
from IPython.core.formatters import format_display_data

from helpers.core import glue, plotting


def _crowded():
    fig, ax = plotting.figure()
    for k in range(6):
        ax.plot(range(10), [k * 0.1 + 5 for _ in range(10)], marker="o", label=f"series {k}")
    ax.set_xlabel("message size")
    ax.set_ylabel("time (us)")
    return fig, ax


def test_a_legend_over_the_points_is_detected_and_legend_outside_clears_it():
    fig, ax = _crowded()
    ax.legend(loc="center")
    assert plotting.legend_overlaps_data(ax)
    plotting.legend_outside(ax)
    assert not plotting.legend_overlaps_data(ax)
    plotting.legend_outside(ax, where="below")
    assert not plotting.legend_overlaps_data(ax)
    with pytest.raises(ValueError, match="where"):
        plotting.legend_outside(ax, where="inside")


def test_figure_legend_replaces_the_panels_legends_with_one_outside():
    fig, axes = plotting.figure(ncols=2)
    for ax in axes[0]:
        ax.plot([1, 2], [1, 2], label="measured: this machine")
        ax.plot([1, 2], [2, 1], label="recorded: original VM")
        ax.legend(loc="center")
    leg = plotting.figure_legend(fig, where="below")
    assert leg is not None and [t.get_text() for t in leg.get_texts()] == ["measured: this machine",
                                                                           "recorded: original VM"]
    assert all(ax.get_legend() is None for ax in axes[0])


def test_describe_says_what_the_figure_draws():
    fig, ax = _crowded()
    ax.set_yscale("log")
    text = plotting.describe(fig)
    assert text.startswith("Figure: chart of time (us) (log scale) against message size; series: series 0")


def test_glued_figures_carry_alt_text():
    fig, ax = _crowded()
    _, md = format_display_data(glue.plain(fig))
    assert md["image/png"]["alt"] == plotting.describe(fig)
    _, md2 = format_display_data(plotting.figure_image(fig, alt="six flat lines"))
    assert md2["image/png"]["alt"] == "six flat lines"


def test_glued_figures_never_show_a_legend_over_their_points():
    fig, ax = _crowded()
    ax.legend(loc="center")
    assert plotting.keep_legends_off_data(fig) == 1 and not plotting.legend_overlaps_data(ax)
    fig2, ax2 = plotting.figure()
    ax2.plot(range(10), [10] * 10, marker="o", label="high")
    ax2.plot([0], [0], marker="o", label="one low point")
    ax2.legend(loc="lower right")  # the lower right is empty: the legend stays where it is
    assert plotting.keep_legends_off_data(fig2) == 0
    fig3, ax3 = _crowded()
    ax3.legend(loc="center")
    glue.plain(fig3)
    assert not plotting.legend_overlaps_data(ax3)


def test_a_legend_that_fills_the_axes_moves_out_even_over_empty_space():
    fig, ax = plotting.figure()
    ax.plot([1, 100], [1, 100], "o")
    for k in range(8):
        ax.plot([], [], marker="o", label=f"recorded: a long series label number {k}")
    ax.legend(loc="upper left")
    assert plotting.keep_legends_off_data(fig) == 1
    leg = ax.get_legend()
    fig.canvas.draw()
    assert leg.get_window_extent().y1 < ax.get_window_extent().y0  # below the axes now
