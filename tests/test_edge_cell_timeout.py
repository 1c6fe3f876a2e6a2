"""A cell that runs past the target's cell time limit is reported as a cell timeout (issue 36, item 5): on
8874c48 nbclient's CellTimeoutError (an OSError) was reported as `WriteError: ... could not be written or read`.
A real runbook process runs a chapter that sleeps past a 3 s limit."""
import json
import os
import subprocess
import sys

import pytest

import minibook

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_a_cell_past_the_limit_is_a_cell_timeout_naming_the_limit_and_the_fix(tmp_path):
    book = minibook.book(tmp_path / "book", {"01_sleep": ("import time\ntime.sleep(60)\n", "Sleeps")})
    (book / "targets" / "short.yaml").write_text("description: a short cell limit\nparameters: {mode: auto}\n"
                                                 "execution_timeout: 3\n")
    r = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--target", "short", "--run-id", "r",
                        "--no-build"], cwd=book, env={**os.environ, "BOOK_ROOT": str(book)}, capture_output=True,
                       text=True, timeout=240)
    said = r.stdout + r.stderr
    assert r.returncode != 0, said
    err = json.loads((book / "runs" / "r" / "manifest.json").read_text())["chapters"][0]["error"]
    assert err["ename"] == "CellTimeout", err
    assert "execution_timeout = 3 s" in err["evalue"] and "Raise execution_timeout" in err["evalue"], err
    assert "WriteError" not in said and "could not be written" not in said, said
    assert "CellTimeout" in said, said
