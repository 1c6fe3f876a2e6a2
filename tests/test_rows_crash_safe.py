"""Appended rows are whole or absent (issue 23, item 1), on a real full disk (a small tmpfs): a write cut
short is taken back and names the file and the cause, a torn last line left by a crash is reported and never
merged with the next row, and a sweep whose planned point has no row fails instead of ending "ok"."""
import errno
import subprocess
import sys
from pathlib import Path

import pytest

from faultfs import fill, small_tmpfs
from helpers.core import results
from helpers.serving import client as cl, sweep
from helpers.serving.server import Server, ServerSpec, free_port

FAULT = str(Path(__file__).parent / "fixtures" / "fault_server.py")
BIG = "x" * 3000   # a row larger than what is left of a page, so a full tmpfs cuts its write short


@pytest.mark.integration
def test_a_row_cut_short_by_a_full_disk_is_taken_back_and_the_next_is_whole(tmp_path):
    with small_tmpfs(tmp_path, 64) as mnt:
        rows = mnt / "sweep.jsonl"
        results.append_row(rows, {"i": 0, "pad": BIG})
        filler = fill(mnt)
        with pytest.raises(OSError) as e:
            results.append_row(rows, {"i": 1, "pad": BIG})
        assert str(rows) in str(e.value) and "disk is full" in str(e.value) and "free space" in str(e.value)
        assert e.value.errno == errno.ENOSPC
        assert rows.read_bytes().endswith(b"\n")                  # nothing torn left behind
        filler.unlink()
        results.append_row(rows, {"i": 1, "pad": BIG})
        assert [r["i"] for r in results.read_rows(rows)] == [0, 1]


@pytest.mark.integration
def test_a_torn_last_line_from_a_crash_is_reported_dropped_and_never_merged(tmp_path, capfd):
    rows = tmp_path / "rows.jsonl"
    results.append_row(rows, {"i": 0})
    # a process killed in the middle of its own write (a real child, SIGKILLed by itself mid-line)
    subprocess.run([sys.executable, "-c", f"import os,signal; f=open({str(rows)!r},'ab'); f.write(b'{{\"i\": 1, \"pa');"
                    "f.flush(); os.kill(os.getpid(), signal.SIGKILL)"])
    assert results.read_rows(rows) == [{"i": 0}]
    assert "torn last line" in capfd.readouterr().err
    results.append_row(rows, {"i": 1})
    assert results.read_rows(rows) == [{"i": 0}, {"i": 1}]        # the new row is whole, not merged
    assert rows.read_text().count("\n") == 2


@pytest.mark.integration
def test_a_sweep_whose_planned_point_lost_its_row_fails(tmp_path):
    rows = tmp_path / "sweep.jsonl"
    port = free_port()
    spec = ServerSpec(argv=[sys.executable, FAULT, str(port), "ok"], port=port, name="ok")

    def lose_first(row):   # another writer truncates the file after the second point: the first is lost
        if row["concurrency"] == 2:
            keep = rows.read_text().splitlines(keepends=True)[1:]
            rows.write_text("".join(keep))

    with Server(spec, tmp_path / "ok.log", startup_timeout_s=30, stop_grace_s=1) as srv:
        with pytest.raises(sweep.PointsLost, match=r"1 planned point\(s\) have no row.*4/2 x 1.*--resume"):
            sweep.sweep(rows, srv.spec.base_url, "fake", [cl.Workload(4, 2)], [1, 2, 4], labels={"variant": "a"},
                        per_concurrency=1, progress=False, timeout_s=10, on_point=lose_first)


SWEEP_BODY = """
import os, sys, time
from pathlib import Path
from helpers.serving import client as cl, sweep
from helpers.serving.server import Server, ServerSpec, free_port
gate = Path(os.environ['BOOK_TEST_GATE'])
def pause(row):   # after the first point: tell the test, and wait until it has filled the disk
    if not gate.exists():
        gate.with_suffix('.first').write_text('1')
        while not gate.exists():
            time.sleep(0.05)
port = free_port()
spec = ServerSpec(argv=[sys.executable, os.environ['BOOK_TEST_FAULT'], str(port), 'ok'], port=port, name='ok')
with Server(spec, gate.parent / f'server-{port}.log', startup_timeout_s=30, stop_grace_s=1) as srv:
    df = sweep.sweep(out / 'sweep.jsonl', srv.spec.base_url, 'fake', [cl.Workload(4, 2)], [1, 2, 4],
                     labels={'variant': 'a', 'pad': 'x' * 3000}, per_concurrency=1, progress=False, timeout_s=10,
                     on_point=pause)
glue('answer', float(len(df)), display=False)
"""


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_a_full_disk_mid_sweep_then_resume_loses_no_point(tmp_path):
    """The issue's repro: a chapter-03-like sweep with --runs-dir on a small tmpfs, the disk filled after the
    first point, freed, --resume: every planned point has one whole row and the run ends ok."""
    import json
    import os

    import minibook

    book = minibook.book(tmp_path / "book", {"03_sweep": (SWEEP_BODY, "Sweep")})
    gate = tmp_path / "gate"
    env = {**os.environ, "BOOK_ROOT": str(book), "BOOK_TEST_GATE": str(gate), "BOOK_TEST_FAULT": FAULT}
    with small_tmpfs(tmp_path, 2048) as mnt:
        p = subprocess.Popen([sys.executable, "-m", "helpers.book.runbook", "--target", "quick", "--run-id", "r",
                              "--runs-dir", str(mnt), "--no-build"], cwd=book, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        import time
        deadline = time.monotonic() + 240
        while not gate.with_suffix(".first").exists() and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        assert gate.with_suffix(".first").exists(), p.communicate()
        filler = fill(mnt)
        gate.write_text("go")
        out, err = p.communicate(timeout=240)
        assert p.returncode != 0                                    # the chapter failed on the full disk
        assert "sweep.jsonl" in out + err or "manifest.json" in out + err
        filler.unlink()
        r = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--resume", "r", "--runs-dir", str(mnt),
                            "--no-build"], cwd=book, env=env, capture_output=True, text=True, timeout=240)
        run = mnt / "r"
        rows = results.read_rows(run / "results" / "03_sweep" / "sweep.jsonl")
        m = json.loads((run / "manifest.json").read_text())
        assert sorted(x["concurrency"] for x in rows) == [1, 2, 4], (r.stdout, r.stderr)   # none lost, none repeated
        assert all(x["completed"] == x["num_requests"] for x in rows)
        assert r.returncode == 0 and m["status"] == "ok", r.stdout + r.stderr
