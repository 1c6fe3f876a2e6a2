"""The runbook killed or stopped in the middle of a chapter, then resumed: the manifest tells the truth at
every point, nothing the run started is left running, finished chapters are kept, the interrupted chapter
resumes from its finished points, and the run ends with the true status of every chapter."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

import minibook
from helpers.core import procs, results
from proctags import tagged_pids as tagged

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(not procs.LINUX, reason="needs /proc")]

SLOW_BODY = """
import json, os, time
rows = out / "points.jsonl"
done = {json.loads(l)["i"] for l in rows.read_text().splitlines()} if rows.exists() else set()
for i in range(8):
    if i in done:
        continue
    time.sleep(0.4)
    with open(rows, "a") as f:
        f.write(json.dumps({"i": i, "pid": os.getpid()}) + "\\n")
glue('answer', float(len(done)), display=False)
"""


@pytest.fixture()
def book(tmp_path):
    ok = "glue('answer', 42.0, display=False)\n"
    return minibook.book(tmp_path / "book", {"01_first": (ok, "First"), "02_slow": (SLOW_BODY, "Slow"),
                                               "03_after": (ok, "After")})


start = minibook.start_runbook
wait_rows = minibook.wait_rows


def wait_gone(tag: str, within_s: float = 10) -> list[int]:
    deadline = time.monotonic() + within_s
    while tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    return tagged(tag)


def manifest(run):
    return json.loads((run / "manifest.json").read_text())


@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
def test_an_interrupted_run_tells_the_truth_and_resumes_without_repeating(book, how):
    tag = uuid.uuid4().hex
    run = book / "runs" / "r"
    rows = run / "results" / "02_slow" / "points.jsonl"
    p = start(book, tag, "--target", "quick", "--run-id", "r", "--no-build")
    wait_rows(rows, 2)
    m = manifest(run)
    assert [c["status"] for c in m["chapters"]] == ["ok", "running", "pending"] and m["status"] == "running"
    p.send_signal(signal.SIGKILL if how == "kill -9" else signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert wait_gone(tag) == [], "a kernel or a child outlived the runbook"
    m = manifest(run)
    before = results.read_rows(rows)
    if how == "SIGTERM":
        assert p.returncode == 143 and "--resume" in err
        assert [c["status"] for c in m["chapters"]] == ["ok", "interrupted", "pending"]
        assert m["status"] == "interrupted" and "SIGTERM" in m["chapters"][1]["error"]["evalue"]
    else:
        assert [c["status"] for c in m["chapters"]] == ["ok", "running", "pending"]
        # the unfinished run renders, strictly, and says what did not finish and how to go on
        r = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--render", str(run)], cwd=book,
                           env={**os.environ, "BOOK_ROOT": str(book)}, capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stdout + r.stderr
        page = (book / "_build" / "html" / "notebooks" / "02_slow.html").read_text()
        assert "did not finish" in page and "--resume" in page
        status = (book / "_build" / "html" / "appendix" / "status.html").read_text()
        assert "1 running" in status and "1 pending" in status
    first_nb = (run / "notebooks" / "01_first.ipynb").stat().st_mtime_ns

    r = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--resume", "r", "--no-build"], cwd=book,
                       env={**os.environ, "BOOK_ROOT": str(book), "BOOK_TEST_TAG": tag}, capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "01_first                 ok (kept from before)" in r.stdout
    m = manifest(run)
    assert [c["status"] for c in m["chapters"]] == ["ok", "ok", "ok"] and m["status"] == "ok"
    assert len(m["sessions"]) == 2 and m["sessions"][1]["ran"] == ["02_slow", "03_after"]
    assert (run / "notebooks" / "01_first.ipynb").stat().st_mtime_ns == first_nb       # kept, not re-run
    after = results.read_rows(rows)
    assert sorted(x["i"] for x in after) == list(range(8))                            # none lost, none repeated
    assert after[:len(before)] == before
    assert tagged(tag) == []
    log = (run / "logs" / "02_slow.log").read_text()
    assert "started by runbook" in log and "resumed by runbook" in log
    again = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--resume", str(run), "--no-build"],
                           cwd=book, env={**os.environ, "BOOK_ROOT": str(book)}, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and "to run: nothing" in again.stdout


def test_a_run_id_that_exists_is_refused_and_points_to_resume(book):
    (book / "runs" / "r").mkdir(parents=True)
    r = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--target", "quick", "--run-id", "r"], cwd=book,
                       env={**os.environ, "BOOK_ROOT": str(book)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "already exists" in r.stderr and "--resume" in r.stderr
