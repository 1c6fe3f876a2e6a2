"""The server-log reader is bounded (issue 36, item 7): a line longer than server.MAX_LOG_LINE bytes is cut
there and marked, the rest counted and dropped, so a server writing hundreds of MB without a newline cannot
grow the process that watches it (on 8874c48 a 1 GB newline-free stdout drove the watcher to 3.6 GB resident;
the memory cap covers the server only). A real server process floods its stdout; a real watcher process
starts it through Server and reports its own peak resident memory. benchmarks/bench_edges.py does 1 GB."""
import json
import os
import subprocess
import sys

import pytest

from helpers import repo_root
from helpers.serving import server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

def _bench():
    """benchmarks/bench_edges.py, loaded by path (as test_fidelity loads its benchmark): the flooding server and
    its watcher are written once, there; this test runs them at 256 MiB, the benchmark at 1 GiB."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_edges", repo_root() / "benchmarks" / "bench_edges.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: the server (FLOOD bytes without a newline, then a newline and a last line, then it serves /health) and the
#: watcher (starts it, waits for it, stops it; prints its own peak RSS and what the log holds)
BENCH = _bench()
FLOOD_SERVER, WATCHER = BENCH.FLOOD_SERVER, BENCH.WATCHER


def watch(tmp_path, nbytes):
    env = {**os.environ, "PYTHONPATH": str(repo_root() / "src")}
    p = subprocess.run([sys.executable, "-c", WATCHER, FLOOD_SERVER, str(nbytes), str(tmp_path / "flood.log")],
                       capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_newline_free_flood_is_cut_and_marked_and_the_watcher_stays_small(tmp_path):
    r = watch(tmp_path, 256 << 20)
    assert r["cut"] and r["dropped"] and r["after"], r
    assert r["log_bytes"] < 2 * server.MAX_LOG_LINE, r
    assert r["rss_mb"] < 150, r          # 256 MiB read, a few tens of MB kept: the old reader held it all, twice


def test_ordinary_lines_are_kept_whole(tmp_path):
    r = watch(tmp_path, 0)
    assert r["after"] and not r["cut"], r
    assert (tmp_path / "flood.log").read_text() == "\nthe line after the flood\n"
