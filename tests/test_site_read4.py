"""Site read 4 (of the site published after issue 44's fifth reading): the wording disagreements it found stay fixed.

M1/M2: 07_diagnosis says which all-reduce figure each section uses, per message size, as the code computes it.
M3: 06's harness share names both of its definitions, each computed from the same copies.
L1: aiconfigurator's data is its kernel tables (reference), not something "measured" by the book.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from helpers import repo_root
from helpers.chapters import vm_p2p as ch
from helpers.chapters.diagnosis.verdict_sections import tuned_curve_words
from helpers.core import recorded
from helpers.interconnect import suite
from helpers.model import kernels as kt
from helpers.model.verdict import collectives as cl

ROOT = Path(repo_root())
SIZES = (12288.0, 786432.0)   # the decision rule's message sizes: one token and 64 tokens of hidden 6144 in bf16


def _source(path: str) -> str:
    return (ROOT / path).read_text()


def test_the_middle_values_take_the_community_curve_as_the_page_says():
    """M2: section 3's middle values put the all-reduce on the community's tuned curve (collective_curve at 0);
    section 1 must not say that every later section uses aiconfigurator's table."""
    r = recorded.load("reference/prediction_ranges.csv").set_index("input")
    assert float(r.loc["collective_curve", "mid"]) == 0
    nb = _source("notebooks/07_diagnosis.ipynb")
    assert "which the later" not in nb
    assert "section 3's middle values take" in nb and "{glue:text}`tuned_curve_text`" in nb


def test_each_sizes_community_figure_names_the_part_of_the_curve_it_comes_from():
    """M1: at 12 KiB the tuned curve's smallest point held flat (assumed); at 768 KiB the tuner page's baseline read
    between its points (not extrapolated); the figures are the ones the predictor prices."""
    text = tuned_curve_words(list(SIZES))
    one, many = text.split("; ", 1)
    assert f"{cl.community_us(kt.RTX, 'all_reduce', SIZES[0]):.0f} µs at 12 KiB" in one and "held flat" in one
    assert f"{cl.community_us(kt.RTX, 'all_reduce', SIZES[1]):.0f} µs at 768 KiB" in many
    assert "tuner-page baseline" in many and "not extrapolated" in many
    nb = _source("notebooks/07_diagnosis.ipynb")
    assert "small messages only" not in nb and "is extrapolated to" not in nb


def test_the_harness_share_names_both_definitions_each_computed():
    """M3: whole eager copy times as bounds, and the issue cost (eager minus graph), each percentage from its own
    definition; no third figure."""
    cs = pd.read_csv(Path(__file__).parent / "fixtures" / "copies" / "h100_one_gpu_copy_sweep.csv")
    small = suite.recorded_copy_sweep().sort_values("size_bytes").iloc[0]
    h = ch.harness_floor(cs, small, "1x NVIDIA H100")
    rec, size = float(small.time_us), int(small.size_bytes)
    e = cs[(cs.harness == "eager") & (cs.size_bytes == size)].set_index("path")["time_us"]
    g = cs[(cs.harness == "graph") & (cs.size_bytes == size)].set_index("path")["time_us"]
    low = e.idxmin()
    whole = {f"{100 * e.min() / rec:.0f}", f"{100 * e['same_device'] / rec:.0f}"}
    issue = {f"{100 * (e[low] - g[low]) / rec:.0f}", f"{100 * (e['same_device'] - g['same_device']) / rec:.0f}"}
    t = h.harness_text
    assert "whole eager copy times as bounds" in t and "by the issue cost (eager minus graph)" in t
    assert set(re.findall(r"(\d+) %", t)) == whole | issue


def test_aiconfigurator_is_not_said_to_have_measured_for_the_book():
    """L1: the printed sentences call aiconfigurator's data its kernel tables, timed by aiconfigurator (reference)."""
    for path in ("src/helpers/model/measured/fidelity.py", "src/helpers/model/verdict/ranges.py",
                 "notebooks/07_diagnosis.ipynb", "notebooks/07_decode_step.ipynb", "data/reference/prediction_ranges.csv"):
        s = _source(path)
        for phrase in ("aiconfigurator measured SGLang", "two measured curves", "measured stand-in",
                       "measured on aiconfigurator's collection host"):
            assert phrase not in s, f"{path}: {phrase!r}"


# --- site-read4's items on pages 02-04 (a GPU run presents them; these guard the code that writes them) ---

def test_the_drift_change_never_reads_minus_zero():
    """L6: 51.2 ms then 51.1 ms printed "-0 %"."""
    from helpers.chapters.serving_load import drift_phrase

    d = {"flagged": False, "metric": "ttft", "first_ms": 51.2, "again_ms": 51.1, "change_pct": -0.2,
         "interval_ms": (50.0, 52.0)}
    said = drift_phrase(d)
    assert "-0 %" not in said and "+0 %" not in said and "-0.2 %" in said
    assert "no change to 0.1 %" in drift_phrase({**d, "again_ms": 51.2, "change_pct": -0.01})
    assert "+12 %" in drift_phrase({**d, "change_pct": 12.3})


def test_the_harness_checks_length_is_given_by_its_bounds_not_as_about_a_minute():
    """L5: the prerequisites said "about a minute", section 4 "26 s" and the target "40 s": the page now says the
    check is bounded by load_time_s and its own 60 s, and section 4 gives the time measured with the bound."""
    from types import SimpleNamespace

    from helpers.chapters.serving_load import status
    from helpers.serving.loadstudy import CHECK

    nb = _source("notebooks/03_baselines_tuning.ipynb")
    assert "about a minute" not in nb
    assert f"by its own {CHECK['time_s']:g} s" in nb
    study = SimpleNamespace(failed="", kind="check", points=[{"point_s": 12.0}, {"point_s": 14.0}], time_limit_s=40.0)
    assert status(study, True) == "run as a harness check, 26 s of measuring its load points within its bound of 40 s"


def test_a_run_that_chose_recorded_figures_says_so_not_that_a_package_is_missing():
    """L12: the h200 target shows chapter 04's recorded investigation by choice; the page gave "sglang is not
    installed" as the reason, and "this GPU generation" meant the original SM120, not the run's GPU."""
    import yaml

    from helpers.serving.config import ServerChoice
    from helpers.serving.experiments import RECORDED_WHY, runner_plan

    plan = runner_plan(ServerChoice(mode="recorded", engine="sglang"), ("flashinfer_cutlass",))
    assert not plan.live and plan.why == RECORDED_WHY and "not installed" not in plan.why
    target = yaml.safe_load(_source("targets/h200.yaml"))
    assert target["chapters"]["04_moe_runners"]["mode"] == "recorded"
    nb = _source("notebooks/04_moe_runners.ipynb")
    assert "this GPU generation" not in nb and "(SM120)" in nb
