"""Which environment runs the book and why (helpers.book.environment), as `make` chooses it, as the
manifest records it and as the status page shows it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import repo_root
from helpers.book import environment as env
from helpers.book import runbook

ROOT = repo_root()
CUDA_TORCH = {"installed": True, "version": "2.11.0", "cuda": "13.0", "location": "/opt/torch/.venv/lib/python3.12/site-packages"}
CPU_TORCH = {"installed": True, "version": "2.13.0+cpu", "cuda": None, "location": "/x"}
NO_TORCH = {"installed": False}
DRIVER = {"driver": "580.159.04", "gpus": 8}
NO_DRIVER = {"driver": None, "why": "no NVIDIA driver library (libnvidia-ml.so.1: cannot open shared object file)"}


def test_a_cuda_torch_and_a_driver_give_the_host_environment():
    kind, why = env.choose("auto", CUDA_TORCH, DRIVER, python="PY=python3")
    assert kind == "host"
    assert "torch 2.11.0 built for CUDA 13.0" in why and "580.159.04" in why and "8 GPU(s)" in why
    assert "instead of installing another" in why


@pytest.mark.parametrize("torch", [CPU_TORCH, NO_TORCH, CUDA_TORCH])
def test_no_driver_gives_the_cpu_pin_whatever_torch_py_has(torch):
    kind, why = env.choose("auto", torch, NO_DRIVER, pin="torch==2.13.0")
    assert kind == "isolated-cpu" and "torch==2.13.0" in why and "constraints/cpu.txt" in why
    assert "libnvidia-ml" in why  # says why no driver was seen


@pytest.mark.parametrize("torch", [CPU_TORCH, NO_TORCH])
def test_a_driver_without_a_cuda_torch_gives_a_fresh_venv_without_the_cpu_pin(torch):
    kind, why = env.choose("auto", torch, DRIVER)
    assert kind == "isolated-gpu" and "no CPU pin" in why


def test_the_choice_can_be_forced_and_a_forced_host_needs_a_torch():
    assert env.choose("host", CPU_TORCH, NO_DRIVER)[0] == "host"
    assert env.choose("isolated", CUDA_TORCH, DRIVER)[0] == "isolated-gpu"
    assert env.choose("isolated", CUDA_TORCH, NO_DRIVER)[0] == "isolated-cpu"
    with pytest.raises(env.ChoiceError, match="has no torch"):
        env.choose("host", NO_TORCH, DRIVER, python="PY=python3")
    with pytest.raises(env.ChoiceError, match="expected auto, host or isolated"):
        env.choose("conda", CUDA_TORCH, DRIVER)


def test_torch_facts_read_the_cuda_build_without_importing_torch(tmp_path):
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('torch must not be imported to read its facts')\n")
    (pkg / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n")
    facts = env.torch_facts([str(tmp_path)])
    assert facts["installed"] and facts["cuda"] == "13.0" and facts["location"] == str(tmp_path)


def test_the_cpu_pin_is_read_from_the_constraints_file():
    assert env.cpu_pin(ROOT) == "torch==2.13.0"


@pytest.mark.integration
def test_choose_prints_assignments_a_shell_can_eval():
    out = subprocess.run(
        ["bash", "-c", f'eval "$({sys.executable} -m helpers.book.environment choose --name PY=x)"; '
                       'printf "%s\\n%s\\n%s" "$BOOK_ENV_KIND" "$BOOK_ENV_REASON" "$BOOK_ENV_JSON"'],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}).stdout
    kind, reason, rec = out.split("\n", 2)
    assert kind in env.KINDS and reason.startswith("PY=x has")
    assert json.loads(rec)["kind"] == kind


def test_the_host_pth_adds_site_dirs_with_their_own_pth_files(tmp_path):
    import site

    inner = tmp_path / "host-site"
    inner.mkdir()
    (inner / "extra.pth").write_text(str(tmp_path / "editable-src") + "\n")
    (tmp_path / "editable-src").mkdir()
    venv_site = tmp_path / "venv-site"
    venv_site.mkdir()
    (venv_site / "_book_host.pth").write_text(env.host_pth([str(inner)]))
    saved = list(sys.path)
    try:
        site.addsitedir(str(venv_site))  # as the venv's site-packages is processed at start-up
        assert str(inner) in sys.path and str(tmp_path / "editable-src") in sys.path
    finally:
        sys.path[:] = saved


def test_record_reads_the_choice_make_wrote_and_says_where_torch_comes_from(tmp_path):
    (tmp_path / env.RECORD_FILE).write_text(json.dumps(
        {"kind": "host", "reason": "PY=python3 has torch ...", "python": "/opt/torch/.venv/bin/python3",
         "made_by": "make (scripts/book-env.sh)"}))
    rec = env.record(prefix=str(tmp_path))
    assert rec["kind"] == "host" and rec["base_python"] == "/opt/torch/.venv/bin/python3"
    assert rec["torch"]["from"].startswith("outside this environment")  # torch is not under tmp_path
    assert env.record(prefix=str(tmp_path / "none"))["kind"] == "as found"


def test_the_status_page_shows_the_environment_and_says_when_a_run_predates_it():
    m = {"run_id": "r", "target": "auto", "chapters": [], "versions": {}, "hardware": {},
         "environment": {"kind": "host", "reason": "PY=python3 has torch 2.11.0 built for CUDA 13.0 and the NVIDIA "
                                                  "driver 580.159.04 answers (1 GPU(s))",
                         "python": "/work/.venv/bin/python", "python_version": "3.12.3",
                         "base_python": "/opt/torch/.venv/bin/python3",
                         "torch": {"version": "2.11.0", "cuda": "13.0", "location": "/opt/torch/.venv/lib",
                                   "from": "outside this environment (the host's Python)"},
                         "sglang": None, "nccl": {"version": "2.28.9", "location": "/opt", "from": "outside"},
                         "driver": DRIVER}}
    page = runbook.status_page(runbook.Manifest(**m), {})
    assert "## Environment" in page and "`host`" in page and "driver 580.159.04 answers" in page
    assert "2.11.0, CUDA 13.0 (outside this environment (the host's Python)" in page
    assert env.sentence(m["environment"]).startswith("Executed in the host environment (/work/.venv/bin/python, "
                                                     "torch 2.11.0 (CUDA 13.0) from outside this environment")
    old = runbook.status_page(runbook.Manifest(**{**m, "environment": None}), {})
    assert "Not recorded: this run predates environment records" in old


def test_a_run_manifest_records_the_environment(tmp_path, monkeypatch):
    rec = runbook.environment_record()
    assert rec["python"] == sys.executable and "kind" in rec and "reason" in rec
    monkeypatch.setattr(env, "record", lambda: 1 / 0)
    assert runbook.environment_record()["kind"] == "unknown"


@pytest.mark.slow
def test_make_s_host_environment_uses_the_given_python_s_torch(tmp_path):
    """scripts/book-env.sh with ENV_KIND=host over this test's own Python (itself a venv, as the GPU
    machine's python3 is): the new venv imports that Python's torch, pip may not replace it, and the
    record says so. Installs only the package itself (everything else is already there)."""
    venv = tmp_path / "venv"
    e = {**os.environ, "PY": sys.executable, "VENV": str(venv), "ENV_KIND": "host"}
    e.pop("PYTHONPATH", None)
    subprocess.run(["bash", "scripts/book-env.sh", "run"], cwd=ROOT, env=e, check=True, timeout=600)
    py = str(venv / "bin" / "python")
    code = ("import json, torch, helpers.book.environment as e; r = e.record(); "
            "print(json.dumps([torch.__file__, r['kind'], r['torch']['from']]))")
    torch_file, kind, where = json.loads(subprocess.run([py, "-c", code], capture_output=True, text=True, check=True,
                                                        env=e).stdout)
    import torch

    assert torch_file == torch.__file__ and kind == "host" and where.startswith("outside this environment")
    assert (venv / "host-constraints.txt").read_text().startswith("torch==")
    assert not list((venv / "lib").glob("python*/site-packages/torch"))


def _book_env(tmp_path, venv, **extra):
    e = {**os.environ, "PY": sys.executable, "VENV": str(venv), **extra}
    e.pop("PYTHONPATH", None)
    return subprocess.run(["bash", "scripts/book-env.sh", "run"], cwd=ROOT, env=e, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.integration
def test_book_env_refuses_an_environment_of_another_kind_and_an_empty_wheel_folder(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / env.RECORD_FILE).write_text(json.dumps({"kind": "isolated-cpu"}))
    p = _book_env(tmp_path, venv, ENV_KIND="host")  # this test's Python has torch, so host is possible
    assert p.returncode == 2 and "of kind `isolated-cpu`, but the choice now is `host`" in p.stderr
    assert "make clean-env" in p.stderr and "ENV_KIND=isolated" in p.stderr
    (tmp_path / "wheels").mkdir()
    p = _book_env(tmp_path, venv, WHEELS=str(tmp_path / "wheels"))
    assert p.returncode == 2 and "holds no wheels" in p.stderr
