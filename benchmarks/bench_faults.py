"""Fault figures of the runbook: what a full disk, a second process, kill -9, SIGTERM and Ctrl-C (SIGINT) do to
a run's rows, and what they leave running.

    python benchmarks/bench_faults.py [--points 12]

Each case runs a throw-away book (tests/minibook.py) whose one chapter plans `--points` points, each appended at
once to a JSON-lines file (helpers.core.results.append_row), skipping those already there, and fails if a planned
point has no row at the end. The fault is made for real: a 2 MiB tmpfs as --runs-dir filled to the last byte
after the second point (then freed; needs root), a second runbook process on the same run, or the signal sent to
the runbook (SIGINT to its process group, as a terminal's Ctrl-C). Then the run is continued with --resume.

Printed per case (measured on this machine, not asserted): rows planned, finished (distinct points with a whole
row), lost (planned - finished), repeated (rows beyond one per point), processes the run started that are alive
5 s after the faulted process ended, the final manifest status, and what the faulted or refused process said.
Goal: 0 lost, 0 repeated, 0 left in every case.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from helpers import repo_root
from helpers.core import results


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, repo_root() / "tests" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BODY = """
import os, time
from helpers.core import results
rows = out / "points.jsonl"
PLANNED = {points}
done = {{r["i"] for r in results.read_rows(rows)}}
for i in range(PLANNED):
    if i in done:
        continue
    time.sleep(0.3)
    results.append_row(rows, {{"i": i, "pid": os.getpid(), "pad": "x" * 3000}})
missing = sorted(set(range(PLANNED)) - {{r["i"] for r in results.read_rows(rows)}})
assert not missing, f"planned points without a row: {{missing}}"
glue('answer', float(PLANNED), display=False)
"""


class Case:
    def __init__(self, book: Path, runs: Path, points: int):
        self.book, self.runs, self.points, self.tag = book, runs, points, uuid.uuid4().hex
        self.rows = runs / "r" / "results" / "01_points" / "points.jsonl"

    def env(self):
        return {**os.environ, "BOOK_ROOT": str(self.book), "BOOK_TEST_TAG": self.tag}

    def start(self, *args, session=False):
        return subprocess.Popen([sys.executable, "-m", "helpers.book.runbook", *args, "--runs-dir", str(self.runs),
                                 "--no-build"], cwd=self.book, env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=session)

    def wait_rows(self, n, within_s=180):
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if len(results.read_rows(self.rows)) >= n:
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.rows} never had {n} rows")

    def left_after(self, seconds=5.0) -> int:
        time.sleep(seconds)
        return len(_load("proctags").tagged(self.tag))

    def resume(self):
        return subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--resume", "r", "--runs-dir",
                               str(self.runs), "--no-build"], cwd=self.book, env=self.env(), capture_output=True,
                              text=True, timeout=600)

    def figures(self, name, left, said):
        import contextlib
        import io

        with contextlib.redirect_stderr(io.StringIO()):   # a torn line is reported there; counted below
            rows = results.read_rows(self.rows)
        got = [r["i"] for r in rows]
        m = json.loads((self.runs / "r" / "manifest.json").read_text())
        finished = len(set(got))
        return {"case": name, "planned": self.points, "finished": finished, "lost": self.points - finished,
                "repeated": len(got) - finished, "left_after_5s": left, "status": m["status"],
                "said": " ".join(said.split())[:150]}


def _last_line(text: str) -> str:
    lines = [x for x in text.splitlines() if x.strip()]
    return lines[-1] if lines else ""


def full_disk(case: Case, faultfs) -> dict:
    p = case.start("--target", "quick", "--run-id", "r")
    case.wait_rows(2)
    filler = faultfs.fill(case.runs)
    out, err = p.communicate(timeout=300)
    said = _last_line(err)
    left = case.left_after()
    filler.unlink()
    r = case.resume()
    return case.figures("full disk, freed, --resume", left + len(_load("proctags").tagged(case.tag)), said
                        or _last_line(r.stderr))


def lock(case: Case) -> dict:
    p = case.start("--target", "quick", "--run-id", "r")
    case.wait_rows(2)
    t0 = time.monotonic()
    second = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--resume", "r", "--runs-dir",
                             str(case.runs), "--no-build"], cwd=case.book, env=case.env(), capture_output=True,
                            text=True, timeout=600)
    took = time.monotonic() - t0
    p.communicate(timeout=600)
    left = case.left_after()
    said = f"second process: exit {second.returncode} after {took:.1f} s: {_last_line(second.stderr)}"
    return case.figures("second process on a running run", left, said)


def signalled(case: Case, name: str, sig: int, group: bool) -> dict:
    p = case.start("--target", "quick", "--run-id", "r", session=group)
    case.wait_rows(3)
    if group:
        os.killpg(p.pid, sig)
    else:
        p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    said = f"exit {p.returncode}: {_last_line(err)}"
    left = case.left_after()
    r = case.resume()
    if r.returncode != 0:
        said += f" | resume exit {r.returncode}: {_last_line(r.stderr)}"
    return case.figures(f"{name}, then --resume", left, said)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=12, help="points the chapter plans (default 12)")
    args = ap.parse_args(argv)
    minibook, faultfs = _load("minibook"), _load("faultfs")
    body = BODY.format(points=args.points)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        def case(name):
            book = minibook.book(tmp / name / "book", {"01_points": (body, "Points")})
            return book

        try:
            cm = faultfs.small_tmpfs(tmp, 2048)
            mnt = cm.__enter__()
        except BaseException as e:  # noqa: BLE001 - pytest.skip where no tmpfs can be mounted
            mnt = None
            print(f"full disk: skipped ({e})")
        if mnt is not None:
            try:
                out.append(full_disk(Case(case("disk"), mnt, args.points), faultfs))
            finally:
                cm.__exit__(None, None, None)
        out.append(lock(Case(case("lock"), tmp / "lock-runs", args.points)))
        out.append(signalled(Case(case("kill"), tmp / "kill-runs", args.points), "kill -9", signal.SIGKILL, False))
        out.append(signalled(Case(case("term"), tmp / "term-runs", args.points), "SIGTERM", signal.SIGTERM, False))
        out.append(signalled(Case(case("int"), tmp / "int-runs", args.points), "SIGINT (Ctrl-C, process group)",
                             signal.SIGINT, True))
    cols = ["case", "planned", "finished", "lost", "repeated", "left_after_5s", "status"]
    print(f"{'case':<46}" + "".join(f"{c:>15}" for c in cols[1:]))
    for r in out:
        print(f"{r['case']:<46}" + "".join(f"{r[c]!s:>15}" for c in cols[1:]))
    for r in out:
        print(f"  {r['case']}: {r['said']}")
    print("goal: 0 lost, 0 repeated, 0 left in every case (measured on this machine, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
