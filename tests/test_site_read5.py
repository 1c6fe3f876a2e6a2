"""Site read 5 (run h100-20261206c, presented by 0537b87): the statements that disagreed stay in agreement.

N1: one basis for the host path's share of the loss: the step's all-reduces (the thresholds' and page 08's).
N2: which community run prices the middle values' all-reduce at each size, and its label.
N3-N14: the low items, each guarded where the code or the notebook writes the statement.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from helpers.core import recorded

import sitereads

ROOT, _source, _markdown = sitereads.ROOT, sitereads.source, sitereads.markdown


@pytest.fixture(scope="module")
def v():
    return sitereads.verdict()


# --- N1 -------------------------------------------------------------------------------------------------------------
def test_section_4s_share_is_the_thresholds_share_for_every_scenario(v):
    """N1: a scenario's share of the loss (section 4, the range every page quotes) is the share its all-reduce at the
    rule's size explains by the thresholds' formula t = r + s L / n: one computation, the all-gather left out."""
    a = v.attribution().set_index(["scenario_key", "concurrency"])
    ev = v.evidence().set_index(["scenario_key", "concurrency"])
    for key, c in a.index:
        assert a.loc[(key, c), "share_explained"] == pytest.approx(ev.loc[(key, c), "share_mid"], rel=1e-6, abs=1e-9), (key, c)


def test_the_all_gather_is_kept_for_the_remedies_not_for_the_share(v):
    """N1: the step's whole excess (the logits all-gather included) is a separate column, and only the remedies read it."""
    a = v.attribution()
    assert not np.allclose(a["step_excess_ms"], a["host_path_excess_ms"])   # the all-gather is priced in one only
    ring = v.scenario("copy_ring")
    assert v.excess_ms(1, ring, 0.5) == pytest.approx(float(a.query("scenario_key == 'copy_ring' and concurrency == 1")
                                                             ["host_path_excess_ms"].iloc[0]))
    remedy = _source("src/helpers/model/verdict/remedy.py")
    assert '["host_path_excess_ms"]' not in remedy and remedy.count('["step_excess_ms"]') == 3


def test_the_pages_state_the_shares_basis():
    """N1: section 4, section 5, page 08 and page 1 say the share counts the step's all-reduces (the all-gather not)."""
    nb = _markdown("notebooks/07_diagnosis.ipynb")
    four = nb[nb.index("## 4. The VM predicted"):nb.index("## 5. The decision rule")]
    assert "all-reduces above bare metal's over that loss" in four and "all-gather is left at bare metal's cost" in four
    five = nb[nb.index("## 5. The decision rule"):nb.index("## 6.")]
    assert "t(s) = r + s \\cdot L / n" in five and "the basis of section 4's shares" in five
    assert "all-gather" in _markdown("notebooks/08_this_machine.ipynb")
    assert "notebooks/07_diagnosis.ipynb::n_ar:d` all-reduces above bare metal's" in _source("intro.md")
    from helpers.chapters.diagnosis.answer import SHOWN

    assert SHOWN["attribution"]["host_path_excess_ms"] == "all-reduces above bare metal (ms)"


# --- N2 -------------------------------------------------------------------------------------------------------------
def test_each_size_names_its_community_run_and_label_in_the_short_form():
    """N2: 12 KiB is the tuned curve's smallest point held flat (assumed); 768 KiB the tuner page's baseline, a
    second run without the plugin (reference); page 1 and section 3 glue this clause, not 'the tuned curve, reference'."""
    from helpers.chapters.diagnosis.verdict_sections import tuned_curve_words
    from helpers.model import kernels as kt
    from helpers.model.verdict import collectives as cl

    one, many = tuned_curve_words([12288.0, 786432.0], short=True).split("; ")
    assert one.startswith("12 KiB:") and "held flat, assumed" in one
    assert f"{cl.community_us(kt.RTX, 'all_reduce', 12288.0):.0f} µs" in one
    assert many.startswith("768 KiB:") and "derived from the reference bus bandwidth of the community's tuner-page baseline, a second run without the tuner plugin" in many
    intro = _source("intro.md")
    assert "tuned NCCL curve, reference" not in intro and "07_diagnosis.ipynb::curve_source_text:s" in intro
    nb = _markdown("notebooks/07_diagnosis.ipynb")
    assert "{glue:text}`curve_source_text`" in nb and "tuned NCCL curve" not in nb


def test_the_collective_curve_row_names_the_second_run_and_what_is_not_stated():
    """N2: the row says which run gives each size, and that the source does not state the baseline's settings; its
    registered values are unchanged (0 / 0 / 1)."""
    r = recorded.load("reference/prediction_ranges.csv").set_index("input").loc["collective_curve"]
    assert (float(r["low"]), float(r["mid"]), float(r["high"])) == (0.0, 0.0, 1.0)
    why = str(r["why"])
    assert "tuner-plugin page's baseline without the plugin" in why and "held flat (assumed)" in why
    assert "whether it used the graph XML or 8 channels: not stated" in why
    assert "(0, the point estimate: the settings" not in why
    base = recorded.load("reference/nccl_community.csv")
    base = base[base["curve"] == "tuner page baseline"]
    assert len(base) and not base["settings"].str.contains("XML").any()   # the source states no graph XML for it


# --- N3 -------------------------------------------------------------------------------------------------------------
def test_the_seed_copy_is_given_gross_and_net_on_one_basis():
    """N3: once per all-reduce and at each of a ring's 14 steps, gross and net of bare metal's all-reduce."""
    from helpers.chapters.diagnosis.verdict_sections import seed_claim_shares

    s = seed_claim_shares(13.7, 157, 27.0, 71.07)
    assert s["seed_ring_steps"] == 14
    assert s["seed_ring_gross_pct"] == pytest.approx(100 * 14 * 13.7 * 157 / 1e3 / 71.07)
    assert s["seed_ring_net_pct"] == pytest.approx(100 * (14 * 13.7 - 27.0) * 157 / 1e3 / 71.07)
    assert s["seed_once_net_text"].startswith("nothing net of bare metal's 27 µs")
    assert seed_claim_shares(40.0, 157, 27.0, 71.07)["seed_once_net_text"].startswith("3 % net")
    nb = _markdown("notebooks/07_diagnosis.ipynb")
    for key in ("seed_floor_pct:.0f` % of the\none-stream loss gross", "seed_once_net_text", "seed_ring_gross_pct",
                "seed_ring_net_pct", "seed_ring_pct"):
        assert key in nb, key


# --- N4 -------------------------------------------------------------------------------------------------------------
def test_the_pcie_pages_figure_beyond_its_timed_sizes_is_labelled_held_flat_assumed():
    """N4: the input table, the mapping table and the figure's caption say 'held flat' (assumed) beyond 32 KiB."""
    from helpers.model import budget as bd

    link = bd.reference_allreduce_link(8)
    assert bd.held_flat(link.alpha_us, link.beta_GBps) and "held flat beyond (assumed)" in link.source
    assert not bd.held_flat(10.0, 20.0)   # a real bandwidth term is extrapolated, not held flat
    src = _source("src/helpers/chapters/diagnosis/budget_sections.py")
    assert 'beyond its timed sizes: assumed (us)' in src and "np.nan if ok else t" in src
    nb = _markdown("notebooks/07_diagnosis.ipynb")
    assert "extrapolated beyond" not in nb and "held flat beyond them: assumed" in nb
    assert "256 B to 32 KiB" not in nb


# --- N5 -------------------------------------------------------------------------------------------------------------
def test_the_one_stream_reference_step_has_one_label_in_the_answer():
    """N5: 19.8 ms is 'derived from the community's reference' in both places of the answer box."""
    nb = _markdown("notebooks/07_diagnosis.ipynb")
    assert "reference {glue:text}`ans_bm_obs_1" not in nb
    assert nb.count("{glue:text}`ans_bm_obs_1:.1f` ms derived from the community's reference") == 1


# --- N6 -------------------------------------------------------------------------------------------------------------
def test_the_collective_spread_row_is_set_by_the_commit_that_set_its_present_range():
    """N6: the present 1 / 1 / 1 was set at b1dea57; 4483241 and 9f00641 stay in its history."""
    from helpers.model.verdict.ranges import collective_range

    r = collective_range()
    assert (r.low, r.mid, r.high) == (1.0, 1.0, 1.0) and r.registered.startswith("commit b1dea57")
    row = r.row()["why"]
    assert "set by commit b1dea57" in row and "4483241" in row and "9f00641" in row


# --- N7 -------------------------------------------------------------------------------------------------------------
def test_the_routing_skew_row_says_timed_by_aiconfigurator_reference():
    """N7: aiconfigurator timed its MoE kernel under three routings (its tables, reference)."""
    why = str(recorded.load("reference/prediction_ranges.csv").set_index("input").loc["routing_skew", "why"])
    assert "aiconfigurator measured" not in why and "aiconfigurator timed its MoE kernel" in why and "reference" in why


# --- N8 -------------------------------------------------------------------------------------------------------------
def test_each_memory_row_says_how_its_capacity_was_read():
    """N8: the recorded GPUs' '96 GB' is read as GiB and the H200's datasheet GB as 10^9 B; each row says so and
    its bytes follow its words."""
    from helpers.model import arith as ma
    from helpers.model import placement as pl

    rows = pl.systems(recorded.hardware(), recorded.load("reference/gpu_specs.csv"), [])
    rec, h200 = rows[0], rows[1]
    assert "read as GiB" in rec["system"] and rec["memory_bytes"] % ma.GiB == 0
    assert "read as GB, 10^9 B" in h200["system"] and h200["memory_bytes"] % ma.GB == 0
    assert "(read as GiB; the H200 row below reads its datasheet's GB as 10^9 bytes" in _markdown(
        "notebooks/05_expert_parallelism.ipynb")


# --- N9 -------------------------------------------------------------------------------------------------------------
def test_the_gap_tables_head_their_columns_as_medians_per_size():
    """N9: the gap and ratio columns are medians of per-size gaps and ratios (fidelity.gap_summary), not the median
    time's difference or quotient; the page's headers say so."""
    from helpers.chapters.vm_p2p import fidelity as fi
    from helpers.interconnect import fidelity, studies

    gap = studies.gap("allreduce-gap-stream")
    shown = fi.gap_shown(gap)
    assert {"gap to nccl-tests, median per size (us)", "ratio to nccl-tests, median per size"} <= set(shown.columns)
    # the columns are what the headers say: recomputed per size, then the median
    s = fidelity.gap_summary(gap)
    small = gap[gap.size_bytes < 65536]
    tool = small[(small.who == "nccl-tests") & small.tool_shape.astype(str).str.startswith("-np")]
    r = s.iloc[0]
    ours = small[(small.iters == r.iters) & (small.method == r.method) & (small.nccl_setting == r.nccl_setting)]
    ref = tool.set_index(["iters", "nccl_setting", "size_bytes"]).time_us
    per = ours.time_us.to_numpy() / ref.reindex(list(zip(ours.iters, ours.nccl_setting, ours.size_bytes))).to_numpy()
    if np.isfinite(per).any():
        assert r.ratio == pytest.approx(float(np.nanmedian(per)))
    src = _source("src/helpers/chapters/vm_p2p/sections.py")
    assert "fi.gap_shown(gap)" in src and "fi.gap_shown(idle)" in src and "fi.gap_table(" not in src
    assert "the median of its per-size ratios" in _markdown("notebooks/06_vm_p2p.ipynb")


# --- N10, N11, N13: page 08 on the published one-GPU run -------------------------------------------------------------
@pytest.fixture(scope="module")
def published():
    from helpers.book.publish import site_run
    from helpers.chapters import this_machine as ch
    from helpers.core import layout

    return ch.inputs(layout.Run(ROOT / site_run(ROOT), ch.CHAPTER), "replay")


def _verdict(inp):
    from helpers.chapters import this_machine as ch

    return ch.verdict(inp, predictor=lambda system, batch: "no GLM-5 decode prediction for this GPU: test")


def test_one_gpu_says_no_collective_between_gpus_and_names_06s_one_rank_floor(published):
    """N10: 08 says no collective BETWEEN GPUs was timed, and gives chapter 06's one-rank NCCL figure at 12 KiB from
    the run's sweep."""
    from helpers.model import thismachine as tm

    v = _verdict(published)
    line = v.lines["allreduce"]
    floor = tm.one_rank_floor_us(published.sweep, 12288.0)
    assert floor is not None and "no collective between GPUs to time" in line
    assert f"chapter 06 timed NCCL on one rank, {floor:.1f} µs at 12 KiB (measured, eager)" in line
    assert "no collective between GPUs" in v.values["ar_untimed"]
    one = pd.DataFrame([{"op": "all_reduce", "backend": "nccl", "variant": "default", "harness": "eager",
                         "world_size": 1, "size_bytes": s, "time_us": t} for s, t in ((8192, 14.0), (16384, 16.0))])
    w = (math.log(12288) - math.log(8192)) / (math.log(16384) - math.log(8192))   # log-log, as at_sizes reads a curve
    assert tm.one_rank_floor_us(one, 12288.0) == pytest.approx(math.exp((1 - w) * math.log(14) + w * math.log(16)))
    assert tm.one_rank_floor_us(one.assign(world_size=2), 12288.0) is None   # two ranks are not the one-rank floor


def test_the_stand_in_names_its_engine_once_with_the_recorded_version(published):
    """N11: 'transformers (transformers)' named the engine twice; the version comes from the run's probe."""
    from helpers.chapters.this_machine.parts import stand_in_words

    v = _verdict(published)
    version = published.probe["software"]["transformers"]
    assert f"chapter 03 served transformers {version} (the environment probe's record), a stand-in" in v.lines["observed"]
    assert "(transformers)" not in v.lines["observed"]
    assert stand_in_words({"engine": "vllm", "served_model": "tiny"}, None) == "tiny through vllm (its version not recorded)"


def test_not_predicted_points_to_the_emulated_rank_step_measured_here(published):
    """N13: 08 names the decode-step chapter's emulated-rank step on this GPU, from the run's own timings."""
    t = pd.read_csv(ROOT / published_run_dir() / "results" / "07_decode_step" / "step_times.csv")
    g = t[(t.what == "step") & (t["mode"] == "graph") & (t.context == 384) & (t.attention == "dense")].set_index("batch")
    line = _verdict(published).lines["predicted"]
    assert line.startswith("not predicted: ")
    assert (f"{g.loc[1, 'median_us'] / 1e3:.1f} ms for 1 sequence and {g.loc[64, 'median_us'] / 1e3:.1f} ms for 64" in line)
    assert "not a prediction of the served model" in line


def published_run_dir() -> str:
    from helpers.book.publish import site_run

    return site_run(ROOT)


# --- N12 ------------------------------------------------------------------------------------------------------------
def test_check_1_prints_every_signal_the_verdict_reads():
    """N12: the intro's check 1 prints the command of every signal helpers.machine.virt judges (kernel hints and the
    container markers found the published VM)."""
    from helpers.machine import virt

    block = re.search(r"```bash\n(.*?)```", _source("intro.md"), re.S).group(1)
    check1 = block[block.index("# 1."):block.index("# 2.")]
    for key, (_, command) in virt.SIGNALS.items():
        assert command in check1, f"check 1 lacks {key}: {command!r}"


# --- N14 ------------------------------------------------------------------------------------------------------------
def test_the_fp8_routing_shares_are_given_to_one_decimal():
    """N14: 0.525, 0.025 and 0.375 rounded to whole percents went two ways (half to even); one decimal holds them."""
    nb = _markdown("notebooks/07_decode_step.ipynb")
    for key in ("flips_fp8", "flips_bf16", "tok_fp8"):
        assert f"{{glue:text}}`{key}:.1f`" in nb and f"`{key}:.0f`" not in nb
