"""Site read 3 (run h100-20261206b replayed at 122b9c0): each statement the reading found at odds with its own page
or another page is computed by package code now; these tests fail if the disagreement comes back."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from helpers import repo_root
from helpers.chapters import diagnosis as dg
from helpers.model import measured as mb
from helpers.model import verdict as vd


def _markdown(stem: str) -> str:
    nb = json.loads((repo_root() / "notebooks" / f"{stem}.ipynb").read_text())
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    return " ".join(text.split())


@pytest.fixture(scope="module")
def meas():
    return mb.step_measurement(None)


@pytest.fixture(scope="module")
def rec(meas):
    return dg.Diagnosis.build("glm5", 0.25, meas, live=False, study=mb.precision_study(None))


def test_reference_figures_are_not_called_observed_or_measured():
    """M-1, M-2, M-3: bare metal's figure is the community's reference, aiconfigurator's tables are reference, and the
    band comes from the kernel tables and stated ranges, not 'measured inputs alone'."""
    md = _markdown("07_diagnosis")
    for wrong in ("observed {glue:text}`ans_bm_obs_1", "observed {glue:text}`ans_bm_obs_64", "measured kernels",
                  "kernels measured on", "measured inputs alone", "aiconfigurator's measured time", "(both observed)",
                  "on other hardware"):
        assert wrong not in md, wrong
    # site read 4, L4: the step is derived from the community's reference tokens/s (as chapter 03 labels it)
    assert ("{glue:text}`ans_bm_obs_1:.1f` derived from the community's reference {glue:text}`bmb_obs_1:.1f` tokens/s" in md
            and "{glue:text}`ans_bm_obs_64:.0f` ms derived from the community's reference {glue:text}`bmb_obs_64:.0f`" in md)
    assert "the {glue:text}`n_admitted` admissible host-path models predict" in md          # L-16
    intro = " ".join((repo_root() / "intro.md").read_text().split())
    assert "kernels measured on" not in intro and "07_diagnosis.ipynb::small_ops_text:s" in intro    # M-2, M-8
    assert "aiconfigurator's measured" not in _markdown("07_decode_step")


def test_the_budget_tables_name_aiconfigurators_kernels_as_reference(rec):
    """M-2: the budgets and components tables the diagnosis shows say reference, not measured."""
    mc = dg.measured_compute(rec)
    bud = mc.tables["budgets"]
    row = bud[bud["budget_id"] == "measured kernels"]
    assert len(row) and set(row["kind"]) == {"reference"}
    assert all("measured" not in str(b) for b in row["budget"])
    assert {c[0] for c in mc.shown["components"].columns} == {"reference kernels (ms)"}


def test_the_small_operations_floor_is_named_with_its_gpu(rec, meas):
    """M-8: the one kernel-table input taken from the decode-step measurement is named with its GPU, its share of the
    one-stream step, and the step at the first budget's assumed floor instead."""
    v = dg.measured_compute(rec).values
    assert v["small_floor_us"] == meas.floor_us() and meas.device in v["small_ops_text"]
    assert 0 < v["small_share_1"] < 100 and f"{v['small_share_1']:.0f} %" in v["small_ops_text"]
    assert v["small_alt_floor_us"] == rec.base.launch_graph.value
    # a higher floor prices the small operations higher: the step moves the same way
    assert (v["small_alt_ms_1"] > v["bm_mk_ms_1"]) == (v["small_alt_floor_us"] > v["small_floor_us"])


def test_the_hidden_fraction_lists_its_points_and_definition(rec):
    """M-9: the shared expert's hidden fraction is the median of the points listed beside it, each saved time over
    the shared expert's own operations (not the decode-step chapter's shared/dense MLP component)."""
    b = dg.bare_metal_band(rec)
    pts = b.shown["hidden_points"]
    assert b.values["hidden_n"] == len(pts) > 0
    assert math.isclose(b.values["hidden_mid_pct"], 100 * pts["hidden_fraction"].median())
    assert math.isclose(float((pts["saved_us"] / pts["shared_us"]).clip(0, 1).median()), pts["hidden_fraction"].median())
    assert "shared/dense MLP" in b.values["hidden_def"] and "own operations" in b.values["hidden_def"]


def test_the_decode_step_overlap_table_carries_the_diagnosis_fraction():
    """M-9: the decode-step chapter's overlap table gives the diagnosis's fraction where the study timed the shared
    expert's own operations, so the two pages can be checked against each other."""
    from helpers.chapters.decode_step import precision as pr

    ps = mb.precision_study(None)
    ov = pr.overlap_steps(ps, 384)
    fr = vd.overlap_fractions(ps)
    got = ov.dropna(subset=["hidden_share"])
    assert len(got) == len(fr[fr["context"] == 384])
    for r in fr[fr["context"] == 384].itertuples():
        row = got[(got["precision"] == r.dtype) & (got["batch"] == r.batch)]
        assert math.isclose(float(row["hidden_share"].iloc[0]), r.hidden_fraction)


def test_the_eager_launch_input_says_why_it_stays_assumed(rec):
    """L-18: the eager launch cost stays the registered assumption; the page says so and shows the measured figure."""
    v = dg.bare_metal_band(rec).values
    assert v["eager_assumed_us"] == vd.collectives.EAGER_FLOOR_US()
    assert "never refitted" in v["eager_text"] and "added after the bare-metal comparison" in v["eager_text"]
    if rec.meas.meta.get("eager_us_per_kernel"):
        assert f"{v['eager_meas_us']:.1f} µs" in v["eager_text"]


def test_the_projection_leads_with_the_check_on_the_step_it_reads(rec):
    """L-20: where both checks fail, the component check on the step the chapter reads comes first and the fused
    study's bf16/FP8 check follows as supporting evidence from another GPU; 'every component is projected' is gone."""
    v = dg.measured_compute(rec).values
    text = v["pj_validity_text"]
    if v["pj_kept"] != "kept" and "its components take" in text and "bf16 and the FP8" in text:
        assert text.index("its components take") < text.index("bf16 and the FP8")
        assert "as supporting evidence from another GPU" in text
    assert "every component is projected" not in dg.PJ_TABLES_NONE


def test_the_observed_figures_show_their_ranges(rec):
    """L-12: the saturated point's lowest figure is the low end of a stated range; the table shows that range."""
    c = dg.check(rec)
    shown = c.shown["observations"]
    ranged = shown[shown["value"].isna() & shown["value_low"].notna()]
    assert len(ranged) and all("-" in s for s in ranged["tok_s_shown"])
    vm64 = shown[(shown["system"] == dg.VM) & (shown["concurrency"] == 64)]
    lows = pd.concat([vm64["value"].dropna(), vm64["value_low"].dropna()]).astype(float)
    assert c.values["sat_lo"] == float(lows.min())     # the page's lowest figure is one the table shows


def test_the_collective_median_names_its_sizes():
    """L-13: the all-to-all/all-reduce median says over which of the sweep's sizes it was taken."""
    from helpers.chapters.diagnosis import budget_sections as bs

    assert bs._sizes_words(pd.Series([1024.0, 2048.0, 786432.0])) == "median of the 3 sizes from 1 KiB to 768 KiB"


def test_the_expert_parallelism_page_says_whether_the_diagnosis_compares():
    """M-5 (item 11): 05 no longer says the diagnosis compares 06's all-to-all with its arithmetic on a one-GPU run."""
    from helpers.chapters import expert_parallelism as ep

    one = [{"system": "this machine: 1x NVIDIA H100 80GB HBM3", "count": 1}]
    assert "not compared in this run" in ep.diagnosis_compares(one, "auto")
    two = [{"system": "this machine: 2x NVIDIA H200", "count": 2}]
    assert "not compared" not in ep.diagnosis_compares(two, "auto")
    assert "the diagnosis chapter compares it with the arithmetic here." not in _markdown("05_expert_parallelism")


def test_the_vm_p2p_page_says_what_the_diagnosis_takes_from_its_fits():
    """M-6 (item 11): 06's fits of one GPU cross no link: the diagnosis prices none of them, and the page says so."""
    from helpers.chapters import vm_p2p as ch
    from helpers.core import layout

    fits = layout.Run(repo_root() / "runs" / "h100-20261206b", "06_vm_p2p").load("fits")
    assert ch.diagnosis_fits_text(fits, "replay") == ch.link.DIAGNOSIS_FITS_NONE
    assert ch.diagnosis_fits_text(None, "recorded") == ch.link.DIAGNOSIS_FITS_RECORDED
    md = _markdown("06_vm_p2p")
    assert "combines these fits" not in md and "(the diagnosis chapter reads it)" not in md
    assert "{glue:text}`diag_fits_text`" in md


def test_this_machines_reference_clause_names_a_table_only_where_one_exists():
    """L-22: 08 promises aiconfigurator's NCCL table only for a GPU kind it ships one for."""
    from helpers.chapters.this_machine import parts
    from helpers.model import thismachine as tm

    class V:
        def __init__(self, system):
            self.values = {"system": system}

    assert "none for NVIDIA H100 80GB HBM3" in parts.ar_reference(V("NVIDIA H100 80GB HBM3"))
    host = next(iter(tm.REFERENCE_HOSTS))
    assert "none for" not in parts.ar_reference(V(host))


def test_the_provenance_page_calls_a_computed_study_derived():
    """L-4: the FP8 numerics study computed numbers on a CPU; its row reads derived, though it lives under measured."""
    from helpers.chapters import provenance as pv
    from helpers.core import recorded

    src = recorded.sources()
    assert src["fp8-numerics-cpu-20261204"]["kind"] == "measured"     # where it lives (data/measured/)
    tab = pv.sources_table({"x": pd.DataFrame({"source": []})})
    assert tab.set_index("source").loc["fp8-numerics-cpu-20261204", "kind"] == "derived"
