"""Smaller edges (issue 36, item 8). On 8874c48: the classifier replaced the health probe's "answered, but after
N s ... raise health_timeout_s" with "no healthy answer within ..."; `variants: [turbo]` (or an unknown runner)
with mode live was refused only when the chapter ran, after the runbook had started. (A refused connection
naming "refused" is tested in tests/test_edge_usage.py.) Real local servers and a real runbook process."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import repo_root
from helpers.serving import classify
from helpers.serving.server import ServerSpec, free_port

FAULT = str(Path(__file__).parent / "fixtures" / "fault_server.py")


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_the_classifier_keeps_the_health_probes_explanation(tmp_path):
    port = free_port()
    spec = ServerSpec(argv=[sys.executable, FAULT, str(port), "ok"], port=port, name="slow-health",
                      env={"FAULT_HEALTH_DELAY_S": "4"}, health_timeout_s=1)
    a = classify.attempt("slow-health", spec, "fake", tmp_path, startup_timeout_s=8)
    assert a.outcome == "startup-timeout", a
    assert "answered, but after 4." in a.detail and "raise health_timeout_s" in a.detail, a.detail


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize("item,name", [("03_baselines_tuning.variants=[turbo]", "variants"),
                                       ("04_moe_runners.runners=[turbo]", "runners")])
def test_an_unknown_variant_or_runner_in_live_mode_is_refused_before_the_run(tmp_path, item, name):
    chapter = item.split(".")[0]
    r = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--target", "cpu-demo", "--runs-dir",
                        str(tmp_path), "--chapters", chapter, "--no-build", "-p", item, "-p", f"{chapter}.mode=live"],
                       cwd=repo_root(), capture_output=True, text=True, timeout=100,
                       env={**os.environ, "PYTHONPATH": str(repo_root() / "src")})
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"parameter '{name}' = ['turbo']" in r.stderr and "not known for engine" in r.stderr, r.stderr
    assert not any(tmp_path.iterdir()), "a run folder was made"


def test_health_timeout_s_is_set_from_a_target_or_p_and_reaches_the_server_spec(tmp_path):
    from helpers.book import runbook
    from helpers.serving import experiments

    target = tmp_path / "slow-health.yaml"
    target.write_text("description: a server slow to answer /health\nparameters: {mode: auto, health_timeout_s: 30}\n")
    t = runbook.load_target(str(target), repo_root())
    steps = runbook.plan(t, repo_root(), only=["02_nan_crash", "03_baselines_tuning", "04_moe_runners"])
    got = {s["stem"]: s["parameters"].get("health_timeout_s") for s in steps}
    assert got["02_nan_crash"] == got["03_baselines_tuning"] == got["04_moe_runners"] == 30, got
    spec = ServerSpec(argv=[sys.executable, FAULT, "1", "ok"], port=1, name="x")
    from helpers.serving.config import ServerChoice

    assert experiments.with_health(ServerChoice(health_timeout_s=30.0), spec).health_timeout_s == 30.0
    t = runbook.load_target("cpu-demo", repo_root())
    runbook.apply_overrides(t, ["health_timeout_s=0"])
    with pytest.raises(runbook.RunbookError, match=r"'health_timeout_s' = 0 is not allowed"):
        runbook.plan(t, repo_root(), only=["02_nan_crash"])
