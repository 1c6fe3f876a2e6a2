"""One runbook process per run (issue 23, item 2), with two real runbook processes: a --resume of a run that
is still executing is refused at once naming the owner's pid and what to do, so no chapter runs twice into
one folder; the lock is released at exit; a stale lock left by a killed owner is taken over with a message."""
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
from helpers.book import runbook
from proctags import tagged_pids as tagged

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(not procs.LINUX, reason="needs /proc")]

POINTS = 10
SLOW_BODY = """
import json, os, time
from pathlib import Path
from helpers.core import results
rows = out / "points.jsonl"
hold = Path(os.environ["BOOK_ROOT"]) / "hold"     # while this file exists, no point after the first (120 s at most)
done = {r["i"] for r in results.read_rows(rows)}
for i in range(%d):
    if i in done:
        continue
    time.sleep(0.4)
    results.append_row(rows, {"i": i, "pid": os.getpid()})
    t_hold = time.monotonic()
    while hold.exists() and time.monotonic() - t_hold < 120:
        time.sleep(0.05)
glue('answer', float(len(done)), display=False)
""" % POINTS


@pytest.fixture()
def book(tmp_path):
    return minibook.book(tmp_path / "book", {"01_slow": (SLOW_BODY, "Slow")})


def runbook_proc(book, tag, *args):
    return minibook.start_runbook(book, tag, *args, "--no-build")


wait_rows = minibook.wait_rows


def test_a_second_process_on_a_running_run_is_refused_at_once_and_nothing_is_measured_twice(book):
    tag = uuid.uuid4().hex
    run = book / "runs" / "r"
    rows = run / "results" / "01_slow" / "points.jsonl"
    (book / "hold").touch()           # the first run holds after its first point until the second is answered,
    first = runbook_proc(book, tag, "--target", "quick", "--run-id", "r")   # however slowly the second starts
    wait_rows(rows, 1)
    second = runbook_proc(book, tag, "--resume", "r")
    out, err = second.communicate(timeout=60)
    assert second.returncode == 2, out + err
    assert f"pid {first.pid}" in err and "--resume" in err and "kill" in err, err
    # at once: refused while the first is still held at its first point, not after it ended (which a refusal
    # that waited for the lock would have needed: the first holds for 120 s, longer than communicate's 60)
    assert first.poll() is None and len(results.read_rows(rows)) == 1, "the refusal waited for the first run"
    (book / "hold").unlink()
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, out + err
    got = [r["i"] for r in results.read_rows(rows)]
    assert sorted(got) == list(range(POINTS)) and len({r["pid"] for r in results.read_rows(rows)}) == 1
    assert not (run / runbook.LOCK_NAME).exists()                    # released at exit
    m = json.loads((run / "manifest.json").read_text())
    assert len(m["sessions"]) == 1 and m["status"] == "ok"


def test_a_stale_lock_of_a_killed_run_is_taken_over_with_a_message(book):
    tag = uuid.uuid4().hex
    run = book / "runs" / "r"
    rows = run / "results" / "01_slow" / "points.jsonl"
    first = runbook_proc(book, tag, "--target", "quick", "--run-id", "r")
    wait_rows(rows, 2)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    lock = json.loads((run / runbook.LOCK_NAME).read_text())         # left behind by kill -9
    assert lock["pid"] == first.pid
    r = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--resume", "r", "--no-build"], cwd=book,
                       env={**os.environ, "BOOK_ROOT": str(book)}, capture_output=True, text=True, timeout=200)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"took over the stale lock" in r.stderr and f"pid {first.pid}" in r.stderr
    assert sorted(x["i"] for x in results.read_rows(rows)) == list(range(10))
    assert not (run / runbook.LOCK_NAME).exists()


def test_a_sigterm_releases_the_lock(book):
    tag = uuid.uuid4().hex
    run = book / "runs" / "r"
    first = runbook_proc(book, tag, "--target", "quick", "--run-id", "r")
    wait_rows(run / "results" / "01_slow" / "points.jsonl", 1)
    assert json.loads((run / runbook.LOCK_NAME).read_text())["pid"] == first.pid
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=60)
    assert first.returncode == 143 and not (run / runbook.LOCK_NAME).exists()
