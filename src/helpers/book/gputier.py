"""A run's GPU test tier: `pytest -m gpu` at the commit that measured the run, on the machine that measured it,
recorded in the run's manifest (`gpu_tier`) and on its status page; `helpers.book.publish` refuses a run whose
tier did not pass at its commit, or that has no record of it.

CI has no GPU: there every `gpu` test skips, so a GPU tier that fails on main cannot be seen there. A run made
on a GPU host runs the tier after its chapters (scripts/device-run.sh does; `make test-gpu` runs it alone):

    python -m helpers.book.gputier runs/<run-id> [--timeout 600]

A `gpu` test may skip only for a stated hardware reason: its reason starts with one of HARDWARE_SKIPS ("no
GPU", "one GPU", "no FP8", "no P2P"). tests/gpu_tier_plugin.py turns any other skip of a `gpu` test into a failure,
and `problems` refuses a record holding one.
"""
from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from helpers.book import manifest as mf

#: how a `gpu` test's skip reason must start: the hardware is missing, nothing else
HARDWARE_SKIPS = ("no GPU", "one GPU", "no FP8", "no P2P")
#: where a run keeps the tier's JUnit report and its log
JUNIT = "gpu-tier.xml"
LOG = "logs/gpu-tier.log"


class GpuTierError(RuntimeError):
    """The tier could not be run or recorded (named, with the fix)."""


def hardware_skip(reason: str) -> bool:
    """Whether a skip reason names missing hardware (HARDWARE_SKIPS), the only reason a `gpu` test may skip."""
    return str(reason).strip().startswith(HARDWARE_SKIPS)


def parse_junit(path: Path) -> dict:
    """{"passed": [names], "failed": [{"name", "message"}], "skipped": [{"name", "reason"}]} from a JUnit XML
    report (pytest --junitxml); an error in setup or teardown counts as failed."""
    out: dict = {"passed": [], "failed": [], "skipped": []}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = _node_id(case.get("classname", ""), case.get("name", ""))
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        skip = case.find("skipped")
        if bad is not None:
            out["failed"].append({"name": name, "message": (bad.get("message") or "").splitlines()[0][:300]
                                  if bad.get("message") else bad.tag})
        elif skip is not None:
            out["skipped"].append({"name": name, "reason": (skip.get("message") or "").strip()[:300]})
        else:
            out["passed"].append(name)
    return out


def _node_id(classname: str, name: str) -> str:
    """pytest's node id (tests/test_x.py::test_y) from a JUnit case's classname (tests.test_x) and name."""
    parts = classname.split(".")
    i = next((k for k, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
    return "/".join(parts[:i + 1]) + ".py::" + "::".join([*parts[i + 1:], name])


def record(results: dict, commit: str, exit_code: int, started: str, duration_s: float,
           command: str = "python -m pytest -m gpu") -> dict:
    """The manifest's `gpu_tier` record: `ok` only where pytest exited 0, something ran, nothing failed and
    every skip names missing hardware."""
    off = [s for s in results["skipped"] if not hardware_skip(s["reason"])]
    ran = len(results["passed"]) + len(results["failed"])
    return {"commit": commit, "failed": results["failed"],
            "ok": exit_code == 0 and ran > 0 and not results["failed"] and not off,
            "passed": results["passed"], "skipped": results["skipped"], "exit_code": exit_code,
            "started": started, "duration_s": round(duration_s, 1), "command": command}


def tier_workers() -> int:
    """How many pytest processes the tier runs in: two where pytest-xdist is importable (the tier's costliest
    tests are compilations in fresh processes, CPU work beside a GPU that mostly waits: 288 s in one process on
    the lent H200 at 044ddbc), else one."""
    import importlib.util

    return 2 if importlib.util.find_spec("xdist") is not None else 1


def run(run_dir: Path, root: Path, timeout_s: float = 600.0, pytest_args: tuple[str, ...] = (),
        workers: int | None = None) -> dict:
    """Run the GPU tier in `root` (the checkout the run was made from) in `workers` pytest processes (default:
    tier_workers()) and record it in `run_dir`'s manifest; returns the record. A tier still running after
    `timeout_s` is stopped (its process group killed) and recorded as failed."""
    run_dir = Path(run_dir)
    m = mf.Manifest.load(run_dir)
    commit = str(mf.versions(root).get("book_commit") or "")
    measured = str((m.versions or {}).get("book_commit") or "")
    if commit and measured and commit != measured:
        raise GpuTierError(f"{run_dir}: measured at {measured}, but this checkout is at {commit}: run the GPU "
                           f"tier from the commit that measured the run (git checkout {measured.split()[0]})")
    junit, log = run_dir / JUNIT, run_dir / LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)
    workers = tier_workers() if workers is None else workers
    spread = ["-n", str(workers), "--dist", "loadgroup"] if workers > 1 else []
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider", *spread,
           f"--junitxml={junit}", *pytest_args]
    started, t0 = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), time.monotonic()
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, cwd=root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            code = -9
    results = parse_junit(junit) if junit.exists() else {"passed": [], "failed": [], "skipped": []}
    if code == -9:
        results["failed"].append({"name": "(the tier)", "message": f"stopped after {timeout_s:.0f} s"})
    rec = record(results, commit or measured, code, started, time.monotonic() - t0,
                 command=" ".join(["python -m pytest -m gpu", *spread]))
    m = mf.Manifest.load(run_dir)
    m.gpu_tier = rec
    m.save(run_dir)
    return rec


def problems(m: mf.Manifest, name: str) -> list[str]:
    """What keeps a run's GPU tier record from letting it be published (empty where nothing does)."""
    rec = m.gpu_tier
    measured = str((m.versions or {}).get("book_commit") or "")
    how = (f"run `python -m helpers.book.gputier runs/{name}` on the GPU host at commit {measured or 'the run’s'} "
           f"(scripts/device-run.sh runs it after the chapters)")
    if not rec:
        return [f"{name}: no record of the GPU test tier (pytest -m gpu) at the commit that measured it; {how}"]
    out = []
    if rec.get("failed"):
        names = ", ".join(f["name"] for f in rec["failed"][:6]) + (" ..." if len(rec["failed"]) > 6 else "")
        out.append(f"{name}: the GPU test tier failed at {rec.get('commit')}: {names}")
    off = [s["name"] for s in rec.get("skipped", []) if not hardware_skip(s.get("reason", ""))]
    if off:
        out.append(f"{name}: GPU tests skipped for a reason other than missing hardware: {', '.join(off[:6])}")
    if not (rec.get("passed") or rec.get("failed")):
        out.append(f"{name}: the GPU test tier ran no test at {rec.get('commit')}")
    elif not rec.get("ok") and not out:
        out.append(f"{name}: the GPU test tier did not pass at {rec.get('commit')} (pytest exit {rec.get('exit_code')})")
    if measured and str(rec.get("commit")) != measured:
        out.append(f"{name}: the GPU test tier ran at {rec.get('commit')}, not at the commit that measured the run "
                   f"({measured}); {how}")
    return out


def summary(m: mf.Manifest) -> str:
    """One line for the status page: what the GPU tier found, or that the run has no record of it."""
    rec = m.gpu_tier
    if not rec:
        return "not recorded for this run (CI has no GPU; `python -m helpers.book.gputier` records it on a GPU host)"
    said = (f"{len(rec.get('passed', []))} passed, {len(rec.get('failed', []))} failed, "
            f"{len(rec.get('skipped', []))} skipped")
    skips = "; ".join(f"{s['name'].split('::')[-1]}: {s['reason']}" for s in rec.get("skipped", []))
    fails = ", ".join(f["name"].split("::")[-1] for f in rec.get("failed", []))
    return (f"**{'passed' if rec.get('ok') else 'failed'}** at `{rec.get('commit')}`: {said}"
            + (f" (failed: {fails})" if fails else "") + (f" (skipped: {skips})" if skips else ""))


def main(argv: list[str] | None = None) -> int:
    import argparse

    from helpers import repo_root

    ap = argparse.ArgumentParser(prog="python -m helpers.book.gputier", description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", help="runs/<run-id>: the run whose commit the tier runs at")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before the tier is stopped (600)")
    args = ap.parse_args(argv)
    try:
        rec = run(Path(args.run_dir), repo_root(), args.timeout)
    except (GpuTierError, mf.RunbookError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"GPU test tier at {rec['commit']}: {len(rec['passed'])} passed, {len(rec['failed'])} failed, "
          f"{len(rec['skipped'])} skipped ({rec['duration_s']} s); recorded in {args.run_dir}/manifest.json")
    for f in rec["failed"]:
        print(f"  failed: {f['name']}: {f['message']}")
    return 0 if rec["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
