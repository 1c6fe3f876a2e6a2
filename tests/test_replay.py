"""`runbook --replay`: a run measured with `--target auto` (chapters 01 and 06, the quick sweep, on this CPU
machine) presented again by the book, measuring nothing. Every glued value of both chapters comes back as the
auto execution glued it (except the keys that say the page is a replay, REPLAY_KEYS), results/ is byte for
byte the same, the manifest keeps every field and gains `replayed`; and a run without a manifest, a run
missing a saved result, and a modified tree are refused before any work."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import repo_root
from helpers.book import replay
from helpers.book.manifest import Manifest
from helpers.book.statuspage import status_page
from helpers.book.targets import RunbookError
from helpers.chapters import module
from helpers.core.glue import read_glued

ROOT = repo_root()
CHAPTERS = ("01_environment", "06_vm_p2p")
pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(300)]


def runbook(*args):
    return subprocess.run([sys.executable, "-m", "helpers.book.runbook", *args, "--no-build"], cwd=ROOT,
                          capture_output=True, text=True, timeout=240, env={**os.environ, "BOOK_ROOT": str(ROOT)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(the run folder after --replay, a copy of it as auto left it)."""
    base = tmp_path_factory.mktemp("replay")
    r = runbook("--target", "auto", "--chapters", ",".join(CHAPTERS), "--runs-dir", str(base), "--run-id", "measured")
    assert r.returncode == 0, r.stderr[-3000:]
    run, auto = base / "measured", base / "as-measured"
    shutil.copytree(run, auto)
    r = runbook("--replay", str(run), "--allow-dirty")   # the tests may run in a tree being edited
    assert r.returncode == 0, r.stderr[-3000:]
    return run, auto


@pytest.mark.parametrize("stem", CHAPTERS)
def test_every_glued_value_is_the_auto_executions(runs, stem):
    run, auto = runs
    measured, shown = read_glued(auto / "notebooks" / f"{stem}.ipynb"), read_glued(run / "notebooks" / f"{stem}.ipynb")
    keys = module(stem).REPLAY_KEYS
    assert set(shown) == set(measured) and len(shown) > 20
    differ = {k: (measured[k], shown[k]) for k in shown if shown[k] != measured[k] and k not in keys}
    assert not differ
    for k in keys:   # the sentence that says where the figures were measured says they are presented again
        assert "presented again" in shown[k] and "presented again" not in measured[k]


def test_results_are_byte_identical_and_the_manifest_keeps_the_measurement(runs):
    run, auto = runs
    assert replay.digest(run) == replay.digest(auto) and len(replay.digest(run)) >= 5
    was, now = (json.loads((d / "manifest.json").read_text()) for d in (auto, run))
    assert {k: v for k, v in now.items() if k != "replayed"} == was
    rp = now["replayed"]
    assert rp["chapters"] == list(CHAPTERS) and rp["modes"] == {s: "replay" for s in CHAPTERS}
    assert rp["book_commit"] and rp["presentation_rewritten"] == [] and rp["started"] >= was["finished"]
    page = status_page(Manifest.load(run), {})
    assert "presented again by commit" in page and "| presented by |" in page


def test_a_folder_without_a_manifest_is_refused(runs, tmp_path):
    shutil.copytree(runs[0], tmp_path / "r")
    (tmp_path / "r" / "manifest.json").unlink()
    with pytest.raises(RunbookError, match="no manifest.json"):
        replay.plan(tmp_path / "r", ROOT, allow_dirty=True)


def test_a_missing_saved_result_is_refused_naming_it_before_any_work(runs, tmp_path):
    run = tmp_path / "r"
    shutil.copytree(runs[0], run)
    (run / "results" / "06_vm_p2p" / "collective_sweep.csv").unlink()
    before = {p.name: p.read_bytes() for p in (run / "notebooks").iterdir()}
    manifest = (run / "manifest.json").read_bytes()
    r = runbook("--replay", str(run), "--allow-dirty")
    assert r.returncode == 2 and "collective_sweep.csv does not exist" in r.stderr and "06_vm_p2p" in r.stderr
    assert {p.name: p.read_bytes() for p in (run / "notebooks").iterdir()} == before
    assert (run / "manifest.json").read_bytes() == manifest


def test_a_modified_tree_is_refused_unless_allowed(runs, tmp_path):
    """A git tree whose tracked file differs from its commit: refused, naming the commit and --allow-dirty."""
    tree = tmp_path / "book"
    tree.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tree)]
    (tree / "f.txt").write_text("a")
    for args in (["init", "-q"], ["add", "f.txt"], ["commit", "-qm", "x"]):
        subprocess.run(git + args, check=True, capture_output=True)
    (tree / "f.txt").write_text("b")
    with pytest.raises(RunbookError, match="--allow-dirty"):
        replay.plan(runs[0], tree)


def test_a_chapter_that_measures_without_a_replay_mode_is_kept_not_run_here():
    """The one-H200 run's serving chapters (mode live) and MoE runners (auto) would measure this machine: the
    replay keeps their notebooks; the chapters with a replay mode, and those that only read, run. The decode step
    timed GLM-5 on the GPU and saved it: it is presented again from what it saved (mode replay)."""
    _, steps, _, kept = replay.plan(ROOT / "runs" / "h200-20261202f", ROOT, allow_dirty=True)
    assert {k["stem"] for k in kept} == {"02_nan_crash", "03_baselines_tuning", "04_moe_runners"}
    assert {st["stem"]: st["parameters"]["mode"] for st in steps} == {
        "01_environment": "replay", "05_expert_parallelism": "replay", "06_vm_p2p": "replay",
        "07_decode_step": "replay", "07_diagnosis": "auto", "90_provenance": "auto"}


def test_a_decode_step_without_a_gpu_measurement_is_kept_as_measured(tmp_path):
    """A CPU run's decode step (the scaled-down model's sweep and its two-rank check) has nothing a replay can
    present again: replayable says no, and the replay keeps that chapter's notebook."""
    from helpers.book.publish import site_run

    ds = module("07_decode_step")
    gpu_run = ROOT / site_run(ROOT)     # the published run: one GPU timed GLM-5's step and saved its FP8 check
    assert ds.replayable(gpu_run, {"model": "glm5"})
    assert not ds.replayable(tmp_path, {"model": "glm5"})
    cpu = tmp_path / "results" / "07_decode_step"
    shutil.copytree(gpu_run / "results" / "07_decode_step", cpu)
    (cpu / "fp8_check.csv").unlink()     # an older GPU run that saved no FP8 check is kept too
    assert not ds.replayable(tmp_path, {"model": "glm5"})
