"""Write faults are named as what they are (issue 23, item 3): a --runs-dir that is a file, under a file or
read-only is refused before the run in one line; a file system that turns read-only mid-run fails the chapter
with a message naming the file and the cause, the manifest keeps its last good state (readable), and the closing
advice matches the cause (not "free the disk" for a read-only folder). Real runbook processes, a real tmpfs."""
import json
import os
import subprocess
import sys
import time

import pytest

import minibook
from faultfs import small_tmpfs

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SLOW_BODY = """
import os, time
from pathlib import Path
from helpers.core import results
gate = Path(os.environ['BOOK_TEST_GATE'])
for i in range(6):
    results.append_row(out / 'points.jsonl', {'i': i})
    if i == 1:
        gate.with_suffix('.first').write_text('1')
        while not gate.exists():
            time.sleep(0.05)
glue('answer', 1.0, display=False)
"""


@pytest.fixture()
def book(tmp_path):
    return minibook.book(tmp_path / "book", {"01_slow": (SLOW_BODY, "Slow")})


def rb(book, *args, env=None):
    return subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--target", "quick", "--run-id", "r",
                           "--no-build", *args], cwd=book, env={**os.environ, "BOOK_ROOT": str(book), **(env or {})},
                          capture_output=True, text=True, timeout=240)


def one_line_error(r):
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


def test_a_runs_dir_that_is_a_file_or_under_one_is_refused_in_one_line(book, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    assert "--runs-dir" in (msg := one_line_error(rb(book, "--runs-dir", str(f)))) and "is a file" in msg
    msg = one_line_error(rb(book, "--runs-dir", str(f / "runs")))
    assert f"is under {f}, which is a file" in msg


def test_a_read_only_runs_dir_is_refused_in_one_line(book, tmp_path):
    with small_tmpfs(tmp_path, 256) as mnt:
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        msg = one_line_error(rb(book, "--runs-dir", str(mnt)))
        assert "read-only" in msg and str(mnt) in msg and "free" not in msg


def test_a_folder_turned_read_only_mid_run_is_named_and_the_manifest_stays_readable(book, tmp_path):
    gate = tmp_path / "gate"
    with small_tmpfs(tmp_path, 4096) as mnt:
        p = subprocess.Popen([sys.executable, "-m", "helpers.book.runbook", "--target", "quick", "--run-id", "r",
                              "--no-build", "--runs-dir", str(mnt)], cwd=book,
                             env={**os.environ, "BOOK_ROOT": str(book), "BOOK_TEST_GATE": str(gate)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 200
        while not gate.with_suffix(".first").exists() and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        assert gate.with_suffix(".first").exists(), p.communicate()
        run = mnt / "r"   # the run folder turns read-only (a bind mount of itself, remounted ro)
        subprocess.run(["mount", "--bind", str(run), str(run)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(run)], check=True)
            gate.write_text("go")
            out, err = p.communicate(timeout=200)
        finally:
            subprocess.run(["umount", "-l", str(run)])
        assert p.returncode != 0
        assert "read-only" in err and "free the disk" not in err and "free space" not in err, err
        assert "manifest.json" in err and "--resume" in err
        m = json.loads((mnt / "r" / "manifest.json").read_text())      # the last good state, whole
        assert m["chapters"][0]["status"] == "running"
        line = next(x for x in out.splitlines() if "01_slow" in x and "failed" in x)
        assert f"{mnt / 'r'}/" in line and "read-only" in line and "Traceback" not in err, out + err
