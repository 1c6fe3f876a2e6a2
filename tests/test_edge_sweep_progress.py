"""A sweep that cannot progress says so and exits non-zero (issue 36, item 4), with a real runbook over a chapter
that sweeps a real, saturated local server (one request at a time, tests/fixtures/fault_server.py). On 8874c48 a
point that alone could not fit the cell limit left the run "partial" on every --resume (rc 0, the server
relaunched, no progress), and a sweep's first point was never estimated, so a first point longer than the cell
ran blind into the cell limit with 0 rows. Now the first point is estimated from a probe (its concurrency of
short requests at once) before it runs, and a cell that measured no point because its next point does not fit
fails with SweepCannotProgress, naming the estimate, execution_timeout and the command that raises it; so does a
point needing more than the cell's whole limit, in the first run (issue 47)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import minibook
from helpers.core import results

pytestmark = [pytest.mark.integration, pytest.mark.timeout(500)]
FAULT = str(Path(__file__).parent / "fixtures" / "fault_server.py")

BODY = """
import os, sys
from helpers.serving import client as cl, live
from helpers.serving.server import ServerSpec, free_port
port = free_port()
spec = ServerSpec(argv=[sys.executable, os.environ['BOOK_TEST_FAULT'], '--port', str(port), 'ok'], port=port,
                  name='slow', env={'FAULT_REPLY_DELAY_S': os.environ['BOOK_TEST_DELAY']})
conc = [int(x) for x in os.environ['BOOK_TEST_CONC'].split(',')]
df = live.sweep_server(spec, 'fake', out / 'sweep.jsonl', out, [cl.Workload(4, 2)], conc, {'variant': 'a'}, 1,
                       startup_timeout_s=30, request_timeout_s=60)
glue('answer', float(len(df)), display=False)
"""


def runbook(book, env, *args):
    return subprocess.run([sys.executable, "-m", "helpers.book.runbook", *args, "--no-build"], cwd=book, env=env,
                          capture_output=True, text=True, timeout=300)


def setup(tmp_path, delay, conc):
    book = minibook.book(tmp_path / "book", {"03_sweep": (BODY, "Sweep")})
    (book / "targets" / "short.yaml").write_text("description: a short cell limit\nparameters: {mode: auto}\n"
                                                 "execution_timeout: 30\n")
    env = {**os.environ, "BOOK_ROOT": str(book), "BOOK_TEST_FAULT": FAULT, "BOOK_TEST_DELAY": str(delay),
           "BOOK_TEST_CONC": conc}
    return book, env


def chapter(book):
    return json.loads((book / "runs" / "r" / "manifest.json").read_text())["chapters"][0]


def cannot_progress(r, rec):
    said = r.stdout + r.stderr
    assert r.returncode != 0, said
    assert rec["status"] == "failed" and rec["error"]["ename"] == "SweepCannotProgress", rec["error"]
    ev = rec["error"]["evalue"]
    assert "execution_timeout = 30 s" in ev and "Raise execution_timeout to at least" in ev, ev
    assert "python -m helpers.book.runbook --target" in ev and "CellTimeout" not in json.dumps(rec), ev


def test_a_first_point_longer_than_the_cell_is_not_started_blind(tmp_path):
    book, env = setup(tmp_path, 4, "8")       # 8 requests one at a time, 4 s each: 36 s with the warm-up
    r = runbook(book, env, "--target", "short", "--run-id", "r")
    rec = chapter(book)
    cannot_progress(r, rec)
    assert "a probe of 8 request(s)" in rec["error"]["evalue"], rec["error"]["evalue"]
    assert results.read_rows(book / "runs" / "r" / "results" / "03_sweep" / "sweep.jsonl") == []
    assert rec["duration_s"] < 30


def test_a_point_that_never_fits_ends_the_first_run_non_zero(tmp_path):
    """Issue 47, item 7: a point that can never fit the cell (more than its whole limit) ends the first run non-zero
    with the fix; on 1beba90 that run ended "partial", rc 0, and only its --resume said the point could not fit."""
    book, env = setup(tmp_path, 1, "1,32")    # 1 x 1 fits (2 s); 32 x 1 needs ~33 s of a 20 s budget
    r = runbook(book, env, "--target", "short", "--run-id", "r")
    cannot_progress(r, chapter(book))
    assert "more than the cell's whole time limit" in chapter(book)["error"]["evalue"]
    rows = results.read_rows(book / "runs" / "r" / "results" / "03_sweep" / "sweep.jsonl")
    assert [x["concurrency"] for x in rows] == [1]
    r = runbook(book, env, "--resume", "r")
    cannot_progress(r, chapter(book))
    rows = results.read_rows(book / "runs" / "r" / "results" / "03_sweep" / "sweep.jsonl")
    assert [x["concurrency"] for x in rows] == [1]
