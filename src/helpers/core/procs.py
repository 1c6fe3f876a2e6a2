"""Processes the book starts: each one dies with the book, and stopping one ends its whole tree.

    proc = procs.popen(argv, stdout=..., timeout_s=600, memory_mb=2048, report=path)
    ...
    procs.stop(proc, grace_s=10)        # SIGTERM to every process of the tree, then SIGKILL

`popen` does not start `argv` itself: it starts a *keeper* (this file run as a script, standard library
only) in a new process session, and the keeper starts `argv`. The keeper

- is a child subreaper (PR_SET_CHILD_SUBREAPER): every process `argv` starts, directly or not, stays
  its descendant even when its parent exits or it starts a process session of its own (torchrun's
  workers, a server's engine processes), so a stop finds and ends all of them;
- watches the book: when the process that called `popen` dies, also by kill -9, the keeper sees its
  parent change within 0.1 s and ends the tree (a watchdog, so that it does not depend on which thread
  of the book started it, as PR_SET_PDEATHSIG would); `argv` itself gets PR_SET_PDEATHSIG=SIGKILL from
  the keeper, so it dies even if the keeper is killed outright;
- enforces an optional time limit and an optional memory cap (the resident memory of the whole tree,
  sampled every 0.25 s, with RLIMIT_DATA at the same size on `argv` so that a single large allocation
  fails at once instead of slipping between two samples);
- writes a JSON report (why the tree ended, its exit status, its peak resident memory) and exits with
  `argv`'s own status (a child killed by signal N makes the keeper die of signal N, so
  `Popen.returncode` reads as it would without the keeper).

`die_with_parent` is the plain PR_SET_PDEATHSIG preexec_fn for a short-lived helper process.
Linux only; elsewhere `popen` falls back to a plain process group.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
KEEPER = str(Path(__file__).resolve())
LINUX = sys.platform.startswith("linux")
#: the report's `reason` values: the child exited by itself, the book asked for a stop, the book died,
#: the time limit or the memory cap ended it, or the child could not be started
REASONS = ("exited", "stopped", "parent-died", "timeout", "memory", "not-started")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class ProcessError(RuntimeError):
    """A keeper could not be started as asked."""


# ----------------------------------------------------------------------------- /proc helpers
def _prctl(option: int, arg: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """preexec_fn: the child gets `sig` when the thread that started it exits (PR_SET_PDEATHSIG), and
    exits at once if its parent is already gone."""
    ppid = os.getppid()
    _prctl(PR_SET_PDEATHSIG, int(sig))
    if os.getppid() != ppid:
        os._exit(1)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    return (rest[0], int(rest[1])) if len(rest) > 1 else None


def _table() -> dict[int, tuple[str, int]]:
    out = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for n in names:
        if n.isdigit():
            st = _stat(int(n))
            if st is not None:
                out[int(n)] = st
    return out


def descendants(pid: int, include_zombies: bool = False) -> list[int]:
    """Every live descendant of `pid` (children first, breadth-first), read from /proc."""
    table = _table()
    children: dict[int, list[int]] = {}
    for p, (_state, ppid) in table.items():
        children.setdefault(ppid, []).append(p)
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        if include_zombies or table[p][0] not in ("Z", "X"):
            out.append(p)
        todo.extend(children.get(p, []))
    return out


def send(pids, sig: int) -> None:
    """Send `sig` to every pid, passing over those already gone (or not ours)."""
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def alive(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def peak_rss_bytes(pid: int) -> int:
    """The resident-memory high-water mark of one process (VmHWM)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def tree_rss_mib(pid: int) -> float:
    """Resident memory of `pid`'s descendants now (a keeper's tree: the server's processes), in MiB."""
    return sum(rss_bytes(p) for p in descendants(pid)) / 2**20


def tree_peak_rss_mib(pid: int) -> float:
    """The sum of the high-water marks of `pid`'s live descendants, in MiB (exact for a one-process
    server; an upper bound for several processes that peaked at different times)."""
    return sum(peak_rss_bytes(p) for p in descendants(pid)) / 2**20


# ----------------------------------------------------------------------------- the book's side
def popen(argv, *, timeout_s: float | None = None, memory_mb: float | None = None,
          report: str | os.PathLike | None = None, grace_s: float = 5.0, **kw) -> subprocess.Popen:
    """Start `argv` under a keeper (see the module docstring); other keyword arguments go to Popen
    (stdout, stderr, env, cwd, text, ...). `timeout_s`: the keeper ends the tree after this many
    seconds. `memory_mb`: the tree's resident-memory cap. `report`: where the keeper writes its JSON
    report. Returns the keeper's Popen (its pid leads the tree's process group)."""
    argv = [str(a) for a in argv]
    if not argv:
        raise ProcessError("popen: empty argument list; expected the program and its arguments")
    for k in ("start_new_session", "preexec_fn", "process_group"):
        if k in kw:
            raise ProcessError(f"popen: {k} is set by the keeper; leave it out")
    if not LINUX:
        return subprocess.Popen(argv, start_new_session=True, **kw)
    cmd = [sys.executable, "-I", "-S", KEEPER, "--parent", str(os.getpid()), "--grace", f"{float(grace_s):g}"]
    if timeout_s is not None:
        cmd += ["--timeout", f"{float(timeout_s):g}"]
    if memory_mb is not None:
        cmd += ["--memory-mb", f"{float(memory_mb):g}"]
    if report is not None:
        Path(report).parent.mkdir(parents=True, exist_ok=True)
        Path(report).unlink(missing_ok=True)
        cmd += ["--report", str(report)]
    proc = subprocess.Popen(cmd + ["--", *argv], start_new_session=True, **kw)
    proc.keeper_report = str(report) if report is not None else None  # type: ignore[attr-defined]
    return proc


def stop(proc: subprocess.Popen, grace_s: float = 5.0) -> int | None:
    """End a keeper's whole tree: ask the keeper (it sends SIGTERM to every process of the tree, waits
    `grace_s`, then SIGKILLs what is left); if the keeper itself does not end in time, SIGKILL every
    descendant and the keeper from here. Returns the keeper's return code."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s + 5)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait()
    kill_tree(proc.pid, include_root=False)   # anything the keeper's own death left behind
    return proc.returncode


def kill_tree(pid: int, include_root: bool = True, rounds: int = 20) -> None:
    """SIGKILL every live descendant of `pid` (and `pid`), round after round until none is left, and
    what is still in `pid`'s process group."""
    for _ in range(rounds):
        pids = descendants(pid) + ([pid] if include_root and alive(pid) else [])
        if not pids:
            break
        send(pids, signal.SIGKILL)
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def read_report(proc_or_path) -> dict:
    """The keeper's report ({} where it has none yet)."""
    path = getattr(proc_or_path, "keeper_report", proc_or_path)
    if not path:
        return {}
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


# ----------------------------------------------------------------------------- the keeper
class _Keeper:
    def __init__(self, argv, parent: int, timeout_s: float, memory_mb: float, report: str, grace_s: float):
        self.argv, self.parent, self.timeout_s, self.memory_mb = argv, parent, timeout_s, memory_mb
        self.report, self.grace_s = report, grace_s
        self.child = None
        self.status: int | None = None     # the child's wait status
        self.child_maxrss_kib = 0
        self.peak = 0
        self.reason = ""
        self.signalled: list[int] = []
        self.t0 = time.monotonic()

    def say(self, msg: str) -> None:
        try:   # the reader may be gone with the book (a broken pipe): that must not stop the keeper
            sys.stderr.write(f"[keeper {os.getpid()}] {msg}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def _child_preexec(self) -> None:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if self.memory_mb:
            import resource

            cap = int(self.memory_mb * 2**20)
            try:
                resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
            except (ValueError, OSError):
                pass

    def reap(self) -> None:
        """Collect every exited descendant (the child and orphans reparented to us)."""
        while True:
            try:
                pid, status, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.child is not None and pid == self.child.pid:
                self.status = status
                self.child_maxrss_kib = ru.ru_maxrss
                self.child.returncode = os.waitstatus_to_exitcode(status)

    def sample(self) -> int:
        rss = sum(rss_bytes(p) for p in descendants(os.getpid()))
        self.peak = max(self.peak, rss)
        return rss

    def end_tree(self, grace_s: float) -> None:
        pids = descendants(os.getpid())
        send(pids, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while descendants(os.getpid()) and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)
        for _ in range(40):
            left = descendants(os.getpid())
            if not left:
                break
            send(left, signal.SIGKILL)
            time.sleep(0.05)
            self.reap()
        end = time.monotonic() + 5
        while self.status is None and time.monotonic() < end:
            self.reap()
            time.sleep(0.02)
        self.reap()

    def write_report(self) -> None:
        if not self.report:
            return
        rc = os.waitstatus_to_exitcode(self.status) if self.status is not None else None
        rep = {"reason": self.reason, "returncode": rc, "wall_s": round(time.monotonic() - self.t0, 3),
               "peak_rss_mib": round(max(self.peak, self.child_maxrss_kib * 1024) / 2**20, 1),
               "child_max_rss_mib": round(self.child_maxrss_kib / 1024, 1),
               "memory_cap_mib": self.memory_mb or None, "timeout_s": self.timeout_s or None,
               "argv0": self.argv[0]}
        tmp = f"{self.report}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(rep, f)
            os.replace(tmp, self.report)
        except OSError as e:
            self.say(f"could not write the report {self.report}: {e}")

    def run(self) -> int:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, lambda signum, _f: self.signalled.append(signum))
        if os.getppid() != self.parent:
            self.reason = "parent-died"
            self.write_report()
            return 1
        try:
            self.child = subprocess.Popen(self.argv, preexec_fn=self._child_preexec)
        except OSError as e:
            self.say(f"cannot start {self.argv[0]!r}: {e}")
            self.reason = "not-started"
            self.status = 127 << 8
            self.write_report()
            return 127
        try:
            self.watch()
        except BaseException as e:  # noqa: BLE001 - whatever goes wrong here, the tree must not outlive us
            self.reason = self.reason or "stopped"
            self.say(f"keeper error {type(e).__name__}: {e}: ending the tree")
            self.end_tree(0.0)
        self.write_report()
        rc = os.waitstatus_to_exitcode(self.status) if self.status is not None else 1
        if rc < 0:  # die of the child's signal, so the caller's returncode reads the same
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            if -rc not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(-rc, signal.SIG_DFL)
            os.kill(os.getpid(), -rc)
            time.sleep(1)
        return rc if rc >= 0 else 128 - rc

    def watch(self) -> None:
        next_sample = 0.0
        while True:
            self.reap()
            now = time.monotonic()
            if self.status is not None:
                self.reason = "exited"
                break
            if self.signalled:
                self.reason = "stopped"
                break
            if os.getppid() != self.parent:
                self.reason = "parent-died"
                self.say(f"the process that started this one ({self.parent}) is gone: ending the tree")
                break
            if self.timeout_s and now - self.t0 > self.timeout_s:
                self.reason = "timeout"
                self.say(f"time limit of {self.timeout_s:g} s reached: ending the tree")
                break
            if now >= next_sample:
                rss = self.sample()
                next_sample = now + (0.25 if self.memory_mb else 1.0)
                if self.memory_mb and rss > self.memory_mb * 2**20:
                    self.reason = "memory"
                    self.say(f"memory cap of {self.memory_mb:g} MiB exceeded ({rss / 2**20:.0f} MiB resident in "
                             f"the tree): ending the tree")
                    self.end_tree(0.0)
                    break
            time.sleep(0.1)
        if self.reason == "exited":
            self.end_tree(min(self.grace_s, 2.0))     # leftovers: processes that outlived the child
        elif self.reason == "parent-died":
            self.end_tree(min(self.grace_s, 3.0))
        elif self.reason != "memory":
            self.end_tree(self.grace_s)


def _main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="procs.py", description="keep one process tree (see helpers.core.procs)")
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=0.0)
    ap.add_argument("--memory-mb", type=float, default=0.0)
    ap.add_argument("--report", default="")
    ap.add_argument("--grace", type=float, default=5.0)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command after --")
    return _Keeper(cmd, a.parent, a.timeout, a.memory_mb, a.report, a.grace).run()


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
