"""Load a shared library that torch already loaded (libcudart, libnccl) through ctypes, by its path in
/proc/self/maps, so that ctypes calls reach the very library torch uses; fall back to names on the
library path."""
from __future__ import annotations

import ctypes


def load(fragment: str, fallbacks: list[str]):
    """The CDLL whose mapped path contains `fragment`, else the first of `fallbacks` that loads, else None."""
    try:
        with open("/proc/self/maps") as f:
            found = sorted({ln.split()[-1] for ln in f if fragment in ln and ln.split()[-1].startswith("/")})
    except OSError:
        found = []
    for name in found + list(fallbacks):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None
