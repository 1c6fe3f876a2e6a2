"""Page 1's host checks (intro.md, issue 24 item 5): commands and flags in code blocks, held to data/."""
import re
from pathlib import Path

from helpers.chapters import provenance
from helpers.core import recorded
from helpers.model import arith as ma

ROOT = Path(__file__).resolve().parents[1]
INTRO = (ROOT / "intro.md").read_text()
BLOCKS = re.findall(r"```bash\n(.*?)```", INTRO, re.S)


def _lines():
    return [ln.split("#")[0].strip() for b in BLOCKS for ln in b.splitlines() if ln.split("#")[0].strip()]


def test_the_host_checks_are_commands_in_a_code_block():
    cmds = _lines()
    assert "nvidia-smi topo -p2p r" in cmds, "intro.md: no code line `nvidia-smi topo -p2p r`"
    # check 1 reads every signal helpers.machine.virt judges, not systemd-detect-virt --vm alone (issue 44: the
    # published run, a container in a Firecracker VM, answers none to it or lacks it)
    from helpers.machine import virt
    one = next(c for c in cmds if "systemd-detect-virt --vm" in c)
    for key in ("cpuid", "detect_virt", "detect_virt_vm"):
        assert virt.SIGNALS[key][1] in one, f"check 1's command lacks {virt.SIGNALS[key][1]!r}"
    # every other signal's command follows on check 1's own lines (site-read5 N12: tests/test_site_read5.py)
    assert any("sys_vendor" in c for c in cmds)
    assert any(c.startswith("./build/all_reduce_perf ") and "-g 8" in c for c in cmds)
    assert any(c.startswith("make run TARGET=") for c in cmds)


def test_the_book_command_names_a_target_that_sweeps_copies_and_all_reduces_on_every_gpu():
    from helpers.book.targets import load_target
    cmd = next(c for c in _lines() if c.startswith("make run TARGET="))
    t = load_target(cmd.split("TARGET=")[1].split()[0], ROOT)
    vm = t.chapters.get("06_vm_p2p") or {}
    assert t.parameters.get("mode") == "auto" and vm.get("world_size") == 0 and vm.get("sweep") == "full"


def test_all_reduce_perf_runs_at_the_decode_sizes_of_1_and_64_tokens():
    cmd = next(c for c in _lines() if "all_reduce_perf " in c)
    size = lambda flag: int(re.search(rf"{flag} (\d+)\b", cmd).group(1))  # noqa: E731  bytes, as the diagnosis's
    m = ma.load_model("glm5")
    assert size("-b") == int(ma.allreduce_bytes(m, 1))
    assert size("-e") == int(ma.allreduce_bytes(m, 64))
    assert re.search(r"-f (\d+)", cmd) and 64 % int(re.search(r"-f (\d+)", cmd).group(1)) == 0


def test_the_nan_fix_flags_are_the_data_s_then_and_now():
    checks = provenance.host_checks(provenance.all_tables())
    code = "\n".join(BLOCKS)
    assert checks.chk_nan_then in code, f"intro.md's code has not the investigation's NaN fix {checks.chk_nan_then!r}"
    assert checks.chk_nan_now in code, f"intro.md's code has not today's NaN-fix flags {checks.chk_nan_now!r}"
    lines = code.splitlines()
    i = next(i for i, ln in enumerate(lines) if checks.chk_nan_now in ln)
    assert f"SGLang {checks.chk_sglang_now}" in lines[i - 1], lines[i - 1]
    # the data the flags come from: the investigation's launch line and the renamed flags
    fix = recorded.load("recorded/launch_config.csv").query("note == 'the NaN fix'")
    assert set(fix.name) <= set(recorded.load("reference/sglang_flags.csv").flag_then)


def test_no_typographic_dash_inside_a_flag_and_flags_only_in_code():
    assert not re.search(r"[\u2013\u2014]-?[a-z]", "\n".join(BLOCKS))
    prose = re.sub(r"```.*?```", "", INTRO, flags=re.S)
    prose = re.sub(r"`[^`]*`", "", prose)
    assert not re.search(r"(?<![\w-])--[a-z]", prose), "a flag in intro.md's prose outside code"


def test_the_run_line_says_it_names_the_machine_that_ran_this_run():
    line = INTRO[INTRO.index("book-run-line"):]
    assert "{{ site_machine }}" in line[:400] and "not the original" in line[:400]


def test_the_host_check_figures_are_the_rows_they_cite():
    """Independently of the picks: the raw rows of data/reference/ the page-1 figures come from."""
    import pandas as pd
    c = provenance.host_checks(provenance.all_tables())
    ref = pd.read_csv(recorded.data_dir() / "reference" / "baremetal.csv")
    p2p = ref[(ref.metric == "p2p_latency") & ref.system.str.contains("with P2P")].iloc[0]
    assert (c.chk_p2p_lo, c.chk_p2p_hi) == (p2p.value_low, p2p.value_high)
    assert c.chk_nop2p == ref[(ref.metric == "p2p_latency") & ref.system.str.contains("without")].value.iloc[0]
    assert c.chk_ar_kib == 12 and c.chk_pcie8 == ref[ref.metric == "allreduce_time"].value.iloc[0]


def test_the_provenance_table_of_page_1_figures_lists_what_page_1_shows():
    """Reading item 12: 90_provenance's "Every figure page 1 takes from this page" listed the H200 pair's
    all-reduce at 12 KiB (7.88, 14.25 us) while page 1 shows chapter 06's at 16 KiB; the table now holds exactly
    the keys intro.md glues from that page, plus the NaN-fix flags its code block carries verbatim."""
    t = provenance.all_tables()
    h, c = provenance.headline(t), provenance.host_checks(t)
    table = provenance.headline_table(h, c)
    glued = set(re.findall(r"90_provenance\.ipynb::([a-z0-9_]+)", INTRO))
    assert set(table.key) - glued == {"chk_nan_then", "chk_nan_now"}, set(table.key) - glued
    assert glued <= set(table.key)
    assert c.chk_nan_then in "\n".join(BLOCKS) and c.chk_nan_now in "\n".join(BLOCKS)


def test_a_missing_rename_of_a_nan_fix_flag_fails_naming_it():
    import pytest
    t = provenance.all_tables()
    t["reference/sglang_flags.csv"] = t["reference/sglang_flags.csv"].iloc[1:]
    with pytest.raises(recorded.DataError, match="--nsa-prefill-backend"):
        provenance.host_checks(t)


def test_every_cross_page_glue_text_has_a_format():
    """myst-nb splits a {glue:text} reference at its last colon: `path.ipynb::key` without a format reads as key
    'path.ipynb:' and breaks the strict build; strings take `:s`, integers `:d`."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for page in [root / "intro.md", *sorted((root / "appendix").glob("*.md"))]:
        bad = re.findall(r"\{glue:text\}`([^`]*\.ipynb::[A-Za-z0-9_]+)`", page.read_text())
        assert not bad, f"{page.name}: {bad} need a format (:s, :d, :.1f)"


def _paragraphs(*notebooks):
    import json
    paras = re.split(r"\n\s*\n", INTRO)
    for nb in notebooks:
        cells = json.loads((ROOT / "notebooks" / nb).read_text())["cells"]
        paras += [p for c in cells if c["cell_type"] == "markdown" for p in re.split(r"\n\s*\n", "".join(c["source"]))]
    return paras


def test_check_3_gives_the_outcomes_between_bare_metal_p2p_and_the_host_path():
    """Issue 35 item 5: check 3 listed 0.36-0.45 us and about 14 us, nothing between, while the H200 pair's
    p2pBandwidthLatencyTest reads 2.24 us; the row now gives the middle from data (a guest with P2P exposed)
    and the tool on the H200 pair, each between the two ends."""
    from helpers.chapters.vm_p2p import fidelity as vfid
    from helpers.interconnect import studies

    row = next(ln for ln in INTRO.splitlines() if ln.startswith("| 3 |"))
    assert "chk_p2p_guest" in row and "06_vm_p2p.ipynb::fid_lat_tool_us" in row
    c = provenance.host_checks(provenance.all_tables())
    h200 = vfid.fidelity_findings(studies.fidelity_tables(), studies.gap("allreduce-gap-stream"),
                                  studies.gap("allreduce-gap-idle")).fid_lat_tool_us
    for middle in (c.chk_p2p_guest, h200):
        assert c.chk_p2p_hi < middle < c.chk_nop2p


def test_each_all_reduce_perf_launch_shape_says_why_it_is_that_shape():
    """Issue 35 item 4: the recipe's `-g 8` (one process, aiconfigurator's collector) and chapter 06's
    like-for-like `-np 2 -g 1` (the book's harness against the tool) each say why, where they appear."""
    paras = _paragraphs("06_vm_p2p.ipynb", "07_diagnosis.ipynb")
    g8 = [p for p in paras if "-g 8" in p and not re.fullmatch(r"```\w*\n[^#]*```", p.strip())]  # a bare command: its text is above
    assert len(g8) >= 3 and all("aiconfigurator" in p for p in g8), [p[:80] for p in g8 if "aiconfigurator" not in p]
    like = [p for p in paras if "like-for-like" in p and "-np 2 -g 1" in p]
    assert like and all("-g 8" in p for p in like)
    recipe = [p for p in paras if "-g 8" in p and "vm_allreduce_12k_us" in p]
    assert recipe and all("-np 2 -g 1" in p for p in recipe)   # the diagnosis's section 5 names 06's shape too


def test_the_h200_pair_s_all_reduce_is_named_by_harness_on_every_page():
    """Issue 35 item 3: page 1 called the pair's P2P-off all-reduce 'one measurement, cited the same way
    everywhere' while the diagnosis's scenario gives its own harness's figure and the fit's; the two
    measurements differ at the printed precision, so page 1 says which each page uses."""
    import pandas as pd
    from helpers.chapters.vm_p2p import fidelity as vfid
    from helpers.interconnect import studies
    from helpers.model.verdict import scenarios

    tool = vfid.answer_values(studies.fidelity_tables()).ans_ar_host_us
    ar = pd.read_csv(recorded.data_dir() / "reference" / "host_allreduce.csv")
    harness = ar[(ar.variant == "P2P_DISABLE=1") & (ar.message_bytes == vfid.ANSWER_BYTES)].time_us.iloc[0]
    assert round(tool, 1) != round(harness, 1)
    assert "the same way everywhere" not in INTRO
    fold = next(p for p in _paragraphs() if "ans_ar_host_us" in p)
    assert "nccl-tests" in fold and "harness" in fold and "scenario" in fold
    pair = next(h for h in scenarios.pair_scenarios() if h.key == "pair_h200")
    assert f"that harness measured {harness:.1f}" in pair.evidence


def test_the_p2p_chapter_s_rule_says_the_link_it_was_timed_on():
    """Issue 35 item 6: chapter 06's P2P on/off rule gives an NVLink pair's figures; the answer box says so and
    what that means on PCIe."""
    box = next(p for p in _paragraphs("06_vm_p2p.ipynb") if "ans_ar_host_us" in p and "book-answer" in p)
    assert "NVLink" in box and "PCIe" in box


def test_page_1_s_labels_and_check_4_say_what_the_figures_are():
    """Reading items 13, 14 and 17: the labels list names 'reference' and the committed study; check 3 calls the
    H200 pair's copy a committed study's and states its fail side without a typed threshold; check 4's low side
    says the share it means (the diagnosis's CANNOT), not 'it is not'."""
    labels = next(p for p in _paragraphs() if "**recorded**" in p)
    assert "**reference**" in labels and "*committed study*" in labels
    row3 = next(ln for ln in INTRO.splitlines() if ln.startswith("| 3 |"))
    assert "fid_lat_tool_us:.2f` µs on two H200s over NVLink (measured, committed study)" in row3
    assert "about {glue:text}`notebooks/90_provenance.ipynb::chk_nop2p" not in row3
    for p in [p for p in _paragraphs() if "t25_64" in p] + [ln for ln in INTRO.splitlines() if ln.startswith("| 4 |")]:
        assert "07_diagnosis.ipynb::cannot_pct:.0f` % or less" in p and "means it is not" not in p, p


def test_the_eager_all_reduce_floor_is_labelled_the_committed_study_s():
    """Reading item 19: 06's takeaway gave the two-GPU study's eager floor as if this run's table measured it."""
    p = next(p for p in _paragraphs("06_vm_p2p.ipynb") if "Takeaway" in p and "fid_eager_floor_us" in p)
    assert p.index("committed study") < p.index("fid_eager_floor_us") and "fid_setup_multi" in p


def test_check_1_shows_this_runs_verdict_and_no_rule_for_your_vm_from_the_original_one():
    """Issue 44: check 1's row carries this run's own verdict (chapter 08, from every signal), and page 1 states no
    threshold from the original VM's loss as a rule for "your VM": check 4 points at chapter 08."""
    row1 = next(ln for ln in INTRO.splitlines() if ln.startswith("| 1 |"))
    assert "`none` |" not in row1
    shown = next(ln for ln in INTRO.splitlines() if "08_this_machine.ipynb::chk1:s" in ln)
    assert shown.startswith("Check 1 on this site's run (measured)")
    row4 = next(ln for ln in INTRO.splitlines() if ln.startswith("| 4 |"))
    assert "08_this_machine" in row4 and "t80_1" not in row4 and "t25_1" not in row4
    assert "your VM" not in INTRO and "t80_1" not in INTRO


def test_page_1_labels_the_bare_metal_observations_reference_and_never_names_itself_page_1():
    """Issue 47 items 12 and 13: the bare-metal figures page 1 sets beside its prediction are the community's
    measurements (data/reference/baremetal.csv), not the investigation's observations, and page 1 says "this fold",
    not "page 1", of itself."""
    known = next(p for p in _paragraphs() if "**Known.**" in p)
    assert "reference {glue:text}`notebooks/07_diagnosis.ipynb::bmb_obs_1:.1f`, the community's bare-metal measurement" in known
    assert "reference {glue:text}`notebooks/07_diagnosis.ipynb::bmb_obs_64:.0f`" in known
    assert "observed {glue:text}`notebooks/07_diagnosis.ipynb::bmb_obs" not in known
    assert "page 1" not in INTRO.lower() and "page one" not in INTRO.lower()
    from helpers.model.verdict import ranges

    bm = [o for o in ranges.observations() if o.key in ("bm_1", "bm_64")]
    assert len(bm) == 2 and all(o.system == "bare metal (reference)" for o in bm)
