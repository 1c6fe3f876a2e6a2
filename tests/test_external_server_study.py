"""Issue 46's acceptance: chapter 03 pointed at a server it did not launch. The test starts a real local server
(`transformers serve` with a tiny random-weight model) and passes only its URL; the chapter sweeps it and runs its
load study in full: the latency-throughput curve is drawn, the capacity comes with its interval, the per-phase table
is there, and the page names what it measured (the server's URL, the model the server listed, the hardware unknown
because nobody gave it)."""
import json
import os
import subprocess
import sys

import pytest

from helpers import repo_root
from helpers.core.glue import read_glued
from helpers.serving import live, tiny_model
from helpers.serving.server import Server

from cpudemo import left_running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
STEM = "03_baselines_tuning"


@pytest.fixture(scope="module")
def external_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs-external")
    models = runs / "models"
    model_dir = tiny_model.build(models / "tiny-external", live.tiny_spec(64, 2, 4, 64, 4, "cpu"), device="cpu")
    spec = live.transformers_spec(model_dir, "batched", "cpu", name="external")
    with Server(spec, runs / "server.log", startup_timeout_s=120) as srv:
        proc = subprocess.run(
            [sys.executable, "-m", "helpers.book.runbook", "--target", "cpu-demo", "--runs-dir", str(runs),
             "--run-id", "ext", "--chapters", STEM, "--no-build", "-p", f"{STEM}.server_url={spec.base_url}",
             "-p", f"{STEM}.concurrencies=[1,4]", "-p", f"{STEM}.workloads=['32/32']", "-p", f"{STEM}.load_time_s=60"],
            capture_output=True, text=True, cwd=repo_root(), timeout=1100,
            env={**os.environ, "BOOK_MODEL_CACHE": str(models)})
    run = runs / "ext"
    assert (run / "manifest.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads((run / "manifest.json").read_text()), run, spec.base_url


def test_the_chapter_runs_against_a_server_given_by_its_url_only(external_run):
    proc, manifest, _, _ = external_run
    status = {c["stem"]: c for c in manifest["chapters"]}[STEM]
    assert status["status"] == "ok", f"{status.get('error')}\n{proc.stdout[-2000:]}"


def test_the_study_runs_in_full_and_the_page_names_what_it_measured(external_run):
    _, _, run, url = external_run
    study = json.loads((run / "results" / STEM / "load_study.json").read_text())
    assert study["kind"] == "full" and study["failed"] == "" and study["target"]["real"]
    g = read_glued(run / "notebooks" / f"{STEM}.ipynb")
    assert url in g["ld_what"] and "hardware: unknown" in g["ld_what"]
    assert "run in full" in g["ld_status"]
    cap = study["capacity_concurrency"]
    assert len(cap["interval"]) == 2 and ("90 % interval" in g["ld_cap_c"] or g["ld_cap_c"].startswith("none"))
    keys = [p["key"] for p in study["points"]]
    assert len(keys) == len(set(keys)) and {"c=1", "c=4"} <= set(keys)


def test_the_page_draws_the_curve_and_shows_the_phase_table(external_run):
    _, _, run, _ = external_run
    nb = json.loads((run / "notebooks" / f"{STEM}.ipynb").read_text())
    fig = next(c for c in nb["cells"] if "load_curve" in "".join(c.get("source", "")))
    assert any("image/png" in o.get("data", {}) for o in fig.get("outputs", []))
    html = " ".join(json.dumps(c.get("outputs", [])) for c in nb["cells"])
    assert "Where a request" in html and "connect" in html and "first token" in html


def test_nothing_left_running(external_run):
    assert left_running(external_run[2]) == []
