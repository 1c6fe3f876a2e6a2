"""The server-log reader is bounded (issue 36, item 7): a line longer than server.MAX_LOG_LINE bytes is cut
there and marked, the rest counted and dropped, so a server writing hundreds of MB without a newline cannot
grow the process that watches it (on 8874c48 a 1 GB newline-free stdout drove the watcher to 3.6 GB resident;
the memory cap covers the server only). A real server process floods its stdout; a real watcher process
starts it through Server and reports its own peak resident memory. benchmarks/bench_edges.py does 1 GB."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from helpers import repo_root
from helpers.serving import server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: the server: FLOOD bytes without a newline, then a newline and a last line, then it serves /health
FLOOD_SERVER = textwrap.dedent("""
    import sys, http.server
    port, n = int(sys.argv[1]), int(sys.argv[2])
    block = b"x" * (1 << 20)
    for _ in range(n >> 20):
        sys.stdout.buffer.write(block)
    sys.stdout.buffer.write(b"\\nthe line after the flood\\n")
    sys.stdout.buffer.flush()
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")

#: the watcher: starts the server, waits for it, stops it; prints its own peak RSS and what the log holds
WATCHER = textwrap.dedent("""
    import json, resource, sys
    from pathlib import Path
    from helpers.serving.server import Server, ServerSpec, free_port
    code, n, log = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    port = free_port()
    with Server(ServerSpec(argv=[sys.executable, "-c", code, str(port), str(n)], port=port, name="flood"), log,
                startup_timeout_s=120, stop_grace_s=1) as srv:
        pass
    tail = srv.log_text()       # stopped: its log copied to the end
    print(json.dumps({"rss_mb": int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024,
                      "log_bytes": log.stat().st_size, "tail_chars": len(tail),
                      "after": "the line after the flood" in tail, "cut": "line cut: longer than" in tail,
                      "dropped": "more bytes, not kept" in tail}))
""")


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
