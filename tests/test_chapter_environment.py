"""The environment chapter's tables and the values its prose cites (helpers.chapters.environment), on the
recorded machine, on a fixture probe of a one-H200 VM and on a live probe of this machine. Moved from
test_probe.py with the code they test."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.chapters import environment as ch
from helpers.core import recorded
from helpers.machine import parsers, probe, recorded_machine, verdicts

FIX = Path(__file__).parent / "fixtures" / "probe"


def test_p2p_summary():
    assert ch.p2p_summary(None) == "no GPU pair" and ch.p2p_summary([["X"]]) == "no GPU pair"
    m = parsers.p2p_all(3, "OK")
    m[0][1] = "CNS"
    assert ch.p2p_summary(m) == "CNS on 1 of 6 ordered pairs, OK on 5 of 6 ordered pairs"


@pytest.mark.integration
def test_side_by_side_recorded_only_and_with_a_probe():
    hw = recorded.hardware()
    t = ch.side_by_side(hw, None)
    assert list(t.columns) == ["item", ch.RECORDED_COL, ch.MEASURED_COL, "note"]
    assert (t[ch.MEASURED_COL] == ch.NOT_PROBED).all()
    rec = dict(zip(t["item"], t[ch.RECORDED_COL]))
    assert rec["GPU count"] == str(hw["gpu_count"].value) and rec["CPU model"] == hw["cpu_model"].value
    assert rec["P2P read"].startswith(hw["p2p_read_all_pairs"].value + " on ")

    h200 = json.loads((FIX / "h200_firecracker_probe.json").read_text())
    mea = dict(zip(*ch.side_by_side(hw, h200)[["item", ch.MEASURED_COL]].T.values))
    assert mea["GPU model"] == "NVIDIA H200" and mea["GPU count"] == "1" and mea["GPU architecture"] == "SM90"
    assert mea["GPU PCIe link"] == "Gen5 x16 now, Gen5 x16 max" and mea["P2P read"] == "no GPU pair"
    assert "GiB" in mea["GPU memory"] and mea["hypervisor"] == "Firecracker"

    live = dict(zip(*ch.side_by_side(hw, probe.probe())[["item", ch.MEASURED_COL]].T.values))
    assert ch.NOT_PROBED not in live.values() and not any(v.startswith("unknown (") for v in live.values())


@pytest.mark.integration
def test_verdict_table():
    rec = recorded_machine.from_recorded(recorded.hardware())
    t = ch.verdict_table(rec)
    assert list(t.columns) == ["check", "verdict", "reason"] and list(t["check"]) == list(verdicts.CHECKS)
    assert t.set_index("check").loc["p2p_read", "verdict"] == "problem"
    assert ch.verdict_table(None) is None
    v = ch.verdict_view(t).set_index("check (verdict)")
    assert v.loc["p2p_read (problem)", "reason"] == t.set_index("check").loc["p2p_read", "reason"]
    t2 = ch.verdict_table(probe.probe())
    assert t2["verdict"].isin(verdicts.VERDICTS).all() and (t2["reason"].str.len() > 0).all()


def test_probe_tables_show_no_reprs_and_no_blanks():
    h200 = json.loads((FIX / "h200_firecracker_probe.json").read_text())
    for name, t in ch.probe_tables(h200).items():
        assert len(t.columns) <= 7, name
        for v in t.astype(str).values.ravel():
            assert v.strip() and "[" not in v and v not in ("None", "nan", "True", "False"), (name, v)
    soft = ch.probe_tables(h200)["software"].set_index("package")[ch.MEASURED_COL]
    assert soft["sglang"] == "not installed"


def test_recorded_facts_the_chapter_cites():
    hw = recorded.hardware()
    f = ch.recorded_facts(hw)
    n = int(hw["gpu_count"].value)
    assert f.rec_gpu_count == n and f.rec_pairs == n * (n - 1)
    assert f.rec_p2p_code == hw["p2p_read_all_pairs"].value and f.rec_virt == hw["virtualization"].value
    assert (f.rec_n_problem, f.rec_n_warn) == (1, 3)
    assert f.rec_flagged.split("; ")[1] == "p2p_read (problem)"  # the problem the chapter's prose names
    assert "probe" in f.rec_unknown.split(", ")


def test_a_recorded_item_the_chapter_cites_missing_fails_naming_it():
    hw = dict(recorded.hardware())
    del hw["hypervisor"]
    with pytest.raises(KeyError, match="no item 'hypervisor'"):
        ch.recorded_facts(hw)


def test_here_phrases_probed_and_not():
    assert ch.here_phrases(None).here_probe == ch.NOT_PROBED
    h200 = json.loads((FIX / "h200_firecracker_probe.json").read_text())
    h = ch.here_phrases(h200)
    assert "GPUs seen: 1 (NVIDIA H200)" in h.here_probe and h.here_verdicts.endswith("the worst is warn")
    assert ch.p2p_panel_label(h200).endswith("(one GPU, so no GPU pair)")
    # the kind of machine is helpers.machine.virt's, from every signal, as chapter 08 and page 1 state it
    assert h.here_p2p == "no GPU pair (1 GPU, measured)" and h.here_virt == "container in a VM (measured)"
    assert "kind of machine: container in a VM;" in h.here_probe
    assert ch.probe_where("replay", h200).startswith("The machine this run probed (1x NVIDIA H200, container in a VM, ")
    # systemd-detect-virt's empty answers read as no answer, never as its own "none" (bare metal)
    ev = ch.probe_tables(h200)["virtualization"].set_index("evidence")["value"]
    assert [ev[k] for k in ch.SYSTEMD_KEYS] == ["not installed or no answer"] * 3 and ev["dmi_sys_vendor"] == "none"
    assert ch.recorded_facts(recorded.hardware()).rec_p2p_not_ok == ch.recorded_facts(recorded.hardware()).rec_pairs
    assert "not probed" in ch.p2p_panel_label(None)
    tables = ch.probe_tables(h200)
    assert {"fingerprint", "gpus", "numa", "virtualization", "software"} <= set(tables)
    assert tables["gpus"].name.tolist() == ["NVIDIA H200"]
