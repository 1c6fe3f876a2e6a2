"""Chapters that time nothing run two at a time; a chapter that times something runs alone (helpers.book.execution,
planning.quiet). Each chapter of a throw-away book marks its start and end in a shared folder and, where it may have
a neighbour, waits for it to start: the marks, not the clock, say what ran beside what. An interrupt while two run
side by side is recorded on both, and leaves no kernel behind."""
import json
import os
import signal
import sys
import time
import uuid

import pytest

import minibook
from helpers.book import planning
from helpers.core import procs
from proctags import tagged_pids as tagged

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(not procs.LINUX, reason="needs /proc")]

#: each chapter: its start mark; `wait_for` (a chapter stem, or none) waited for up to LANES_WAIT_S (60 s); what it
#: saw; its end
BODY = """
import json, os, time
from pathlib import Path
marks = Path(os.environ["LANES_MARKS"])
me = "{me}"
(marks / f"{{me}}.start").write_text(json.dumps(sorted(p.stem for p in marks.glob("*.start") if p.stem != me)))
seen_running = sorted(p.stem for p in marks.glob("*.start") if p.stem != me and not (marks / f"{{p.stem}}.end").exists())
other = "{wait_for}"
deadline = time.monotonic() + float(os.environ.get("LANES_WAIT_S", "60"))
while other and not (marks / f"{{other}}.start").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
if "{block}":
    while True:
        time.sleep(0.1)
(marks / f"{{me}}.end").write_text(json.dumps({{"running_at_start": seen_running,
                                               "neighbour_seen": bool(other) and (marks / f"{{other}}.start").exists()}}))
glue('answer', 1.0, display=False)
"""


def body(me: str, wait_for: str = "", block: bool = False) -> str:
    return BODY.format(me=me, wait_for=wait_for, block="yes" if block else "")


def book(tmp_path, block: bool = False):
    return minibook.book(tmp_path / "book", {
        "01_a": (body("01_a", "02_b", block), "A"), "02_b": (body("02_b", "01_a", block), "B"),
        "03_c": (body("03_c"), "C"), "04_d": (body("04_d"), "D")})


def run(bk, tag, marks, *extra, lanes="2", wait_s="60"):
    import subprocess

    env = {**os.environ, "BOOK_ROOT": str(bk), "BOOK_TEST_TAG": tag, "LANES_MARKS": str(marks), "BOOK_LANES": lanes,
           "LANES_WAIT_S": wait_s}
    return subprocess.Popen([sys.executable, "-m", "helpers.book.runbook", "--target", "quick", "--run-id", "r",
                             "--no-build", "-p", "mode=recorded", "-p", "03_c.mode=auto", *extra],
                            env=env, cwd=bk, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ends(marks):
    return {p.stem: json.loads(p.read_text()) for p in marks.glob("*.end")}


def test_quiet_chapters_run_side_by_side_and_one_that_times_something_alone(tmp_path):
    bk, marks, tag = book(tmp_path), tmp_path / "marks", uuid.uuid4().hex
    marks.mkdir()
    p = run(bk, tag, marks)
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, out[-2000:] + err[-2000:]
    e = ends(marks)
    assert e["01_a"]["neighbour_seen"] and e["02_b"]["neighbour_seen"], e      # a and b ran at once
    assert e["03_c"]["running_at_start"] == [], e                              # c (mode auto) alone ...
    assert json.loads((marks / "03_c.start").read_text()) == ["01_a", "02_b"], e   # ... after a and b, before d
    m = json.loads((bk / "runs" / "r" / "manifest.json").read_text())
    assert [c["status"] for c in m["chapters"]] == ["ok"] * 4, m["chapters"]
    assert "executed in" in out and "some side by side" in out, out
    assert m["session_duration_s"] < m["duration_s"], (m["session_duration_s"], m["duration_s"])


def test_one_lane_runs_every_chapter_alone(tmp_path):
    bk, marks, tag = book(tmp_path), tmp_path / "marks", uuid.uuid4().hex
    marks.mkdir()
    p = run(bk, tag, marks, lanes="1", wait_s="3")   # alone, a waits out its 3 s for b
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, out[-2000:] + err[-2000:]
    e = ends(marks)
    assert not e["01_a"]["neighbour_seen"] and e["02_b"]["running_at_start"] == [], e


def test_an_interrupt_beside_another_chapter_is_recorded_on_both_and_leaves_nothing(tmp_path):
    bk, marks, tag = book(tmp_path, block=True), tmp_path / "marks", uuid.uuid4().hex
    marks.mkdir()
    p = run(bk, tag, marks)
    deadline = time.monotonic() + 120
    while not ((marks / "01_a.start").exists() and (marks / "02_b.start").exists()):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, out[-2000:] + err[-2000:]
    m = json.loads((bk / "runs" / "r" / "manifest.json").read_text())
    status = {c["stem"]: c["status"] for c in m["chapters"]}
    assert status == {"01_a": "interrupted", "02_b": "interrupted", "03_c": "pending", "04_d": "pending"}, status
    assert m["status"] == "interrupted" and "--resume" in err, err[-2000:]
    deadline = time.monotonic() + 30
    while tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tagged(tag) == [], f"left running: {tagged(tag)}"


def _step(stem, **params):
    return {"stem": stem, "parameters": params, "declared": ["mode", "engine", "server_url"],
            "defaults": {"mode": '"auto"', "engine": '"sglang"', "server_url": '""'}}


def test_which_chapters_are_quiet():
    assert planning.quiet(_step("07_diagnosis"), gpu=True)                   # computes only, in any mode
    assert planning.quiet(_step("06_vm_p2p", mode="recorded"), gpu=True)     # recorded: nothing timed
    assert not planning.quiet(_step("06_vm_p2p"), gpu=False)                 # auto: times copies and collectives
    assert planning.quiet(_step("03_baselines_tuning"), gpu=False)           # auto, no GPU, no server: recorded
    assert not planning.quiet(_step("03_baselines_tuning"), gpu=True)        # a GPU: it may serve
    assert not planning.quiet(_step("03_baselines_tuning", server_url="http://h:1"), gpu=False)
    assert not planning.quiet(_step("02_nan_crash", engine="transformers"), gpu=False)
    assert not planning.quiet(_step("02_nan_crash", mode="live"), gpu=False)
