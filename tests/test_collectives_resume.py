"""The collective sweep with real torchrun workers (gloo, two CPU processes): kill -9 of the process that
launched it leaves no torchrun or worker behind and writes no point afterwards; resuming launches only the
points still missing, repeats none, loses none, and never mixes in points made under other settings."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from helpers.core import procs, results
from helpers.interconnect import collectives
from proctags import tagged_pids as tagged

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240),
              pytest.mark.skipif(not procs.LINUX, reason="keepers need Linux (/proc, prctl)")]

SIZES = [2**18 + 4096 * i for i in range(4)]       # 0.3-1 s a point: a kill lands mid-sweep
KW = dict(warmup=1, iters=600, repeats=2, timeout_s=120)


def points_file(wd):
    files = [p for p in wd.glob("points-*.jsonl")]
    assert len(files) == 1, files
    return files[0]


def test_kill_9_mid_sweep_leaves_nothing_and_resume_loses_and_repeats_no_point(tmp_path):
    tag = uuid.uuid4().hex
    wd = tmp_path / "points"
    book = textwrap.dedent(f"""
        from helpers.interconnect import collectives
        collectives.resume_collectives("gloo", 2, {SIZES!r}, workdir={str(wd)!r}, variant="resume-test", **{KW!r})
    """)
    parent = subprocess.Popen([sys.executable, "-c", book], env={**os.environ, "BOOK_TEST_TAG": tag},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    rows = []
    while time.monotonic() < deadline and len(rows) < 2:
        time.sleep(0.1)
        rows = results.read_rows(points_file(wd)) if list(wd.glob("points-*.jsonl")) else []
    assert len(rows) >= 2, "the sweep never wrote two points"
    assert len(tagged(tag)) >= 3                      # the launcher, the keeper, torchrun and its workers
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    t0 = time.monotonic()
    while tagged(tag) and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    assert tagged(tag) == [], "processes outlived the kill"
    before = results.read_rows(points_file(wd))
    time.sleep(1.5)
    assert results.read_rows(points_file(wd)) == before, "points were written into the dead run"
    total = len(SIZES) * len(collectives.OPS)
    assert len(before) < total, "the sweep finished before the kill: make it slower"

    r = collectives.resume_collectives("gloo", 2, SIZES, workdir=wd, variant="resume-test", **KW)
    assert r.status == "ok", r.message + r.log[-2000:]
    after = results.read_rows(points_file(wd))
    keys = [(p["op"], p["size_bytes"]) for p in after]
    assert len(keys) == len(set(keys)) == total          # none repeated, none lost
    assert after[:len(before)] == before                 # the finished points were kept as they were
    assert len(r.rows) == total

    again = collectives.resume_collectives("gloo", 2, SIZES, workdir=wd, variant="resume-test", **KW)
    assert again.status == "ok" and again.wall_s == 0 and "resumed: all" in again.message
    assert len(again.rows) == total


def test_points_under_other_settings_are_not_mixed_in(tmp_path):
    a = collectives.resume_collectives("gloo", 2, [64, 4096], ["all_reduce"], workdir=tmp_path, warmup=1, iters=3,
                                       repeats=1, timeout_s=90)
    b = collectives.resume_collectives("gloo", 2, [64, 4096], ["all_reduce"], workdir=tmp_path, warmup=1, iters=5,
                                       repeats=1, timeout_s=90)
    assert a.status == b.status == "ok"
    assert {p["iters"] for p in a.rows} == {3} and {p["iters"] for p in b.rows} == {5}
    files = sorted(tmp_path.glob("points-*.jsonl"))
    assert len(files) == 2
    settings = [json.loads(f.with_suffix(".settings.json").read_text()) for f in files]
    assert sorted(s["iters"] for s in settings) == [3, 5]
