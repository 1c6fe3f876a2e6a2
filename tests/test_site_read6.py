"""Site read 6 (of the published run presented by fe1109c): the statements that disagreed stay in agreement.

R1: the 64-stream share bands say what they draw (the decode batch's two ends, so two losses) where a band or the
range is shown. R2: the CUDA-graph bound on the original VM is given at this host's launch costs and at the ones
the diagnosis assumes. R3-R11: the low items, each guarded where the code or the notebook writes the statement.
"""
from __future__ import annotations


import pandas as pd
import pytest

from helpers.core import recorded

import sitereads

ROOT, _source, _markdown = sitereads.ROOT, sitereads.source, sitereads.markdown


@pytest.fixture(scope="module")
def v():
    return sitereads.verdict()


# --- R1 -------------------------------------------------------------------------------------------------------------
def test_each_64_stream_band_end_is_rebuilt_from_the_batch_it_was_drawn_at(v):
    """R1: every 64-stream band end is the share of the model's low or high all-reduce at the decode batch the row
    names (the achieved 34.89 or 64 in flight) over that batch's loss: what the page now says it draws."""
    b = v.share_band_basis()
    r = v.inputs.get("batch_at_nominal_64", "original VM")
    assert (b["batch_lo"], b["batch_hi"]) == (r.low, r.high) and b["batch_lo"] < b["batch_hi"]
    assert b["loss_lo_ms"] < b["loss_hi_ms"] and b["message_lo_bytes"] < b["message_hi_bytes"]
    a = v.attribution()
    g = a[a["concurrency"] == 64]
    assert set(g["share_low_batch"]) | set(g["share_high_batch"]) <= {b["batch_lo"], b["batch_hi"]}
    for row in g.itertuples():
        hp = v.scenario(row.scenario_key)
        for share, at in ((row.share_low, row.share_low_batch), (row.share_high, row.share_high_batch)):
            loss = b["loss_lo_ms"] if at == b["batch_lo"] else b["loss_hi_ms"]
            ends = [v.excess_ms(64, hp, q, at) / loss for q in (0.0, 1.0)]
            assert any(share == pytest.approx(e, abs=1e-12) for e in ends), (row.scenario_key, at)
    # the 2x H200 row: the same all-reduce at 768 KiB at its low and middle values, its lower end at the achieved batch
    h = g.set_index("scenario_key").loc["pair_h200"]
    ev = v.evidence().set_index(["scenario_key", "concurrency"]).loc[("pair_h200", 64)]
    assert ev["low_us"] == pytest.approx(ev["mid_us"]) and h["share_low"] < h["share_explained"]
    assert h["share_low_batch"] == b["batch_lo"]


def test_the_pages_say_what_the_64_stream_bands_draw(v):
    """R1: section 4's prose, its table's title and section 5's conclusion state the decode batch's range and the
    two losses beside the 64-stream range; section 5's table points at the middle column only."""
    from helpers.chapters.diagnosis.verdict_sections import band_basis_words, envelope_end_words

    words = band_basis_words(v)
    b = v.share_band_basis()
    assert f"from the achieved {b['batch_lo']:g} to {b['batch_hi']:g} in flight" in words
    assert f"a loss of {b['loss_lo_ms']:.0f}-{b['loss_hi_ms']:.0f} ms" in words
    assert f"a loss of {b['loss_lo_ms']:.0f}-{b['loss_hi_ms']:.0f} ms" in band_basis_words(v, short=True)
    ends = envelope_end_words(v, v.attribution())
    assert "2x H200" in ends and f"{b['message_lo_bytes'] / 1024:.0f} KiB over {b['loss_lo_ms']:.0f} ms" in ends
    nb = _markdown("notebooks/07_diagnosis.ipynb")
    four = nb[nb.index("## 4. The VM predicted"):nb.index("## 5. The decision rule")]
    assert "{glue:text}`share_range_64` at 64 over the admissible scenarios ({glue:text}`band_basis_64`; " \
           "the 64-stream range's ends: the next fold)" in four
    assert ":::{dropdown} The scenarios set aside, and the models at the 64-stream range's ends" in four
    assert "At 64 streams, {glue:text}`band_ends_64`." in four
    folds = _source("src/helpers/chapters/diagnosis/folds.py")
    assert "s.values['band_basis_64']" in folds and "(its share of the loss: section 4)" not in folds
    assert "the middle column's share of the loss is section 4's middle" in folds
    from helpers.model import verdict as vd

    _, text = vd.conclusion(v.evidence(), v.thresholds(), v.share_envelope(), basis={64: band_basis_words(v, True)})
    assert f"a loss of {b['loss_lo_ms']:.0f}-{b['loss_hi_ms']:.0f} ms" in text
    assert "basis={64: band_basis_words(v, short=True)}" in _source("src/helpers/chapters/diagnosis/verdict_sections.py")


def test_no_registered_input_moved_for_r1():
    """R1 changed words, not the draws: batch_at_nominal_64 keeps its registered range."""
    r = recorded.load("reference/prediction_ranges.csv").set_index(["input", "system"]).loc[
        ("batch_at_nominal_64", "original VM")]
    assert (float(r["low"]), float(r["mid"]), float(r["high"])) == (34.89, 64.0, 64.0)


# --- R2 -------------------------------------------------------------------------------------------------------------
def test_the_graph_bound_is_given_at_this_hosts_costs_and_at_the_diagnosis_assumed_ones():
    """R2: 07_decode_step's bound on the original VM names its launch costs as this host's and gives the same bound,
    by the same code, at the costs the diagnosis assumes (its first budget's 6 / 1.5 µs), which the diagnosis keeps."""
    from helpers.chapters import decode_step as sr
    from helpers.model import arith as ma
    from helpers.model import budget as bd
    from helpers.model import measured as mb

    m = ma.load_model("glm5")
    tab, vals = sr.tuning(mb.step_measurement(None), m, 384)
    base = bd.baseline_scenario(m)
    assert (vals["eager_assumed_us"], vals["graph_floor_assumed_us"]) == (base.launch_eager.value,
                                                                        base.launch_graph.value)
    assert vals["graph_assumed_ms"] == pytest.approx(bd.kernels_per_step(m) * (base.launch_eager.value
                                                                               - base.launch_graph.value) / 1e3)
    assert vals["graph_assumed_gain"] == pytest.approx(vals["vm_step_ms"] / (vals["vm_step_ms"] - vals["graph_assumed_ms"]))
    assert {sr.GRAPHS_HERE, sr.GRAPHS_ASSUMED} <= set(tab["tuning"])
    nb = _markdown("notebooks/07_decode_step.ipynb")
    assert "this host's costs, not the recorded host's" in nb
    for key in ("eager_assumed_us:.1f", "graph_floor_assumed_us:.1f", "graph_assumed_ms:.0f", "graph_assumed_gain:.2f"):
        assert f"{{glue:text}}`{key}`" in nb, key
    # the diagnosis's registered eager launch stays the assumed figure
    from helpers.model.verdict import collectives as cl

    assert float(cl.EAGER_FLOOR_US()) == base.launch_eager.value


# --- R3 -------------------------------------------------------------------------------------------------------------
def test_component_shares_are_named_shares_of_the_components_sum():
    """R3: the split's share column is of the components' sum (not of the step), and both the header and the prose
    say so."""
    from helpers.chapters.decode_step.shown import SPLIT_SHOWN_HUMAN

    assert SPLIT_SHOWN_HUMAN["share"] == "share of the components' sum (%)"
    assert 'df["share"] = df["time_us"] / df["time_us"].sum()' in _source("src/helpers/chapters/decode_step/measurement.py")
    nb = _markdown("notebooks/07_decode_step.ipynb")
    assert "routed experts take {glue:text}`share1_moe:.0f` % of the step" not in nb
    assert "At one sequence, of the components' time (each timed alone; their sum is {glue:text}`sum_vs_step_1:.2f`" in nb


# --- R4 -------------------------------------------------------------------------------------------------------------
def test_the_768_kib_all_reduce_is_derived_from_the_baselines_bus_bandwidth_everywhere():
    """R4: the short clause (page 1, section 3), the long one (section 5) and the collective_curve row all call the
    91 µs derived from the tuner-page baseline's bus bandwidth (reference)."""
    from helpers.chapters.diagnosis.verdict_sections import tuned_curve_words

    short = tuned_curve_words([786432.0], short=True)
    long = tuned_curve_words([786432.0])
    assert "derived from the reference bus bandwidth of the community's tuner-page baseline" in short
    assert "second run without the tuner plugin, reference" not in short
    assert "baseline (reference)" in long and "derived from its bus bandwidth" in long
    assert ": reference, not extrapolated" not in long
    why = str(recorded.load("reference/prediction_ranges.csv").set_index("input").loc["collective_curve", "why"])
    assert "derived from its bus bandwidth" in why


# --- R5 -------------------------------------------------------------------------------------------------------------
def test_check_1_and_chapter_01s_verdict_name_both_rules():
    """R5: where check 1 fails (page 1's table, 08's line) the page says chapter 01's verdict warns on the same VM
    and why; chapter 01's verdict says check 1 fails on any VM."""
    from helpers.machine import verdicts, virt

    assert "chapter 01's verdict grades the same VM warn" in virt.CHECK1_RULE
    intro = _source("intro.md")
    row = next(ln for ln in intro.splitlines() if ln.startswith("| 1 |"))
    assert "chapter 01's verdict grades the same VM warn, not problem" in row
    assert 'f" ({virt.CHECK1_RULE})" if vv.passes is False' in _source("src/helpers/chapters/this_machine/lines.py")
    v = verdicts._virtualization({"virtualization": {"kind": "vm", "hypervisor": "kvm"}}, [], 8)
    assert v.verdict == "warn" and "check 1 fails on any VM" in v.reason


# --- R6 -------------------------------------------------------------------------------------------------------------
def test_one_rank_collectives_are_rounded_once_from_the_saved_value():
    """R6: chapter 06's decode-size table hands the table helper the saved value unrounded (24.8496 µs read 24.9
    after a first rounding to 3 decimals, 24.8 in the diagnosis)."""
    from helpers.chapters.vm_p2p.sweeps import decode_collectives
    from helpers.core import tables

    coll = pd.DataFrame([{"op": "all_reduce", "backend": "nccl", "variant": "default", "world_size": 1,
                          "method": "eager", "size_bytes": 786432, "time_us": 24.8496, "time_us_p10": 24.49,
                          "time_us_p90": 27.93, "algbw_GBps": 31.65, "busbw_GBps": 0.0}])
    d = decode_collectives(coll, [786432])
    assert float(d["time_us"].iloc[0]) == 24.8496
    shown = str(tables.table(d))
    assert "24.8" in shown and "24.9" not in shown


# --- R7 -------------------------------------------------------------------------------------------------------------
def test_the_fits_are_labelled_derived_in_the_prose_as_in_their_table():
    """R7: 06's fit sentence labels both fits derived, fitted to measured or recorded copies."""
    from helpers.chapters.vm_p2p import sweeps

    fits = pd.DataFrame([{"path": "host_bounce", "harness": "eager", "alpha_us": 14.1, "beta_GBps": 28.6}])
    text = sweeps.fit_text(fits, pd.Series({"alpha_us": 13.0, "beta_GBps": 28.6}))
    assert "(derived: fitted to measured copies)" in text and "(derived: fitted to recorded copies)" in text
    assert "measured, fitted" not in text and "recorded, fitted" not in text


# --- R8 -------------------------------------------------------------------------------------------------------------
def test_the_takeaway_quotes_the_idle_lead_studys_nccl_tests_time():
    """R8: 06 section 3's takeaway gives the idle-lead study's nccl-tests time and its all-reduces per graph, glued
    from the same keys section 4 uses."""
    nb = _markdown("notebooks/06_vm_p2p.ipynb")
    assert "its idle-lead study times the same tool again" not in nb
    assert ("its idle-lead study times the same tool at {glue:text}`fid_idle_tool_us:.2f` µs with "
            "{glue:text}`fid_idle_iters` all-reduces per graph") in nb
    assert nb.count("{glue:text}`fid_idle_tool_us:.2f`") == 2


# --- R9 -------------------------------------------------------------------------------------------------------------
def test_the_rerun_page_says_a_recorded_chapter_is_the_targets_choice():
    """R9: the h200 line says chapter 04 is recorded by the target's choice (singular), not for want of hardware."""
    from helpers.book import rerun

    assert rerun._span(["04"]) == "Chapter 04"
    page = _source("appendix/rerun.md")
    line = next(ln for ln in page.splitlines() if ln.startswith("- `h200`"))
    assert f"Chapter 04 shows the recorded investigation {rerun.BY_CHOICE}" in line
    assert "Without that hardware: chapters 04" not in line
    from helpers.book.targets import load_target

    assert "mode: recorded" in _source("targets/h200.yaml")
    said = rerun.without_hardware(load_target("h200", ROOT), ROOT)   # what the generator writes for the line
    assert said.startswith("Chapter 04 shows the recorded investigation") and said in line


# --- R10 ------------------------------------------------------------------------------------------------------------
def test_the_container_in_a_vm_names_every_signal_that_found_it():
    """R10: 'container in a VM' names the VM's signals and the container marker that found the container half."""
    from helpers.machine import virt

    v = virt.judge({"cpuinfo_hypervisor_flag": True, "container_hints": ["/.dockerenv exists"],
                    "kernel_hints": ["firecracker"], "hypervisor": "Firecracker"})
    assert v.kind == "container in a VM"
    assert v.line() == ("container in a VM (Firecracker): found by CPUID hypervisor bit, kernel hints (VM) and "
                        "container markers (container)")
    bare = virt.judge({"cpuinfo_hypervisor_flag": True, "hypervisor": "kvm"})
    assert bare.line() == "VM (kvm): found by CPUID hypervisor bit"


# --- R11 ------------------------------------------------------------------------------------------------------------
def test_the_bare_metal_error_is_shown_to_one_decimal():
    """R11: section 3's error against the reference is shown to one decimal in the prose and in both tables, so a
    reader recomputing it from the rounded 52.7 and 50.4 does not read 5 % against 4 %."""
    nb = _markdown("notebooks/07_diagnosis.ipynb")
    assert "{glue:text}`bmb_err_1:+.1f` %" in nb and "{glue:text}`bmb_err_64:+.1f` %" in nb
    assert "bmb_err_1:+.0f" not in nb
    folds = _source("src/helpers/chapters/diagnosis/folds.py")
    assert 'digits={"error (%)": 1' in folds
    assert '"this book\'s error (%)": 1, "aiconfigurator\'s error (%)": 1' in folds


def test_check_1s_columns_cover_a_container_on_bare_metal_as_the_code_judges_it():
    """site-read7 S5: page 1's check-1 row made "no container marker" a condition to pass while failing only on a
    hypervisor or a sandbox; the code passes a container on bare metal (helpers.machine.virt.judge), and so must
    the row."""
    from helpers.machine import virt

    row = next(line for line in _source("intro.md").splitlines() if line.startswith("| 1 |"))
    assert "no container marker" not in row and "a container marker alone passes" in row
    bare_container = {"container": "docker", "container_hints": ["/.dockerenv exists"],
                      "cpuinfo_hypervisor_flag": False, "dmi_sys_vendor": "Supermicro", "dmi_product_name": "SYS-4029GP",
                      "hypervisor": None, "kernel_hints": [], "systemd_detect_virt": "docker", "vm": "none"}
    v = virt.judge(bare_container)
    assert (v.kind, v.passes) == ("container on bare metal", True)
