"""Minor faults of issue 23 (item 10), with real processes and files: a stream-only failure costs one time limit,
not two (the warm-up request's and the point's); a model name never reads outside data/models/; Ctrl-C says
"interrupted (Ctrl-C)", not "interrupted ()"."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import minibook
from helpers.core import recorded, results
from helpers.model import arith as ma
from helpers.serving import client as cl
from helpers.serving.server import Server, ServerSpec, free_port

FAULT = str(Path(__file__).parent / "fixtures" / "fault_server.py")
LIMIT_S = 3             # the request limit the fault tests set (s)


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_a_server_that_never_finishes_a_stream_costs_one_limit_per_point(tmp_path):
    port = free_port()
    with Server(ServerSpec(argv=[sys.executable, FAULT, str(port), "keepalive"], port=port, name="keepalive"),
                tmp_path / "s.log", startup_timeout_s=30, stop_grace_s=1) as srv:
        t0 = time.monotonic()
        row = cl.run_point(srv.spec.base_url, "fake", cl.Workload(4, 2), 2, 2, timeout_s=LIMIT_S)
        took = time.monotonic() - t0
    assert row["completed"] == 0 and row["timed_out"] == 2 and "warm-up request ran out of time" in row["errors"]
    # the fault this catches spends a limit on the warm-up and another on the point: the bound is that fault's
    # cost, so a loaded machine would have to add a whole limit to the one the point may take to fail it
    fault_s = 2 * LIMIT_S
    assert took < fault_s, f"{took:.1f} s for a {LIMIT_S} s limit"


def test_a_model_name_that_is_a_path_reads_nothing_outside_data_models(tmp_path):
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text(yaml.safe_dump({"name": "x", "source": next(iter(recorded.sources())), "architecture": "y"}))
    rel = os.path.relpath(outside.with_suffix(""), recorded.data_dir() / "models")
    for name in (rel, "../../targets/auto", "/etc/passwd"):
        with pytest.raises(ma.ModelError, match="not a file stem under data/models/"):
            ma.load_model(name)


@pytest.mark.integration
@pytest.mark.timeout(200)
def test_ctrl_c_says_so_in_its_parentheses(tmp_path):
    body = ("import time\nfrom helpers.core import results\nfor i in range(50):\n"
            "    results.append_row(out / 'p.jsonl', {'i': i})\n    time.sleep(0.3)\nglue('answer', 1.0, display=False)\n")
    book = minibook.book(tmp_path / "book", {"01_slow": (body, "Slow")})
    p = subprocess.Popen([sys.executable, "-m", "helpers.book.runbook", "--target", "quick", "--run-id", "r",
                          "--no-build"], cwd=book, env={**os.environ, "BOOK_ROOT": str(book)}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    rows = book / "runs" / "r" / "results" / "01_slow" / "p.jsonl"
    deadline = time.monotonic() + 120
    while len(results.read_rows(rows)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGINT)   # a terminal's Ctrl-C reaches the whole process group
    out, err = p.communicate(timeout=60)
    # the runbook's own line; nbclient may also print a shutdown traceback naming 'async_execute_cell()'
    assert p.returncode == 130 and "interrupted (Ctrl-C)" in err and "interrupted ()" not in err, err


OVERSHOOT = """
import sys
from pathlib import Path
from helpers.serving import classify
from helpers.serving.server import ServerSpec, free_port
port = free_port()
spec = ServerSpec(argv=[sys.executable, sys.argv[1], str(port), "stream-keepalive"], port=port, name="sk",
                  env={"FAULT_SMOKE_DELAY_S": sys.argv[4]})
a = classify.attempt("sk", spec, "fake", Path(sys.argv[2]), startup_timeout_s=30, decode_concurrency=4,
                     decode_tokens=4, request_timeout_s=float(sys.argv[3]))
print(a.outcome, a.request_s)
"""


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_the_request_phase_ends_at_its_limit_including_what_precedes_the_requests(tmp_path):
    """A fresh process (the client library not yet imported, as in a chapter's kernel): the smoke request is
    answered after half a limit, the decode streams never finish; the phase's time counts from its start, not
    from each request's. Counted from each request's (b6edc51), the phase took the smoke's half limit plus the
    client's first import on top of a whole limit: that fault's cost is the bound, so a loaded machine would have
    to hold the client back half a limit past its deadline to fail the test."""
    smoke_s = LIMIT_S / 2
    r = subprocess.run([sys.executable, "-c", OVERSHOOT, FAULT, str(tmp_path), str(LIMIT_S), str(smoke_s)],
                       capture_output=True, text=True, timeout=100)
    outcome, request_s = r.stdout.split()[-2:]
    fault_s = LIMIT_S + smoke_s
    assert outcome == "hang" and float(request_s) < fault_s, r.stdout + r.stderr
