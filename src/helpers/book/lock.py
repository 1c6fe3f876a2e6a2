"""One runbook process per run folder: the run's lock (`<run>/.runbook.lock`), see RunLock."""
from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

from helpers.book.manifest import utc_now
from helpers.book.targets import RunbookError

LOCK_NAME = ".runbook.lock"


class RunLock:
    """One runbook process per run folder: `<run>/.runbook.lock` holds the owner's pid, host, start time and
    command line, under an exclusive flock that the kernel releases when the owner dies however it dies
    (kill -9 included). A second process is refused at once, naming the owner; a lock file whose owner is
    gone (its flock free) is stale and is taken over, with a message. Released (removed) at exit."""

    def __init__(self, run_dir: Path, echo=None):
        self.path = Path(run_dir) / LOCK_NAME
        self.fd: int | None = None
        self.echo = echo or (lambda m: print(m, file=sys.stderr))
        self.took_over: dict | None = None

    @staticmethod
    def _read(fd: int) -> dict:
        try:
            data = os.pread(fd, 65536, 0)
            owner = json.loads(data) if data.strip() else {}
            return owner if isinstance(owner, dict) else {}
        except (OSError, ValueError):
            return {}

    def acquire(self) -> "RunLock":
        import fcntl

        from helpers.core import results

        for _ in range(20):   # the file can be removed by its releasing owner between open and flock: retry
            try:   # never through a link: O_CREAT and the truncation below would write into its target
                fd = results.open_nofollow(self.path, os.O_RDWR | os.O_CREAT, "(the run's lock) could not be made")
            except OSError as e:
                raise RunbookError(str(e)) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = self._read(fd)
                os.close(fd)
                run = self.path.parent
                raise RunbookError(
                    f"run {run} is in use by another runbook process: pid {owner.get('pid', '?')} on host "
                    f"{owner.get('host', '?')}, since {owner.get('started', '?')} ({owner.get('command', '?')}). "
                    f"Two processes in one run would measure every point twice, each under the other's load. "
                    f"Wait for it to finish, or stop it (kill {owner.get('pid', 'PID')}) and continue with "
                    f"--resume {run}") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            old = self._read(fd)
            if old:
                self.took_over = old
                self.echo(f"note: took over the stale lock of run {self.path.parent.name}: its owner, pid "
                          f"{old.get('pid', '?')} on host {old.get('host', '?')} (since {old.get('started', '?')}), "
                          f"is no longer running")
            me = {"pid": os.getpid(), "host": socket.gethostname(), "started": utc_now(),
                  "command": " ".join(["python -m helpers.book.runbook", *sys.argv[1:]])[:300]}
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(me).encode() + b"\n", 0)
                os.fsync(fd)
            except OSError as e:
                os.close(fd)
                raise RunbookError(str(results.write_error(self.path, e, "(the run's lock) could not be written"))) from None
            self.fd = fd
            links = results.links_in(self.path.parent)
            if links:
                self.release()
                shown = "; ".join(f"{p} -> {os.readlink(p)}" for p in links)
                raise RunbookError(
                    f"run {self.path.parent} holds symbolic links where the runbook writes: {shown}. A run's files "
                    f"are never links (writing, appending or truncating through one changes the file it points "
                    f"to); remove them (rm PATH: the files they point to stay as they are) and try again")
            return self
        raise RunbookError(f"{self.path}: could not take the run's lock (the file kept changing); try again")

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False
