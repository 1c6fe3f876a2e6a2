"""`-p` on the command line wins over the target, its per-chapter values included, and every value a chapter
will receive is checked whoever gave it (issue 23, item 4); the manifest records what ran and where it came from."""
import json
import os
import subprocess
import sys

import pytest

import minibook
from helpers import repo_root
from helpers.book import runbook

ROOT = repo_root()


def test_a_command_line_value_wins_over_the_targets_per_chapter_value():
    t = runbook.load_target("cpu-demo", ROOT)
    runbook.apply_overrides(t, ["startup_timeout_s=30"])
    steps = {st["stem"]: st for st in runbook.plan(t, ROOT, check_values=False)}
    for s in ("02_nan_crash", "03_baselines_tuning", "04_moe_runners"):
        assert steps[s]["parameters"]["startup_timeout_s"] == 30, s
        assert steps[s]["origins"]["startup_timeout_s"] == "the command line (-p startup_timeout_s=30)"
    t = runbook.load_target("cpu-demo", ROOT)
    runbook.apply_overrides(t, ["03_baselines_tuning.startup_timeout_s=40", "startup_timeout_s=30"])
    steps = {st["stem"]: st for st in runbook.plan(t, ROOT, check_values=False)}
    assert steps["03_baselines_tuning"]["parameters"]["startup_timeout_s"] == 40     # CHAPTER.NAME over NAME
    assert steps["02_nan_crash"]["parameters"]["startup_timeout_s"] == 30


@pytest.mark.parametrize("value", [".inf", ".nan", "-1", "abc"])
def test_a_command_line_value_that_a_target_chapter_value_shadowed_is_checked(value):
    t = runbook.load_target("cpu-demo", ROOT)
    runbook.apply_overrides(t, [f"startup_timeout_s={value}"])
    with pytest.raises(runbook.RunbookError) as e:
        runbook.plan(t, ROOT)
    lines = [x for x in str(e.value).splitlines() if "startup_timeout_s" in x]
    assert any(f"the command line (-p startup_timeout_s={value}): chapter 02_nan_crash" in x for x in lines), lines
    assert any("chapter 03_baselines_tuning" in x for x in lines)


BODY = "(out / 'mode.txt').write_text(mode)\nglue('answer', 1.0, display=False)\n"


@pytest.mark.integration
def test_a_real_run_uses_the_command_line_value_and_records_it(tmp_path):
    book = minibook.book(tmp_path / "book", {"01_first": (BODY, "First")})
    (book / "targets" / "pc.yaml").write_text("description: per chapter\nchapters: {01_first: {mode: recorded}}\n")
    r = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--target", "pc", "-p", "mode=auto",
                        "--run-id", "r", "--no-build"], cwd=book, env={**os.environ, "BOOK_ROOT": str(book)},
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    run = book / "runs" / "r"
    assert (run / "results" / "01_first" / "mode.txt").read_text() == "auto"
    rec = json.loads((run / "manifest.json").read_text())["chapters"][0]
    assert rec["parameters"]["mode"] == "auto"
    assert rec["parameter_origins"]["mode"] == "the command line (-p mode=auto)"
