import os

# Keep tests offline and quiet: no hub access, no telemetry, a non-interactive matplotlib.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


# --------------------------------------------------------------------------- one execution of the book per target
# Executing the whole book takes tens of seconds, so each target runs at most once per session; the
# chapter tests (test_notebooks.py, test_chapter_values.py) share these runs.
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402


def run_book(target, tmp_path_factory, build):
    """Execute every chapter under `target` into a fresh run folder: (process, manifest, run folder).
    With `build`, the site goes into the run folder's parent (<runs>/_build/html, beside the run), never
    into the repository's _build/, which belongs to the reader's own `make book`."""
    from helpers import repo_root

    runs = tmp_path_factory.mktemp(f"runs-{target}")
    args = [sys.executable, "-m", "helpers.book.runbook", "--target", target, "--runs-dir", str(runs),
            "--run-id", target]
    args += ["--out-dir", str(runs)] if build else ["--no-build"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=repo_root(), timeout=1800)
    manifest = json.loads((runs / target / "manifest.json").read_text())
    return proc, manifest, runs / target


@pytest.fixture(scope="session")
def recorded_run(tmp_path_factory):
    return run_book("recorded", tmp_path_factory, build=False)


@pytest.fixture(scope="session")
def auto_run(tmp_path_factory):
    return run_book("auto", tmp_path_factory, build=True)
