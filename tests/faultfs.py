"""A small real file system for the fault tests: a tmpfs of a few pages (needs root), and a way to fill it."""
import contextlib
import os
import subprocess
import uuid
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(parent: Path, size_kib: int = 256):
    """A tmpfs of `size_kib` KiB mounted at a fresh folder under `parent`; skips the test where it cannot be
    mounted (not root, no mount)."""
    mnt = Path(parent) / f"tmpfs-{uuid.uuid4().hex[:8]}"
    mnt.mkdir(parents=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        mnt.rmdir()
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.strip() or r.returncode}); needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        try:
            mnt.rmdir()
        except OSError:
            pass


def fill(mnt: Path) -> Path:
    """Fill the file system at `mnt` to the last byte with a file `filler`; returns its path."""
    path = Path(mnt) / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (65536, 4096, 512, 64, 1):
            while True:
                try:
                    if os.write(fd, b"\0" * chunk) < chunk:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)
    return path
