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
