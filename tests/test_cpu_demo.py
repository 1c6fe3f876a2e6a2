"""The cpu-demo target end to end: the three serving chapters launch real `transformers serve`
processes against tiny models built at run time, classify every attempt and sweep concurrency."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from helpers import repo_root

ROOT = repo_root()
SERVING = ["02_nan_crash", "03_baselines_tuning", "04_moe_runners"]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs-demo")
    proc = subprocess.run(
        [sys.executable, "-m", "helpers.book.runbook", "--target", "cpu-demo", "--runs-dir", str(runs),
         "--run-id", "demo", "--chapters", ",".join(SERVING), "--no-build"],
        capture_output=True, text=True, cwd=ROOT, timeout=1800)
    run = runs / "demo"
    return proc, json.loads((run / "manifest.json").read_text()), run


@pytest.mark.slow
def test_serving_chapters_run_live(demo_run):
    proc, manifest, _ = demo_run
    status = {c["stem"]: c for c in manifest["chapters"]}
    for stem in SERVING:
        err = status[stem].get("error") or {}
        assert status[stem]["status"] == "ok", f"{stem}: {err.get('ename')}: {err.get('evalue')}"
    assert proc.returncode == 0


@pytest.mark.slow
def test_backend_matrix_detects_each_outcome(demo_run):
    _, _, run = demo_run
    m = pd.read_csv(run / "results" / "02_nan_crash" / "live_matrix.csv", keep_default_na=False)
    assert {"ok", "nan", "crash", "startup-timeout", "unsupported", "wrong-answer"} <= set(m["outcome"])
    assert m.set_index("name").loc["nan-weights", "outcome"] == "nan"


@pytest.mark.slow
def test_baseline_sweep_completes_every_point(demo_run):
    _, _, run = demo_run
    s = pd.read_csv(run / "results" / "03_baselines_tuning" / "sweep.csv")
    assert len(s) > 0 and (s["failed"] == 0).all()
    assert (s["completed"] >= 5 * s["concurrency"]).all()
    assert (s["output_throughput"] > 0).all()


@pytest.mark.slow
def test_moe_runner_sweeps_have_repeats(demo_run):
    _, _, run = demo_run
    sweep = pd.read_csv(run / "results" / "04_moe_runners" / "sweep.csv")
    ok = sweep.groupby("runner")["repeat"].nunique() if "repeat" in sweep else None
    assert ok is not None and (ok >= 2).all(), "each runner needs repeats to show its spread"
