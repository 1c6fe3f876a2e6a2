"""Start, health-check and stop an inference server as a real child process.

A server is described by a `ServerSpec` (argument list, extra environment, host, port, health path,
memory cap), never by a shell string. `Server` starts it under a keeper (helpers.core.procs) in its
own process session, copies its output line by line into a log file in the run directory (a line longer
than MAX_LOG_LINE bytes is cut there and marked, so a server writing without newlines cannot grow this
process), waits for the health URL with a time limit, and stops the whole process tree with SIGTERM and
then SIGKILL: every process the server started, also one that started a process session of its own.

Nothing is left running: `with Server(...)` stops the tree on any exception (a notebook interrupt is
a KeyboardInterrupt), every live server is also stopped at interpreter exit (atexit), a finaliser
stops one that is garbage-collected, and the keeper ends the tree within a fraction of a second when
the Python process that started it dies, also by kill -9. A spec with `memory_mb` runs within that
resident-memory cap (enforced by the keeper); `peak_rss_mib` says what the server used.
"""
from __future__ import annotations

import atexit
import collections
import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from helpers.core import procs
from helpers.serving.fetch import Deadlines, RequestTimeout, fetch


#: the longest line of a server's output that is kept (in its log and in memory); a longer one is cut there
#: and marked, the rest of it counted and dropped. Real log lines (tracebacks included) are far shorter.
MAX_LOG_LINE = 64 * 1024
CUT_MARK = f" [line cut: longer than {MAX_LOG_LINE} bytes; the rest of it is not kept]\n".encode()


class ServerError(RuntimeError):
    """A server could not be started or did not become healthy."""

    def __init__(self, message: str, log_excerpt: str = "", returncode: int | None = None):
        super().__init__(message + (f"\n--- last lines of the server log ---\n{log_excerpt}" if log_excerpt else ""))
        self.log_excerpt = log_excerpt
        self.returncode = returncode


class ServerExited(ServerError):
    """The server process exited before it became healthy (or while in use)."""


class StartupTimeout(ServerError):
    """The server did not answer its health URL within the time limit."""


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out on its own (bind to 0, connect); 32768 where it cannot be read."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


FREE_PORT_LOW = 15000   # free_port draws from FREE_PORT_LOW up to the kernel's ephemeral range
#: where free_port's claims live: one file per port, locked (flock) by the process that drew it, for its lifetime
PORT_CLAIMS = Path(tempfile.gettempdir()) / "helpers-free-ports"
_CLAIMED: dict[int, int] = {}   # port -> the open, locked claim file's descriptor (released when this process ends)


def claim_port(port: int) -> bool:
    """Whether this process now holds `port`'s claim: an exclusive, non-blocking flock on its claim file, kept
    until the process ends (the kernel drops the lock with the process, so no claim outlives its owner)."""
    if port in _CLAIMED:
        return False                    # drawn before by this process: its server may hold it now
    try:
        PORT_CLAIMS.mkdir(mode=0o777, exist_ok=True)
        fd = os.open(PORT_CLAIMS / str(port), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return True                     # no claim folder to write: the bind check alone decides, as before
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _CLAIMED[port] = fd
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now and that no other process of this package will be given,
    drawn at random from below the kernel's ephemeral range.

    A port the kernel picked (bind to port 0) is one it may pick again for any other socket - every client
    connection takes one - in the moment between this check and the server's own bind, and the server then
    exits with "address already in use" (seen under the full test suite). Ports below the ephemeral range are
    never handed out by the kernel. Two callers of this function (test workers, chapters, a session beside this
    one) could still draw the same port before either server bound it; so each port drawn is claimed for the
    drawing process's lifetime by a lock on a file in PORT_CLAIMS, which another process's draw skips. The draw is
    the operating system's randomness, not the `random` module's (a process that seeds that one would draw the
    same ports as every other that did). Where the range is too small, the kernel's pick is the fallback."""
    low, high = FREE_PORT_LOW, _ephemeral_low()
    if high - low >= 1000:
        for port in random.SystemRandom().sample(range(low, high), 64):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            if claim_port(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class ServerSpec:
    """How to start one server: `argv` is the program and its arguments (no shell)."""

    argv: tuple[str, ...]
    port: int
    host: str = "127.0.0.1"
    env: Mapping[str, str] = field(default_factory=dict)   # added to (and overriding) os.environ
    health_path: str = "/health"
    name: str = "server"
    cwd: str | None = None
    memory_mb: float | None = None     # resident-memory cap of the whole server tree (None: no cap)
    health_timeout_s: float = 5.0      # a health probe answered later than this does not count as healthy

    def __post_init__(self):
        if isinstance(self.argv, (str, bytes)):
            raise TypeError(
                f"ServerSpec.argv = {self.argv!r} is a string; expected a list of arguments "
                "(e.g. ['transformers', 'serve', MODEL, '--port', '8000']): servers are never started "
                "through a shell string"
            )
        argv = tuple(str(a) for a in self.argv)
        if not argv:
            raise ValueError("ServerSpec.argv is empty; expected the program and its arguments")
        object.__setattr__(self, "argv", argv)
        if not (0 < int(self.port) < 65536):
            raise ValueError(f"ServerSpec.port = {self.port!r}: expected a TCP port 1..65535")
        if not self.health_path.startswith("/"):
            raise ValueError(f"ServerSpec.health_path = {self.health_path!r}: expected a path starting with '/'")
        bad = {k: v for k, v in self.env.items() if not isinstance(k, str) or not isinstance(v, str)}
        if bad:
            raise TypeError(f"ServerSpec.env must map strings to strings; bad entries: {bad}")
        h = self.health_timeout_s
        if isinstance(h, bool) or not isinstance(h, (int, float)) or not 0 < h < float("inf"):
            raise ValueError(f"ServerSpec.health_timeout_s = {h!r}: expected a positive, finite number of seconds "
                             "(how long one health probe may take; default 5)")
        if self.memory_mb is not None and not (isinstance(self.memory_mb, (int, float))
                                               and not isinstance(self.memory_mb, bool)
                                               and 16 <= self.memory_mb < float("inf")):
            raise ValueError(f"ServerSpec.memory_mb = {self.memory_mb!r}: expected a memory cap in MiB (16 or more) "
                             "or None for no cap")

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def health_url(self) -> str:
        return self.base_url + self.health_path


_LIVE: "weakref.WeakSet[Server]" = weakref.WeakSet()


def _stop_all_at_exit() -> None:
    for srv in list(_LIVE):
        try:
            srv.stop()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


atexit.register(_stop_all_at_exit)


def group_alive(pgid: int) -> bool:
    """Whether any process of process group `pgid` still exists (zombies excluded where visible)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(0) also succeeds for zombies; look them up in /proc where it exists
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for p in proc.iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


class Server:
    """One running server. Use as a context manager: `with Server(spec, log_path) as srv: ...`."""

    def __init__(self, spec: ServerSpec, log_path: str | os.PathLike, startup_timeout_s: float = 120.0,
                 stop_grace_s: float = 10.0, tail_lines: int = 400):
        for k, v in (("startup_timeout_s", startup_timeout_s), ("stop_grace_s", stop_grace_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v == float("inf"):
                raise ValueError(f"{k} = {v!r}: expected a positive, finite number of seconds")
        self.spec = spec
        self.log_path = Path(log_path)
        self.startup_timeout_s = float(startup_timeout_s)
        self.stop_grace_s = float(stop_grace_s)
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None
        self.startup_s: float | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._pump: threading.Thread | None = None
        self._lock = threading.Lock()
        self.report_path = self.log_path.with_name(self.log_path.name + ".proc.json")
        self.report: dict = {}           # the keeper's report once stopped (reason, peak memory, ...)
        self.late_health_s: float | None = None   # a health answer that came, but after health_timeout_s

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> "Server":
        if self.proc is not None:
            raise RuntimeError(f"server {self.spec.name!r} was already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.spec.env}
        prog = self.spec.argv[0]
        if shutil.which(prog, path=env.get("PATH")) is None and not (os.sep in prog and os.access(prog, os.X_OK)):
            raise ServerError(
                f"cannot start server {self.spec.name!r}: program {prog!r} not found (no such executable); "
                "install it or give its full path in the spec's argv")
        try:
            self.proc = procs.popen(
                list(self.spec.argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=self.spec.cwd, memory_mb=self.spec.memory_mb, report=self.report_path,
                grace_s=self.stop_grace_s,
            )
        except FileNotFoundError as e:
            raise ServerError(
                f"cannot start server {self.spec.name!r}: {e}; install it or give its full path in the spec's argv"
            ) from None
        self.pgid = self.proc.pid  # the keeper leads the tree's process group
        self._t0 = time.monotonic()
        _LIVE.add(self)
        weakref.finalize(self, Server._finalize, self.pgid, self.proc)
        self._pump = threading.Thread(target=self._copy_log, name=f"log-{self.spec.name}", daemon=True)
        self._pump.start()
        return self

    def _copy_log(self) -> None:
        """Copy the server's output into the log file and the tail, line by line, each line cut at
        MAX_LOG_LINE bytes and marked (a server writing without newlines cannot grow this process)."""
        assert self.proc is not None and self.proc.stdout is not None
        out = self.proc.stdout
        with self.log_path.open("ab", buffering=0) as f:
            def keep(raw: bytes) -> None:
                f.write(raw)
                with self._lock:
                    self._tail.append(raw.decode("utf-8", "replace").rstrip("\n"))

            for raw in iter(lambda: out.readline(MAX_LOG_LINE), b""):
                if raw.endswith(b"\n") or len(raw) < MAX_LOG_LINE:
                    keep(raw)
                    continue
                keep(raw + CUT_MARK)
                dropped = 0
                for rest in iter(lambda: out.readline(MAX_LOG_LINE), b""):
                    dropped += len(rest)
                    if rest.endswith(b"\n"):
                        break
                keep(f"[the line cut above went on for {dropped} more bytes, not kept]\n".encode())

    def wait_healthy(self, timeout_s: float | None = None) -> float:
        """Poll the health URL until it answers 200; return seconds since start.

        Raises ServerExited if the process exits first, StartupTimeout after `timeout_s`."""
        if self.proc is None:
            raise RuntimeError("start() the server before waiting for it")
        limit = self.startup_timeout_s if timeout_s is None else float(timeout_s)
        deadline = self._t0 + limit
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self._join_log()
                raise ServerExited(
                    f"server {self.spec.name!r} exited with code {rc} before becoming healthy "
                    f"(log: {self.log_path})", self.log_excerpt(), rc)
            if self._healthy(max(0.5, deadline - time.monotonic())):
                self.startup_s = time.monotonic() - self._t0
                return self.startup_s
            if time.monotonic() > deadline:
                h, url = self.spec.health_timeout_s, self.spec.health_url
                if self.late_health_s is not None:
                    said = (f"was not seen healthy within {limit:g} s: {url} answered, but after "
                            f"{self.late_health_s:.1f} s, beyond the {h:g} s one health probe may take "
                            f"(log: {self.log_path}); raise health_timeout_s if the server is only slow to answer it")
                else:
                    said = (f"did not answer {url} within {limit:g} s (log: {self.log_path}); raise the startup "
                            f"time limit if it is only slow")
                raise StartupTimeout(f"server {self.spec.name!r} {said}", self.log_excerpt())
            time.sleep(0.2)

    def _healthy(self, wait_s: float | None = None) -> bool:
        """Whether the health URL answers 200 within the spec's health_timeout_s in all (a deadline, not a
        per-read limit). The probe waits up to `wait_s` (the startup time left) so that an answer that comes
        later than health_timeout_s is seen and its time kept (`late_health_s`), though it does not count."""
        h = self.spec.health_timeout_s
        w = max(h, wait_s or h)
        t0 = time.monotonic()
        try:
            ok = fetch(self.spec.health_url, deadlines=Deadlines(min(h, w), w, w), read_body=False).status == 200
        except (RequestTimeout, ConnectionError, OSError, ValueError):
            return False
        took = time.monotonic() - t0
        if ok and took > h:
            self.late_health_s = took
            return False
        return ok

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """Stop the whole process tree: SIGTERM to every process, wait up to the grace period, then
        SIGKILL (helpers.core.procs.stop); the keeper's report lands in `self.report`."""
        if self.proc is None:
            return None
        procs.stop(self.proc, self.stop_grace_s)
        if self.pgid is not None and group_alive(self.pgid):
            self._signal_group(signal.SIGKILL)
        self.proc.wait()
        self._join_log()
        _LIVE.discard(self)
        self.report = procs.read_report(self.report_path)
        return self.proc.returncode

    @property
    def memory_note(self) -> str:
        """What the page says of the server's memory: its peak resident memory and the cap it ran under."""
        rep = self.report or {}
        peak = rep.get("peak_rss_mib")
        if peak is None and self.running():
            peak = procs.tree_peak_rss_mib(self.proc.pid)
        cap = self.spec.memory_mb
        txt = f"peak {peak:.0f} MiB resident" if peak is not None else "peak memory not measured"
        txt += f" (cap {cap:g} MiB, enforced)" if cap else " (no memory cap)"
        if rep.get("reason") == "memory":
            txt += ": killed for exceeding the cap"
        return txt

    def peak_rss_mib(self) -> float | None:
        """The server's peak resident memory so far (from /proc while it runs, from the keeper's report
        once stopped), in MiB."""
        if self.report.get("peak_rss_mib") is not None:
            return float(self.report["peak_rss_mib"])
        if self.proc is not None and self.running():
            return round(procs.tree_peak_rss_mib(self.proc.pid), 1)
        return None

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _join_log(self) -> None:
        if self._pump is not None:
            self._pump.join(timeout=5)

    @staticmethod
    def _finalize(pgid: int, proc: subprocess.Popen) -> None:
        if proc.poll() is None or group_alive(pgid):
            procs.kill_tree(proc.pid)

    # -- log --------------------------------------------------------------------------------------
    def log_text(self) -> str:
        with self._lock:
            return "\n".join(self._tail)

    def log_excerpt(self, n: int = 25) -> str:
        with self._lock:
            return "\n".join(list(self._tail)[-n:])

    # -- context manager --------------------------------------------------------------------------
    def __enter__(self) -> "Server":
        self.start()
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
