"""helpers.core.plotting's reader conventions: legends off the data, alt text for every figure."""
import pytest
from IPython.core.formatters import format_display_data

from helpers.core import glue, plotting, stepfigures


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


def _tick_labels(fig, axis="y"):
    fig.canvas.draw()
    ax = fig.axes[0]
    a = getattr(ax, f"{axis}axis")
    return [t.get_text() for t in a.get_majorticklabels() + a.get_minorticklabels() if t.get_text()]


def test_log_axes_carry_plain_tick_labels():
    fig, ax = plotting.figure()
    ax.plot([1, 2, 3], [3, 4, 6], marker="o", label="measured: x")
    ax.set_yscale("log")  # less than a decade: matplotlib labels minor ticks 3x10^0, 4x10^0, 6x10^0
    assert plotting.plain_log_ticks(fig) == 2
    labels = _tick_labels(fig)
    assert labels and all("10^" not in t and "times" not in t and "$" not in t for t in labels), labels
    assert {"3", "4", "6"} <= set(labels), labels
    fig2, ax2 = plotting.figure()
    ax2.plot([1, 1e3], [20, 400])
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    plotting.plain_log_ticks(fig2)
    assert "1000" in _tick_labels(fig2, "x") and "100" in _tick_labels(fig2, "y")
    assert [plotting.plain_number(v) for v in (3, 0.5, 400, 2e7, 1e-5)] == ["3", "0.5", "400", "2e7", "1e-5"]
    fig3, ax3 = plotting.figure()  # an axis with its own formatter keeps it
    plotting.size_sweep(ax3, [1024, 4096], [1, 2], "measured: x")
    plotting.plain_log_ticks(fig3)
    assert any("KiB" in t for t in _tick_labels(fig3, "x"))


def test_one_colour_per_meaning():
    kinds = ["recorded", "measured", "reference", "model"]
    assert len({plotting.kind_color(k) for k in kinds}) == 4
    assert plotting.kind_color("derived") == plotting.kind_color("model") == plotting.kind_color("fit")
    assert plotting.kind_color("recorded: original VM") == plotting.PALETTE["recorded"]
    others = {plotting.PALETTE[k] for k in ("recorded", "reference", "model")}
    assert not others & set(plotting.CYCLE) and not set(plotting.PALETTE.values()) & set(plotting.PART_COLORS)
    import pandas as pd
    bars = pd.DataFrame({"weights": [1.0, 2.0], "launch floor": [0.5, 0.5]}, index=[1, 64])
    fig = stepfigures.stacked_step_figure(bars, pd.Series({1: 3.0, 64: 4.0}), "observed step (recorded)")
    ax = fig.axes[0]
    from matplotlib.colors import to_hex
    bar_colours = {to_hex(p.get_facecolor()) for p in ax.patches}
    assert plotting.PALETTE["recorded"] not in bar_colours  # red marks only the observed step


def test_legends_hold_few_entries_outside_the_data_with_human_names():
    import pandas as pd
    rec = pd.DataFrame({"metric": "output_throughput", "workload": ["256/256", "256/256", "unstated", "unstated", "128/512"],
                        "experiment": ["sweep_256_256", "first_baseline", "summary_311", "moe_runner_cutedsl", "sweep_128_512"],
                        "concurrency": [1, 64, 64, 64, 8], "value": [40.0, 500.0, 480.0, 470.0, 200.0],
                        "value_low": [None] * 5, "value_high": [None] * 5})
    live = pd.DataFrame({"variant": [f"v{i}" for i in range(6) for _ in (1, 2)], "workload": "256/256",
                         "concurrency": [1, 8] * 6, "output_throughput": [30.0, 200.0] * 6})
    fig = plotting.serving_sweeps(rec, live, {"value": 300.0, "concurrency": 64}, per_stream=False)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(labels) <= plotting.MAX_ENTRIES, labels
    assert not any("summary 311" in lab or "moe runner" in lab or "_" in lab for lab in labels), labels
    assert "recorded: 256 in / 256 out tokens" in labels
    assert not plotting.legend_overlaps_data(fig.axes[0])
    assert "tokens/s" in fig.axes[0].get_ylabel()
    fig2, ax2 = plotting.figure()
    for k in range(9):
        ax2.plot(range(10), [k] * 10, label=f"series {k}")
    plotting.legend_beside(ax2, 6)
    fig2.canvas.draw()
    leg = ax2.get_legend()
    assert leg.get_texts()[0].get_fontsize() >= 7.5
    assert leg.get_window_extent().y1 < ax2.get_window_extent().y0  # more than six: below the axes


def test_a_figure_without_data_says_so_in_its_alt_text():
    fig = plotting.variants_figure(None, [12288], "the NCCL variants were not run: one GPU")
    assert plotting.no_data(fig) == "the NCCL variants were not run: one GPU"
    _, md = format_display_data(plotting.figure_image(fig))
    assert md["image/png"]["alt"].startswith("no data")
    _, md2 = format_display_data(plotting.figure_image(fig, alt="NCCL variants"))
    assert "no data" in md2["image/png"]["alt"]
    blank, _ = plotting.figure()
    assert plotting.no_data(blank)
    drawn, ax = _crowded()
    assert plotting.no_data(drawn) is None and "no data" not in plotting.describe(drawn)
    assert plotting.no_data(None) == "no figure"


def test_a_full_sweeps_size_labels_do_not_run_into_each_other():
    """The two-GPU run's collective figure (4 B to 256 MiB, legend beside narrower axes) once labelled every
    eighth power of two and printed "32 KiB256 KiB2 MiB"; its labels now stand apart."""
    from helpers import repo_root
    from helpers.chapters import vm_p2p as ch
    from helpers.core import layout, plotting
    from helpers.interconnect import copies, suite as ic

    saved = ch.saved_suite(layout.Run(repo_root() / "runs" / "h200x2-20261129f", "06_vm_p2p"))
    dec = copies.decode_message_sizes().size_bytes.tolist()
    for fig in (plotting.collectives_figure(saved.collective_sweep, dec, ic.eager_method(1).label),
                plotting.variants_figure(ic.variant_rows(saved.collective_sweep), dec)):
        fig.canvas.draw()
        ax = fig.axes[0]
        lo, hi = ax.get_xlim()
        boxes = sorted((t.get_window_extent() for t in ax.get_xticklabels()
                        if t.get_text() and lo <= t.get_position()[0] <= hi), key=lambda b: b.x0)
        assert 3 <= len(boxes) <= plotting.SIZE_TICKS
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))
