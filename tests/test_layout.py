"""helpers.core.layout: one place for a run's result paths, their columns, and what a chapter needs."""
import subprocess
import sys

import pandas as pd
import pytest

from helpers import repo_root
from helpers.core import layout


def _fits(**drop):
    row = {c: 1 for c in layout.FIT_COLUMNS}
    return pd.DataFrame([{k: v for k, v in row.items() if k not in drop}])


def test_save_and_load_a_declared_table(tmp_path):
    layout.save(tmp_path, "06_vm_p2p", "fits", _fits())
    assert (tmp_path / "results" / "06_vm_p2p" / "fits.csv").exists()
    assert list(layout.load(tmp_path, "06_vm_p2p", "fits").columns) == list(layout.FIT_COLUMNS)


def test_a_table_without_its_declared_columns_is_refused(tmp_path):
    with pytest.raises(layout.LayoutError, match=r"lacks its declared columns \['alpha_us'\]"):
        layout.save(tmp_path, "06_vm_p2p", "fits", _fits(alpha_us=None))


def test_a_missing_result_names_the_chapter_that_writes_it(tmp_path):
    with pytest.raises(layout.MissingResult, match="written by chapter 06_vm_p2p"):
        layout.load(tmp_path, "06_vm_p2p", "fits")
    assert layout.load_if_present(tmp_path, "06_vm_p2p", "fits") is None


def test_an_undeclared_result_is_an_error():
    with pytest.raises(layout.LayoutError, match="no result 'fitz'"):
        layout.result("06_vm_p2p", "fitz")


def test_needs_are_met_by_an_earlier_chapter_or_the_run_directory(tmp_path):
    assert layout.check_needs(["06_vm_p2p", "07_diagnosis"], None) == []
    problems = layout.check_needs(["07_diagnosis"], tmp_path)
    assert len(problems) == 1 and "add 06_vm_p2p to --chapters" in problems[0]
    assert "07_diagnosis.mode=recorded" in problems[0]
    assert layout.check_needs(["07_diagnosis"], None, {"07_diagnosis": "recorded"}) == []
    layout.save(tmp_path, "06_vm_p2p", "fits", _fits())
    assert layout.check_needs(["07_diagnosis"], tmp_path) == []


def test_optional_needs_have_a_stated_fallback_and_never_stop_a_run(tmp_path):
    from helpers.core import recorded
    from helpers.model import measured
    needs = layout.NEEDS["07_diagnosis"]
    assert [n.name for n in needs if not n.optional] == ["fits"]
    for n in needs:
        layout.result(n.producer, n.name)                # every need names a declared result
        if n.study:
            assert recorded.study(n.study).path.is_dir()  # the committed study it falls back on exists
    step = [n for n in needs if n.producer == "07_decode_step"]
    assert {n.name for n in step} == {"step_times", "step_bytes", "step_meta", "precision_times",
                                      "precision_bytes", "precision_meta"}
    assert all(n.optional for n in step)
    assert all(n.study == (measured.STEP_ROLE if n.name.startswith("step_") else measured.PRECISION_ROLE)
               for n in step)
    # only the required fits are asked for: the sweep and the decode step are optional
    layout.save(tmp_path, "06_vm_p2p", "fits", _fits())
    assert layout.check_needs(["07_diagnosis"], tmp_path) == []


def test_load_need_fails_for_a_required_need_and_is_none_for_an_optional_one(tmp_path):
    with pytest.raises(layout.MissingResult, match="written by chapter 06_vm_p2p"):
        layout.load_need(tmp_path, "07_diagnosis", "06_vm_p2p", "fits")
    assert layout.load_need(tmp_path, "07_diagnosis", "06_vm_p2p", "collective_sweep") is None
    layout.save(tmp_path, "06_vm_p2p", "fits", _fits())
    assert len(layout.load_need(tmp_path, "07_diagnosis", "06_vm_p2p", "fits")) == 1
    assert layout.load_need(tmp_path, "07_diagnosis", "01_environment", "probe") is None   # optional: no probe
    with pytest.raises(layout.LayoutError, match="declares no need for 02_nan_crash/live_matrix"):
        layout.load_need(tmp_path, "07_diagnosis", "02_nan_crash", "live_matrix")


@pytest.mark.integration
def test_runbook_refuses_the_diagnosis_alone_before_running_anything(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--target", "auto", "--chapters",
                           "07_diagnosis", "--runs-dir", str(tmp_path), "--no-build"],
                          capture_output=True, text=True, cwd=repo_root(), timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "chapter 07_diagnosis needs 06_vm_p2p's 'fits'" in proc.stderr
    assert not any(tmp_path.iterdir()), "nothing is created before the plan is accepted"


def test_a_run_object_writes_under_its_chapter_and_an_empty_run_dir_is_a_fresh_folder(tmp_path):
    run = layout.Run(str(tmp_path), "06_vm_p2p")
    assert run.folder == tmp_path / "results" / "06_vm_p2p" and run.folder.is_dir()
    lone = layout.Run("", "06_vm_p2p")          # a chapter executed on its own
    assert lone.folder.is_dir() and lone.folder.name == "06_vm_p2p" and lone.root != tmp_path
    with pytest.raises(layout.LayoutError, match="no result 'bogus' is declared for chapter '06_vm_p2p'"):
        run.save("bogus", {})


def test_the_published_run_holds_only_declared_results():
    """Every file or folder a chapter leaves under results/<chapter>/ in the run the site publishes is one
    layout.RESULTS declares (older committed runs were made by older code and may hold retired files)."""
    import re

    site_run = re.search(r"^SITE_RUN \?= (\S+)", (repo_root() / "Makefile").read_text(), re.M).group(1)
    declared = {(r.chapter, r.file) for r in layout.RESULTS.values()}
    results = repo_root() / site_run / "results"
    found = {(ch.name, p.name) for ch in results.iterdir() for p in ch.iterdir()}
    assert found and not found - declared, f"undeclared in {site_run}: {sorted(found - declared)}"
