"""Real processes, no mocks: servers are stopped as whole process groups, also after timeouts, exceptions
and the parent's death. (Each demo configuration's outcome class is checked on the cpu-demo run's own
attempts, in tests/test_cpu_demo_*.py, so the demo servers are started once per test session.)"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from helpers.serving import classify, demo
from helpers.serving.server import (Server, ServerError, ServerExited, ServerSpec, StartupTimeout, free_port,
                                    group_alive)

pytestmark = [pytest.mark.timeout(300), pytest.mark.integration]


def _stubborn_server_code(port: int) -> str:
    # answers /health, ignores SIGTERM, and has a child that also ignores it: only SIGKILL stops them
    return textwrap.dedent(f"""
        import http.server, signal, subprocess, sys
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen([sys.executable, "-c", "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
            def log_message(self, *a):
                print("request", self.path, flush=True)
        print("listening", flush=True)
        http.server.HTTPServer(("127.0.0.1", {port}), H).serve_forever()
    """)


def test_stop_kills_the_whole_group_term_then_kill(tmp_path):
    port = free_port()
    spec = ServerSpec(argv=[sys.executable, "-c", _stubborn_server_code(port)], port=port, name="stubborn")
    srv = Server(spec, tmp_path / "stubborn.log", startup_timeout_s=30, stop_grace_s=1)
    with pytest.raises(RuntimeError, match="inside the block"):
        with srv:
            assert srv.running()
            time.sleep(0.3)
            assert group_alive(srv.pgid)
            raise RuntimeError("an error inside the block")
    assert not group_alive(srv.pgid)
    assert srv.proc.returncode == -signal.SIGKILL
    assert "listening" in (tmp_path / "stubborn.log").read_text()   # the log was streamed to the run dir


def test_startup_timeout_leaves_nothing(tmp_path):
    port = free_port()
    spec = ServerSpec(argv=[sys.executable, "-c", "import time; time.sleep(600)"], port=port, name="silent")
    srv = Server(spec, tmp_path / "silent.log", startup_timeout_s=1.5, stop_grace_s=1)
    t0 = time.monotonic()
    with pytest.raises(StartupTimeout, match="did not answer .* within 1.5 s"):
        with srv:
            pass
    assert time.monotonic() - t0 < 10
    assert not group_alive(srv.pgid)


def test_exit_during_startup_keeps_log(tmp_path):
    spec = ServerSpec(argv=[sys.executable, "-c", "print('boom: bad config'); raise SystemExit(3)"],
                      port=free_port(), name="dies")
    with pytest.raises(ServerExited) as e:
        with Server(spec, tmp_path / "dies.log", startup_timeout_s=30):
            pass
    assert e.value.returncode == 3 and "boom: bad config" in e.value.log_excerpt


def test_keyboard_interrupt_stops_server(tmp_path):
    port = free_port()
    spec = ServerSpec(argv=[sys.executable, "-c", _stubborn_server_code(port)], port=port, name="interrupted")
    srv = Server(spec, tmp_path / "i.log", startup_timeout_s=30, stop_grace_s=0.5)
    with pytest.raises(KeyboardInterrupt):
        with srv:
            raise KeyboardInterrupt   # what a notebook interrupt raises
    assert not group_alive(srv.pgid)


def test_parent_death_stops_server(tmp_path):
    """A Python process that starts a server and is killed outright leaves no server behind."""
    port = free_port()
    code = textwrap.dedent(f"""
        import sys, time
        from helpers.serving.server import Server, ServerSpec
        spec = ServerSpec(argv=[sys.executable, "-m", "http.server", "{port}", "--bind", "127.0.0.1"], port={port},
                          health_path="/")
        srv = Server(spec, {str(tmp_path / 'orphan.log')!r}, startup_timeout_s=30)
        srv.start(); srv.wait_healthy()
        print(srv.pgid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pgid = int(parent.stdout.readline())
    assert group_alive(pgid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(pgid)


def test_bad_specs_are_clear_errors(tmp_path):
    with pytest.raises(TypeError, match="never started through a shell string"):
        ServerSpec(argv="transformers serve model --port 8000", port=8000)
    with pytest.raises(ValueError, match="port"):
        ServerSpec(argv=["x"], port=0)
    srv = Server(ServerSpec(argv=["/no/such/program"], port=free_port()), tmp_path / "x.log")
    with pytest.raises(ServerError, match="not found"):
        srv.start()
    for bad in (0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="startup_timeout_s"):
            Server(ServerSpec(argv=["x"], port=1), tmp_path / "y.log", startup_timeout_s=bad)
    with pytest.raises(ValueError, match="memory_mb"):
        ServerSpec(argv=["x"], port=1, memory_mb=float("nan"))
    with pytest.raises(ValueError, match="unknown demo configuration 'bogus'"):
        demo.server_spec("bogus", {})


def test_free_port_draws_below_the_kernels_own_range_and_falls_back_to_its_pick(monkeypatch):
    """A port the kernel picked can be picked again for a client connection before the server binds it (a
    server once exited with "address already in use" under the full suite); free_port's ports are below the
    range the kernel hands out, free when drawn, and spread (two workers rarely draw the same one)."""
    import socket

    from helpers.serving import server as sv

    low, high = sv.FREE_PORT_LOW, sv._ephemeral_low()
    ports = [free_port() for _ in range(40)]
    assert all(low <= p < high for p in ports), (low, high, ports)
    assert len(set(ports)) == 40                              # a port drawn once is claimed: never drawn again
    for p in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))
    # a seeded `random` module does not repeat the draws (under `make test` the unit tier seeds it with 0 before
    # every test, and two workers then drew the same port: a server answered for another worker's)
    import random

    random.seed(0)
    first = [free_port() for _ in range(5)]
    random.seed(0)
    assert [free_port() for _ in range(5)] != first
    monkeypatch.setattr(sv, "FREE_PORT_LOW", high - 10)      # too few ports below the range: the kernel's pick
    assert free_port() >= high


@pytest.mark.integration
def test_a_port_another_process_drew_is_not_drawn_here_until_that_process_ends(monkeypatch):
    """Two processes (test workers, a chapter beside them) once drew the same port before either server bound it;
    a drawn port is claimed for the drawing process's lifetime, and the claim ends with that process."""
    from helpers.serving import server as sv

    child = subprocess.Popen([sys.executable, "-c", "import sys; from helpers.serving.server import free_port; "
                              "print(free_port(), flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        others = [p for p in range(sv.FREE_PORT_LOW, sv.FREE_PORT_LOW + 200) if p != port]

        class Draws:                                          # the child's port drawn first, then others
            def sample(self, population, k):
                return [port] + others[:k - 1]
        monkeypatch.setattr(sv.random, "SystemRandom", Draws)
        assert free_port() != port and not sv.claim_port(port)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert sv.claim_port(port)                                # released with the process that held it
