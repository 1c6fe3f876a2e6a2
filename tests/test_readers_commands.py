"""The README's commands in the README's order: a reader runs `make book` (or another documented command)
before `make test`, and what that leaves in the checkout (runs/<id>/, runs/latest, _build/) changes
nothing about what the suite checks or whether it passes.

The test runs two commands for real, one after the other, in a throw-away clone of this commit (git clone
of HEAD), each checked as it ends, then, in that clone: collects the whole suite and compares the test ids with those of a clean clone (a test
parametrized over what is on disk would show here), checks that no file git tracks was changed, and runs
the test modules that read runs/ or _build/ (AFFECTED). `.ci/run` covers plain `make book` (the README's
first command: a finished run, runs/latest and _build/) before the whole suite, on every landing. The clone reuses this checkout's .venv (VENV=<its path>, with make
told not to remake its install stamp, so nothing is installed) and puts its own src/ first on the path, so
the clone's code, run folders and build folder are the ones used.

The other documented commands a reader may run first, and why they need no test of their own:
- `make book RUN=runs/<id>` and `make render`: render an existing run into _build/ with execution off,
  what `make site` does for SITE_RUN (tested below), and the suite never reads _build/.
- `make run`: the execution of `make book` without the build: a new run folder and runs/latest, what the
  interrupted `make book` below leaves (a run whose manifest the suite must not read).
- `make book TARGET=recorded` or `TARGET=cpu-demo`: a run folder and _build/ as plain `make book` (`.ci/run`);
  cpu-demo's servers' models go into a cache outside the checkout.
- `make check-site`: reads _build/html and writes _build/screenshots, which no test reads.
- `--resume runs/<id>`: finishes a run folder of the reader's own, as above.
- `.venv/`: `make site`, `make run` and `make render` install a subset of the extras; `make test` then
  installs the full set into the same environment (its `install` prerequisite), and the only .venv state
  a test reads is the environment record (book-env.json), which names the kind of environment, not its extras.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import repo_root
from onceper import once_per_session
from proctags import tagged

ROOT = repo_root()
VENV = Path(sys.prefix)
#: the modules that read runs/ or _build/, or list what they test from them
AFFECTED = ["tests/test_committed_runs.py", "tests/test_packaging.py", "tests/test_book_site.py",
            "tests/test_notebooks.py", "tests/test_diagnosis.py", "tests/test_findings.py",
            "tests/test_recorded_labels.py"]
#: of their slow tests, the one that reads committed runs at run time, for the published site's run: the others
#: execute the book or build SITE_RUN into folders of their own and run once, in `make test` itself. The
#: published run only: each render is about 25 s of CPU, and what decides whether leftovers reach a render, the
#: runs it lists and the folder it builds into, is the same for every run (`make test` itself renders every one)
SLOW_READERS = ["tests/test_committed_runs.py::test_every_committed_run_renders_strictly_at_this_commit"]
SITE_RUN_ID = re.search(r"^SITE_RUN\s*\?=\s*runs/(\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)

#: its module fixture (clean_ids) is made once per session (tests/conftest.py)
SPREAD_ACROSS_WORKERS = True

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1500),
              pytest.mark.skipif(not (VENV / ".installed").exists(),
                                 reason=f"needs the environment `make install` builds ({VENV} has no .installed "
                                        f"stamp); run the suite with `make test`")]


def _env(clone: Path, **extra) -> dict:
    env = {**os.environ, "PYTHONPATH": str(clone / "src"), **extra}
    env.pop("BOOK_ROOT", None)
    return env


def make(clone: Path, *args: str) -> list[str]:
    """`make <args>` in the clone over this checkout's .venv, with its install stamp taken as done."""
    return ["make", "--no-print-directory", "-C", str(clone), f"VENV={VENV}", "-o", f"{VENV}/.installed", *args]


def clone_of_head(dest: Path) -> Path:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(dest)], check=True, timeout=300)
    subprocess.run(["git", "-C", str(dest), "checkout", "--quiet", head], check=True, timeout=300)
    return dest


def pytest_in(clone: Path, tmp: Path, *args: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    """The suite in the clone, with temporary folders of its own (never this session's)."""
    tmp.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--basetemp={tmp}", *args]
    return subprocess.run(cmd, cwd=clone, env=_env(clone), capture_output=True, text=True, timeout=timeout)


def collected(clone: Path, tmp: Path) -> list[str]:
    p = pytest_in(clone, tmp, "--collect-only", "-q", timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return sorted(ln for ln in p.stdout.splitlines() if "::" in ln)


@pytest.fixture(scope="module")
def clean_ids(tmp_path_factory):
    """What the suite collects in a clone where nothing was run (once per session, shared by the workers
    that run this module's tests: tests/onceper.py)."""
    return once_per_session(tmp_path_factory, "readers-clean-clone",
                            lambda d: collected(clone_of_head(d / "clone"), d / "pytest"))


def check_suite(clone: Path, tmp: Path, clean_ids: list[str]) -> None:
    """After a reader's commands: no tracked file changed, the same tests collected as in a clean clone,
    and the affected modules pass in the clone (the strict render of the published run: SLOW_READERS)."""
    changed = subprocess.run(["git", "-C", str(clone), "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True, check=True).stdout
    assert changed == "", f"the command changed files git tracks:\n{changed}"
    ids = collected(clone, tmp / "collect")
    assert ids == clean_ids, (f"collected only after the command: {sorted(set(ids) - set(clean_ids))[:10]}; "
                              f"only before: {sorted(set(clean_ids) - set(ids))[:10]}")
    for name, args in (("fast", ["-m", "not slow", *AFFECTED]), ("slow", [*SLOW_READERS, "-k", SITE_RUN_ID])):
        p = pytest_in(clone, tmp / name, "-q", *args)
        assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
        assert " passed" in p.stdout.splitlines()[-1], p.stdout[-2000:]


def test_the_readers_commands_one_after_another_then_the_tests(tmp_path, clean_ids):
    """`make site`, then a `make book` stopped by Ctrl-C in chapter 06, one after the other in one clone, each
    checked as it ends; then the suite in what both left: the published run's site built (with its screenshots'
    report) and runs/latest naming an interrupted run. A finished run beside the suite is what `.ci/run` leaves
    before `make test` on every landing (`make book`: a run folder, runs/latest and _build/), so this test no longer
    makes one of its own with `make book TARGET=recorded` (issue 48: about 47 s of CPU of the suite's 1,000 on 2
    cores); the recorded target's execution is the suite's own session result (tests/conftest.py, recorded_run)."""
    clone = clone_of_head(tmp_path / "clone")
    _make_site(clone)
    _make_book_interrupted_in_chapter_06(clone, tmp_path)
    check_suite(clone, tmp_path, clean_ids)


def _make_site(clone: Path) -> None:
    p = subprocess.run(make(clone, "site"), env=_env(clone), capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert (clone / "_build" / "html" / ".nojekyll").exists() and (clone / "_build" / "html" / "index.html").exists()


def _make_book_interrupted_in_chapter_06(clone: Path, tmp_path: Path) -> None:
    """Ctrl-C as a terminal sends it: SIGINT to make's process group, once chapter 06 (the VM/P2P
    chapter, target auto) has written its first collective point. The run stays behind, interrupted, and
    the site the commands before it built is as they left it."""
    index = clone / "_build" / "html" / "index.html"
    built = index.stat().st_mtime_ns
    tag = f"readers-{os.getpid()}-{time.monotonic_ns()}"
    log = (tmp_path / "make.log").open("w")
    p = subprocess.Popen(make(clone, "book"), env=_env(clone, BOOK_TEST_TAG=tag), stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 900
    try:
        while not _first_collective_point(clone, before=built):
            assert p.poll() is None, f"make book ended (exit {p.returncode}) before chapter 06's first point"
            assert time.monotonic() < deadline, "chapter 06 wrote no collective point within 900 s"
            time.sleep(0.2)
        os.killpg(p.pid, signal.SIGINT)
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        log.close()
    out = (tmp_path / "make.log").read_text()
    assert rc != 0 and "interrupted (Ctrl-C)" in out and "--resume" in out, out[-3000:]
    m = json.loads((clone / "runs" / "latest" / "manifest.json").read_text())
    status = {c["stem"]: c["status"] for c in m["chapters"]}
    stems = list(status)
    at = stems.index("06_vm_p2p")
    assert m["status"] == "interrupted" and status["06_vm_p2p"] == "interrupted", status
    assert {status[s] for s in stems[:at]} == {"ok"} and {status[s] for s in stems[at + 1:]} == {"pending"}, status
    deadline = time.monotonic() + 30
    while tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tagged(tag) == {}, f"left running after Ctrl-C: {tagged(tag)}"
    assert index.stat().st_mtime_ns == built, "the interrupted run built the site (it stopped before the build)"


def _first_collective_point(clone: Path, before: int) -> bool:
    """Chapter 06 of the run that runs/latest names has written a collective point since `before` (until the new
    run starts there is no runs/latest, or one naming an older run)."""
    points = clone / "runs" / "latest" / "results" / "06_vm_p2p" / "collective_points"
    return any(f.stat().st_size and f.stat().st_mtime_ns > before for f in points.glob("points-*.jsonl"))
