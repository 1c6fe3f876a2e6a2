"""A sweep keeps within its notebook cell's time limit (issue 23, item 9): each point gets its own budget,
estimated from the points measured, and a sweep that cannot finish before the limit stops there and is reported
"partial, resume with ...", not a chapter failed by a cell timeout; --resume continues it without repeating a
point. A real runbook over a chapter that sweeps a real, saturated local server."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import minibook
from helpers.core import results

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
FAULT = str(Path(__file__).parent / "fixtures" / "fault_server.py")

BODY = """
import os, sys
from helpers.serving import client as cl, live
from helpers.serving.server import ServerSpec, free_port
port = free_port()
spec = ServerSpec(argv=[sys.executable, os.environ['BOOK_TEST_FAULT'], '--port', str(port), 'ok'], port=port,
                  name='slow',
                  env={'FAULT_REPLY_DELAY_S': '0.5'})
df = live.sweep_server(spec, 'fake', out / 'sweep.jsonl', out, [cl.Workload(4, 2)], [1, 2, 4, 8, 16, 32, 64],
                       {'variant': 'a'}, 1, startup_timeout_s=30, request_timeout_s=60)
glue('answer', float(len(df)), display=False)
"""


def test_a_sweep_longer_than_its_cell_limit_ends_partial_and_resumes(tmp_path):
    book = minibook.book(tmp_path / "book", {"03_sweep": (BODY, "Sweep")})
    (book / "targets" / "short.yaml").write_text("description: a short cell limit\nparameters: {mode: auto}\n"
                                                 "execution_timeout: 30\n")
    env = {**os.environ, "BOOK_ROOT": str(book), "BOOK_TEST_FAULT": FAULT}
    r = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--target", "short", "--run-id", "r",
                        "--no-build"], cwd=book, env=env, capture_output=True, text=True, timeout=300)
    run = book / "runs" / "r"
    m = json.loads((run / "manifest.json").read_text())
    rec = m["chapters"][0]
    assert rec["status"] == "partial" and m["status"] == "partial", (r.stdout, r.stderr, rec.get("error"))
    assert r.returncode == 0 and "resume with" in r.stdout and "--resume" in rec["error"]["evalue"]
    assert "point(s) left" in rec["error"]["evalue"] and "CellTimeout" not in json.dumps(rec)
    rows = results.read_rows(run / "results" / "03_sweep" / "sweep.jsonl")
    first = sorted(x["concurrency"] for x in rows)
    assert first and first == [1, 2, 4, 8, 16, 32, 64][:len(first)] and len(first) < 7
    r2 = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--resume", "r", "--no-build"], cwd=book,
                        env=env, capture_output=True, text=True, timeout=300)
    rows = results.read_rows(run / "results" / "03_sweep" / "sweep.jsonl")
    got = [x["concurrency"] for x in rows]
    assert len(got) == len(set(got)) and len(got) > len(first), (r2.stdout, r2.stderr)   # progress, no repeat
