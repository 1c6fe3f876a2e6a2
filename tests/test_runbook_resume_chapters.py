"""The book's own chapters, killed with kill -9 in the middle of their sweeps and resumed with --resume: the
serving chapter with a real `transformers serve` it launched (tiny model, CPU), and the VM/P2P chapter's
collective sweep with real torchrun workers (gloo). Nothing is left running after the kill, and the resumed
run repeats no finished point and loses none."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from helpers import repo_root
from helpers.core import procs, results
from proctags import tagged

ROOT = repo_root()
pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(600),
              pytest.mark.skipif(not procs.LINUX, reason="needs /proc")]


def runbook(tag, *args, wait=True, timeout=540):
    env = {**os.environ, "BOOK_TEST_TAG": tag}
    cmd = [sys.executable, "-m", "helpers.book.runbook", *args, "--no-build"]
    if not wait:
        return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def until(cond, within_s, what):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def kill_and_check(p, tag):
    alive = tagged(tag)
    p.send_signal(signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 15
    while tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = tagged(tag)
    assert left == {}, f"left running after kill -9 of the runbook: {left}"
    return alive


def test_kill_9_during_a_serving_sweep_of_a_launched_server_then_resume(tmp_path):
    tag, rid = uuid.uuid4().hex, f"test-serving-{uuid.uuid4().hex[:8]}"
    runs = tmp_path / "runs"
    args = ["--target", "cpu-demo", "--chapters", "03_baselines_tuning", "--runs-dir", str(runs), "--run-id", rid,
            "-p", "03_baselines_tuning.concurrencies=[1,2,4,8]", "-p", "03_baselines_tuning.workloads=['16/96']",
            "-p", "03_baselines_tuning.variants=[batched]", "-p", "03_baselines_tuning.requests_per_concurrency=3",
            "-p", "03_baselines_tuning.request_timeout_s=60",
            # the load study after the sweep is not what is killed here (test_cpu_demo_baselines runs it, test_loadstudy
            # resumes it): off, the resumed chapter ends with the sweep
            "-p", "03_baselines_tuning.load_modes='off'"]
    rows = runs / rid / "results" / "03_baselines_tuning" / "sweep.jsonl"
    p = runbook(tag, *args, wait=False)
    until(lambda: len(results.read_rows(rows)) >= 1, 300, "the first sweep point")
    alive = kill_and_check(p, tag)
    assert any("transformers" in c and "serve" in c for c in alive.values()), alive   # the server was up
    before = results.read_rows(rows)
    assert 1 <= len(before) < 4
    m = json.loads((runs / rid / "manifest.json").read_text())
    assert m["status"] == "running" and m["chapters"][2]["status"] == "running"

    r = runbook(tag, "--resume", rid, "--runs-dir", str(runs))
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    after = results.read_rows(rows)
    keys = [(x["variant"], x["workload"], x["concurrency"]) for x in after]
    assert len(keys) == len(set(keys)) == 4 and all(x["completed"] > 0 for x in after)   # none repeated or lost
    assert after[:len(before)] == before
    assert {x["settings_id"] for x in after} == {before[0]["settings_id"]}
    assert all(0 < x["server_peak_rss_mib"] < x["server_memory_cap_mib"] for x in after)
    m = json.loads((runs / rid / "manifest.json").read_text())
    assert m["status"] == "ok" and {c["status"] for c in m["chapters"]} == {"ok", "skipped"}
    assert tagged(tag) == {}


def test_kill_9_during_a_collective_sweep_then_resume(tmp_path):
    tag, rid = uuid.uuid4().hex, f"test-coll-{uuid.uuid4().hex[:8]}"
    runs = tmp_path / "runs"
    args = ["--target", "auto", "--chapters", "06_vm_p2p", "--runs-dir", str(runs), "--run-id", rid]
    pts = runs / rid / "results" / "06_vm_p2p" / "collective_points"
    p = runbook(tag, *args, wait=False)
    until(lambda: any("torch.distributed.run" in c for c in tagged(tag).values()), 300, "torchrun to start")
    until(lambda: list(pts.glob("points-*.jsonl")) and results.read_rows(next(pts.glob("points-*.jsonl"))), 120,
          "the first collective point")
    alive = kill_and_check(p, tag)
    assert sum("helpers.interconnect.worker" in c for c in alive.values()) >= 2, alive   # workers were running
    f = next(pts.glob("points-*.jsonl"))
    before = results.read_rows(f)
    time.sleep(1)
    assert results.read_rows(f) == before, "points were written into the dead run"

    r = runbook(tag, "--resume", rid, "--runs-dir", str(runs))
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    after = results.read_rows(f)
    keys = [(x["op"], x["size_bytes"]) for x in after]
    assert len(keys) == len(set(keys)) and after[:len(before)] == before            # none repeated
    sweep = results.load_table(runs / rid / "results" / "06_vm_p2p", "collective_sweep")
    assert len(sweep) == len(after) and sweep.groupby(["op", "size_bytes"]).size().max() == 1   # none lost
    m = json.loads((runs / rid / "manifest.json").read_text())
    assert m["status"] == "ok" and len(m["sessions"]) == 2
    assert tagged(tag) == {}
