"""helpers.core.procs with real processes: a kept tree ends with the book (also on kill -9), a stop reaps
children that started a process session of their own, the time limit and the memory cap are enforced,
and the child's exit status comes through the keeper unchanged."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from helpers.core import procs
from proctags import tagged_pids as tagged

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120),
              pytest.mark.skipif(not procs.LINUX, reason="keepers need Linux (/proc, prctl)")]

# a child that starts a grandchild which leaves for a process session of its own, then waits
ESCAPER_S = 600       # how long the escaper's processes sleep when nothing ends them
ESCAPER = textwrap.dedent(f"""
    import os, subprocess, sys, time
    g = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep({ESCAPER_S})"])
    print(os.getpid(), g.pid, flush=True)
    time.sleep({ESCAPER_S})
""")


def wait_gone(pids, within_s: float) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = [p for p in pids if procs.alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if procs.alive(p)]


def test_stop_reaps_a_grandchild_that_started_its_own_session(tmp_path):
    p = procs.popen([sys.executable, "-c", ESCAPER], stdout=subprocess.PIPE, text=True,
                    report=tmp_path / "r.json", grace_s=1)
    child, grandchild = map(int, p.stdout.readline().split())
    time.sleep(0.2)
    assert os.getsid(grandchild) != os.getsid(child)          # it escaped the session
    assert {child, grandchild} <= set(procs.descendants(p.pid))
    procs.stop(p, grace_s=1)
    assert wait_gone([child, grandchild, p.pid], 2) == []
    rep = procs.read_report(p)
    assert rep["reason"] == "stopped" and rep["returncode"] == -signal.SIGTERM
    p.stdout.close()


def test_kill_9_of_the_books_process_ends_the_whole_tree(tmp_path):
    tag = uuid.uuid4().hex
    book = textwrap.dedent(f"""
        import subprocess, sys, time
        from helpers.core import procs
        p = procs.popen([sys.executable, "-c", {ESCAPER!r}], stdout=subprocess.PIPE, text=True)
        print(p.pid, p.stdout.readline().strip(), flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", book], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "BOOK_TEST_TAG": tag})
    pids = [int(x) for x in parent.stdout.readline().split()]
    assert len(pids) == 3 and all(procs.alive(x) for x in pids)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert wait_gone(pids, ESCAPER_S / 10) == []      # ended by the keeper: each would sleep its 600 s otherwise
    assert tagged(tag) == []
    parent.stdout.close()


def test_time_limit_ends_the_tree_and_says_so(tmp_path):
    p = procs.popen([sys.executable, "-c", ESCAPER], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    timeout_s=1.0, report=tmp_path / "r.json", grace_s=0.5)
    child, grandchild = map(int, p.stdout.readline().split())
    text = p.stdout.read()
    p.wait(timeout=ESCAPER_S / 10)                    # ended at its limit: the tree would sleep its 600 s otherwise
    assert "time limit of 1 s reached" in text
    assert procs.read_report(p)["reason"] == "timeout"
    assert wait_gone([child, grandchild], 1) == []


def test_memory_cap_is_enforced_and_reported(tmp_path):
    # shared anonymous memory is outside RLIMIT_DATA: the keeper's resident-memory watchdog ends it
    grow = ("import mmap, time\nm = mmap.mmap(-1, 400 << 20)\n"
            "for i in range(0, 400 << 20, 4096):\n    m[i] = 1\ntime.sleep(600)")
    p = procs.popen([sys.executable, "-c", grow], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    memory_mb=128, report=tmp_path / "r.json")
    text = p.communicate(timeout=30)[0]
    rep = procs.read_report(p)
    assert rep["reason"] == "memory" and rep["memory_cap_mib"] == 128
    assert "memory cap of 128 MiB exceeded" in text
    assert p.returncode in (-signal.SIGTERM, -signal.SIGKILL)
    # private allocations beyond the cap fail at once (RLIMIT_DATA), inside the program
    p = procs.popen([sys.executable, "-c", "b = bytearray(400 << 20)"], stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True, memory_mb=128, report=tmp_path / "r2.json")
    text = p.communicate(timeout=30)[0]
    assert "MemoryError" in text and p.returncode == 1
    assert procs.read_report(p)["memory_cap_mib"] == 128
    # under the cap: the peak is measured and reported
    p = procs.popen([sys.executable, "-c", "b = bytearray(40 << 20); import time; time.sleep(0.6)"],
                    memory_mb=256, report=tmp_path / "r3.json")
    assert p.wait(timeout=30) == 0
    rep = procs.read_report(p)
    assert rep["reason"] == "exited" and 40 < rep["peak_rss_mib"] < 256


def test_exit_status_comes_through_the_keeper(tmp_path):
    assert procs.popen([sys.executable, "-c", "raise SystemExit(3)"]).wait(timeout=30) == 3
    p = procs.popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert p.wait(timeout=30) == -signal.SIGKILL
    p = procs.popen(["/no/such/program"], stderr=subprocess.PIPE, text=True, report=tmp_path / "r.json")
    err = p.communicate(timeout=30)[1]
    assert p.returncode == 127 and "cannot start '/no/such/program'" in err
    assert json.loads((tmp_path / "r.json").read_text())["reason"] == "not-started"
    with pytest.raises(procs.ProcessError, match="start_new_session is set by the keeper"):
        procs.popen(["true"], start_new_session=True)
