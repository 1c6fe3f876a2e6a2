"""Processes a test started, found by the BOOK_TEST_TAG=<tag> it put into their environment: a process
that escaped into a session of its own is still found, since the environment is inherited."""
import os

from helpers.core import procs


def tagged(tag: str) -> dict[int, str]:
    """Live processes whose environment carries BOOK_TEST_TAG=tag: pid -> command line."""
    want = f"BOOK_TEST_TAG={tag}".encode()
    out = {}
    for n in os.listdir("/proc"):
        if not n.isdigit():
            continue
        try:
            env = open(f"/proc/{n}/environ", "rb").read().split(b"\0")
            cmd = open(f"/proc/{n}/cmdline", "rb").read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if want in env and procs.alive(int(n)):
            out[int(n)] = cmd
    return out


def tagged_pids(tag: str) -> list[int]:
    return sorted(tagged(tag))
