"""A run's result tables: each chapter saves what it measured under <run>/results/<chapter>/.

Tables are written atomically (temporary file, then rename) so an interrupted chapter never leaves a
half-written file; `append_row` adds one finished point at a time so a sweep can resume.

A row appended to a JSON-lines file is whole or absent: it is written in one call ending in a newline,
then flushed to disk (fsync); a write cut short (a full disk, a size limit) is taken back before the
error is raised, and a torn last line left by a process killed in the middle of a write is reported and
dropped, by `read_rows` from what counts as done and by `append_row` before the next row, so a new row is
never merged into it. A write that fails raises `WriteError`, naming the file and the cause.
"""
from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

# pandas is imported where a table is read (load_table), not here: a torchrun worker appends its points through
# append_row and reads no table, and pandas' import was about 0.5 s of CPU in each sweep's rank 0.


class WriteError(OSError):
    """A result file could not be written; the message names the file, the cause and what to do."""

    def __str__(self) -> str:
        return str(self.strerror)


_CAUSES = {
    errno.ENOSPC: ("the disk is full", "free space on that disk"),
    errno.EDQUOT: ("the disk quota is used up", "free space within the quota"),
    errno.EFBIG: ("the file is larger than this process may write (a file size limit)",
                  "raise the limit (ulimit -f) or write elsewhere"),
    errno.EACCES: ("permission denied", "make the folder writable by this user, or write elsewhere (--runs-dir)"),
    errno.EPERM: ("the operation is not permitted", "make the folder writable by this user, or write elsewhere"),
    errno.EROFS: ("the file system is read-only", "write elsewhere (--runs-dir) or remount it read-write"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "remove that file or write elsewhere"),
    errno.EISDIR: ("the path is a folder", "remove that folder or write elsewhere"),
    errno.EIO: ("an input/output error (the disk)", "check the disk"),
    errno.ELOOP: ("the path is a symbolic link, which a run's files never are (writing through it would change "
                  "the file it points to)", "remove the link (rm it; the file it points to is left as it is) or "
                  "use a run folder without links"),
}


def cause(exc: OSError) -> tuple[str, str]:
    """(what went wrong, what to do) for an OSError, in words; the advice matches the cause."""
    said = _CAUSES.get(getattr(exc, "errno", None))
    if said:
        return said
    return (f"{exc.strerror or exc}" if isinstance(exc, OSError) else str(exc), "see the error and try again")


def write_error(path: Path | str, exc: OSError, doing: str = "could not be written") -> WriteError:
    """A WriteError naming `path`, the cause of `exc` and the fix matching it."""
    why, fix = cause(exc)
    return WriteError(getattr(exc, "errno", None) or errno.EIO,
                      f"{why}: {path} {doing} ({type(exc).__name__}: {exc.strerror or exc}); {fix}")


def refuse_link(path: Path | str, doing: str = "could not be written") -> None:
    """Raise WriteError (ELOOP) naming `path` if it is a symbolic link: a run's files are never links, and
    writing, appending or truncating through one would change the file it points to (any file the user can
    write), not the run's."""
    if os.path.islink(path):
        raise write_error(path, OSError(errno.ELOOP, f"a symbolic link to {os.readlink(path)}"), doing)


def open_nofollow(path: Path | str, flags: int, doing: str = "could not be opened", mode: int = 0o644) -> int:
    """os.open(path, flags | O_NOFOLLOW): a symbolic link at `path` is refused (WriteError naming it) and
    its target left untouched."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as e:
        if e.errno == errno.ELOOP and os.path.islink(path):
            refuse_link(path, doing)
        raise write_error(path, e, doing) from None


def append_text(path: Path | str):
    """`open(path, "a")` that refuses a symbolic link at `path` (a run's logs)."""
    return os.fdopen(open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, "could not be opened to append"), "a")


def links_in(folder: Path | str, limit: int = 5) -> list[Path]:
    """Up to `limit` symbolic links inside `folder` (its own tree, links not followed)."""
    found: list[Path] = []
    for top, dirs, files in os.walk(folder):
        for name in sorted(dirs + files):
            if os.path.islink(os.path.join(top, name)):
                found.append(Path(top) / name)
                if len(found) >= limit:
                    return found
    return found


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        refuse_link(path)
        fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except WriteError:
        raise
    except OSError as e:
        raise write_error(path, e) from None
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass


def save_table(folder: Path, name: str, df: pd.DataFrame) -> None:
    """Write `df` as <folder>/<name>.csv atomically. (Returns nothing, so that a chapter cell
    ending with it shows nothing.)"""
    path = Path(folder) / f"{name}.csv"
    _atomic_write(path, df.to_csv(index=False))


def load_table(folder: Path, name: str) -> pd.DataFrame:
    path = Path(folder) / f"{name}.csv"
    if not path.exists():
        raise FileNotFoundError(f"result table {path} does not exist; run the chapter that writes it first")
    import pandas as pd

    return pd.read_csv(path)


def save_json(folder: Path, name: str, obj) -> None:
    path = Path(folder) / f"{name}.json"
    _atomic_write(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


def load_json(folder: Path, name: str):
    path = Path(folder) / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"result file {path} does not exist; run the chapter that writes it first")
    return json.loads(path.read_text())


_REPORTED: set[tuple[str, int, int]] = set()


def _report(path: Path, what: str, offset: int, nbytes: int) -> None:
    """Say once per process (on stderr, the chapter's log) that a torn or unreadable line was dropped."""
    key = (str(path), offset, nbytes)
    if key in _REPORTED:
        return
    _REPORTED.add(key)
    print(f"warning: {path}: dropped {what} ({nbytes} bytes at byte {offset}): a write cut short by a full "
          f"disk or a crash; its point does not count as done and is measured again", file=sys.stderr, flush=True)


def _torn_tail(fd: int, size: int) -> int:
    """Where the last whole line of the open file ends (`size` when it ends in a newline)."""
    if size == 0:
        return 0
    pos, chunk = size, 4096
    while pos > 0:
        start = max(0, pos - chunk)
        data = os.pread(fd, pos - start, start)
        if pos == size and data.endswith(b"\n"):
            return size
        i = data.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def append_row(path: Path, row: dict) -> None:
    """Append one finished point to a JSON-lines file (one object a line), whole or not at all: one write
    ending in a newline, flushed to disk at once. A torn last line already there (a crash mid-write) is
    reported and cut off first, so the new row is never merged into it; a write cut short is taken back
    and raised as WriteError naming the file and the cause."""
    path = Path(path)
    line = (json.dumps(row, default=str) + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(path, e, "could not be opened to append a row") from None
    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, "could not be opened to append a row")
    size = None
    try:
        size = os.fstat(fd).st_size
        keep = _torn_tail(fd, size)
        if keep != size:
            _report(path, "a torn last line", keep, size - keep)
            os.ftruncate(fd, keep)
            size = keep
        n = os.write(fd, line)
        if n != len(line):
            raise OSError(errno.ENOSPC, f"only {n} of the row's {len(line)} bytes could be written")
        os.fsync(fd)
    except OSError as e:
        if size is not None:
            try:   # take the partial row back: the file holds whole rows only
                os.ftruncate(fd, size)
            except OSError:
                pass
        raise write_error(path, e, "could not take a row") from None
    finally:
        os.close(fd)


def read_rows(path: Path) -> list[dict]:
    """Rows of a JSON-lines file. A torn last line (no newline: a write cut short) and a line that is not a
    JSON object are reported on stderr and dropped, so their points do not count as done."""
    path = Path(path)
    refuse_link(path, "could not be read (its rows would be another file's)")
    if not path.exists():
        return []
    data = path.read_bytes()
    rows, offset = [], 0
    lines = data.split(b"\n")
    for i, raw in enumerate(lines):
        last = i == len(lines) - 1
        if last and not raw:
            break
        if last:
            _report(path, "a torn last line", offset, len(raw))
            break
        try:
            row = json.loads(raw)
            if not isinstance(row, dict):
                raise ValueError("not an object")
            rows.append(row)
        except ValueError:
            if raw.strip():
                _report(path, f"line {i + 1}, which is not a JSON object", offset, len(raw))
        offset += len(raw) + 1
    return rows


PARTIAL = "partial"
#: the environment variable through which the runbook tells a chapter's kernel its cell time limit (s)
CELL_TIMEOUT_ENV = "BOOK_CELL_TIMEOUT_S"


def mark_partial(folder: Path, why: str) -> None:
    """Record in <folder>/partial.json that the chapter writing there stopped short of its plan on purpose
    (a sweep stopped before the cell's time limit), and why; the runbook reports the chapter as partial."""
    path = Path(folder) / f"{PARTIAL}.json"
    refuse_link(path)
    said = json.loads(path.read_text()) if path.exists() else []
    _atomic_write(path, json.dumps([*said, why], indent=1))


def partial_reasons(folder: Path) -> list[str]:
    """Why the chapter writing into `folder` stopped short of its plan (empty: it did not)."""
    path = Path(folder) / f"{PARTIAL}.json"
    try:
        said = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [str(x) for x in said] if isinstance(said, list) else [str(said)]
