"""The target for the investigation's own deployment (targets/sglang-8gpu.yaml): what it runs, and its
refusals at plan time where the checkpoint or sglang is missing."""
import importlib.util

import pandas as pd
import pytest

from helpers import repo_root
from helpers.book import runbook

ROOT = repo_root()
SERVING = ("02_nan_crash", "03_baselines_tuning", "04_moe_runners")


def _target(*params: str) -> runbook.Target:
    t = runbook.load_target("sglang-8gpu", ROOT)
    runbook.apply_overrides(t, list(params))
    return t


@pytest.fixture()
def sglang_importable(monkeypatch):
    """Pretend this Python can import sglang (it cannot be installed beside a CPU torch)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "sglang" else real(name, *a))


def test_refused_without_a_checkpoint_saying_which_value_to_set_and_how():
    with pytest.raises(runbook.RunbookError) as exc:
        runbook.plan(_target(), ROOT)
    msg = str(exc.value)
    assert "target 'sglang-8gpu' cannot run here" in msg
    assert "`model_path`" in msg and "is not set" in msg
    assert "-p model_path=" in msg and "copy targets/sglang-8gpu.yaml" in msg
    assert all(s in msg for s in SERVING)


def test_refused_where_sglang_is_missing_even_with_a_checkpoint(tmp_path):
    assert importlib.util.find_spec("sglang") is None  # the development machines have no sglang
    with pytest.raises(runbook.RunbookError) as exc:
        runbook.plan(_target(f"model_path={tmp_path}"), ROOT)
    msg = str(exc.value)
    assert "model_path" not in msg.split("\n  - ")[1]  # the checkpoint is no longer what is missing
    assert "the Python package `sglang`" in msg and "not importable" in msg and "PY=" in msg


def test_refused_where_the_checkpoint_path_does_not_exist(tmp_path, sglang_importable):
    with pytest.raises(runbook.RunbookError, match=r"does not exist on this machine"):
        runbook.plan(_target(f"model_path={tmp_path / 'nowhere'}"), ROOT)


def test_the_command_line_refuses_before_creating_anything(tmp_path, capsys):
    rc = runbook.main(["--target", "sglang-8gpu", "--no-build", "--runs-dir", str(tmp_path / "runs")])
    assert rc == 2 and not (tmp_path / "runs").exists()
    err = capsys.readouterr().err
    assert "model_path" in err and "sglang" in err


def test_chapters_left_out_or_recorded_need_nothing(tmp_path):
    only = ["01_environment", "06_vm_p2p", "07_decode_step", "07_diagnosis"]
    runbook.plan(_target(), ROOT, only=only)  # no serving chapter: neither checkpoint nor sglang needed
    rec = [f"{s}.mode=recorded" for s in SERVING]
    runbook.plan(_target(*rec), ROOT)


def test_with_both_it_plans_the_investigation_s_deployment(tmp_path, sglang_importable):
    steps = {st["stem"]: st["parameters"] for st in runbook.plan(_target(f"model_path={tmp_path}"), ROOT)}
    for s in SERVING:
        p = steps[s]
        assert (p["engine"], p["mode"], p["tp_size"], p["model_path"]) == ("sglang", "live", 8, str(tmp_path))
    base = steps["03_baselines_tuning"]
    # both recorded workloads and the full concurrency sweep of the recorded sweeps
    serving = pd.read_csv(ROOT / "data" / "recorded" / "serving.csv")
    sweeps = serving[serving.experiment.str.startswith("sweep_")]
    recorded_workloads = {f"{int(r.input_len)}/{int(r.output_len)}" for r in sweeps.itertuples()}
    assert set(base["workloads"]) == recorded_workloads
    assert base["concurrencies"] == [1, 2, 4, 8, 16, 32, 64]
    assert set(sweeps.concurrency.astype(int)) <= set(base["concurrencies"])
    assert {"cuda-graph", "no-cuda-graph", "mem-fraction-default"} == set(base["variants"])
    # the MoE runners the investigation tried, as the recorded backend matrix lists them
    matrix = pd.read_csv(ROOT / "data" / "recorded" / "backend_matrix.csv")
    assert set(steps["04_moe_runners"]["runners"]) == set(matrix[matrix.component == "moe_runner"].backend)
    vm = steps["06_vm_p2p"]
    assert (vm["sweep"], vm["world_size"], vm["nccl_variants"]) == ("full", 0, "all")
    assert (steps["07_decode_step"]["tp"], steps["07_decode_step"]["batches"]) == (8, base["concurrencies"])
    assert steps["07_diagnosis"]["mode"] == "auto"


def test_the_description_says_what_it_needs_and_how_long():
    d = " ".join(runbook.load_target("sglang-8gpu", ROOT).description.split())
    for needed in ("eight", "sglang", "model_path", "hours"):
        assert needed in d


def test_a_malformed_requires_is_refused(tmp_path, monkeypatch):
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "bad.yaml").write_text("description: x\nrequires: {checkpoints: [model_path]}\n")
    with pytest.raises(runbook.RunbookError, match="`requires` takes the keys parameters, paths, packages"):
        runbook.load_target("bad", tmp_path)
