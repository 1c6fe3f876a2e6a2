"""A run's GPU test tier: `pytest -m gpu` at the commit that measured the run, on the machine that measured it,
recorded in the run's manifest (`gpu_tier`) and on its status page; `helpers.book.publish` refuses a run whose
tier did not pass at its commit, or that has no record of it.

CI has no GPU: there every `gpu` test skips, so a GPU tier that fails on main cannot be seen there. A run made
on a GPU host runs the tier after its chapters (scripts/device-run.sh does; `make test-gpu` runs it alone):

    python -m helpers.book.gputier runs/<run-id> [--timeout 600]

A `gpu` test may skip only for a stated hardware reason: its reason starts with one of HARDWARE_SKIPS ("no
GPU", "one GPU", "no FP8", "no P2P"). tests/gpu_tier_plugin.py turns any other skip of a `gpu` test into a failure,
and `problems` refuses a record holding one.

Evidence, not a claim (issue 47: a report edited to hold a failure, a deleted report, a hand-made record naming one
made-up test, `ok: "false"` and `exit_code` -9 beside `ok: true` all published): `problems` reads the run's JUnit
report again and holds the record to it. The record must have its shape (`ok` a boolean that agrees with the exit
code and the tests, the lists of names as `record` writes them); the report must be there, a file (not a link),
and say what the record says: the same tests passed, failed and skipped, its own counts agreeing with its test
cases, its SHA-256 the one recorded (`report_sha256`) and its suite named for the record's commit
(`gpu-tier@<commit>`, which `run` asks pytest for). A record from before the hash (issue 47; the run published when it
came has one) is held to the report's tests and counts, and to its time: the report's timestamp must
fall inside the tier's run (`started` to `started` + `duration_s`). Each problem is one line. The tier's log and
report are never written through a symbolic link (the runbook's rule for a run's files).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from helpers.book import manifest as mf
from helpers.core.results import open_nofollow

#: how a `gpu` test's skip reason must start: the hardware is missing, nothing else
HARDWARE_SKIPS = ("no GPU", "one GPU", "no FP8", "no P2P")
#: where a run keeps the tier's JUnit report and its log
JUNIT = "gpu-tier.xml"
LOG = "logs/gpu-tier.log"
#: the JUnit suite's name: this, then the commit the tier ran at (pytest -o junit_suite_name=...)
SUITE = "gpu-tier@"
#: the failure `run` adds to a tier it stopped (not in the report)
TIER_STOPPED = "(the tier)"


class GpuTierError(RuntimeError):
    """The tier could not be run or recorded (named, with the fix)."""


def hardware_skip(reason: str) -> bool:
    """Whether a skip reason names missing hardware (HARDWARE_SKIPS), the only reason a `gpu` test may skip."""
    return str(reason).strip().startswith(HARDWARE_SKIPS)


def parse_junit(path: Path) -> dict:
    """{"passed": [names], "failed": [{"name", "message"}], "skipped": [{"name", "reason"}]} from a JUnit XML
    report (pytest --junitxml); an error in setup or teardown counts as failed."""
    return _parse(ET.fromstring(_read_report(Path(path))))


def _parse(root) -> dict:
    out: dict = {"passed": [], "failed": [], "skipped": []}
    for case in root.iter("testcase"):
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


def _read_report(path: Path) -> bytes:
    """The report's bytes, read without following a symbolic link (WriteError naming a link; OSError)."""
    with os.fdopen(open_nofollow(path, os.O_RDONLY, "(the GPU tier's report) could not be read"), "rb") as f:
        return f.read(64 << 20)


def _node_id(classname: str, name: str) -> str:
    """pytest's node id (tests/test_x.py::test_y) from a JUnit case's classname (tests.test_x) and name."""
    parts = classname.split(".")
    i = next((k for k, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
    return "/".join(parts[:i + 1]) + ".py::" + "::".join([*parts[i + 1:], name])


def record(results: dict, commit: str, exit_code: int, started: str, duration_s: float,
           command: str = "python -m pytest -m gpu", report: Path | None = None) -> dict:
    """The manifest's `gpu_tier` record: `ok` only where pytest exited 0, something ran, nothing failed and
    every skip names missing hardware; with `report` (the JUnit file the results were read from), its SHA-256."""
    off = [s for s in results["skipped"] if not hardware_skip(s["reason"])]
    ran = len(results["passed"]) + len(results["failed"])
    rec = {"commit": commit, "failed": results["failed"],
           "ok": exit_code == 0 and ran > 0 and not results["failed"] and not off,
           "passed": results["passed"], "skipped": results["skipped"], "exit_code": exit_code,
           "started": started, "duration_s": round(duration_s, 1), "command": command}
    if report is not None:
        rec["report_sha256"] = hashlib.sha256(_read_report(Path(report))).hexdigest()
    return rec


def tier_workers() -> int:
    """How many pytest processes the tier runs in: one per four cores, at most four, where pytest-xdist is
    importable (the tier's costliest tests are compilations, CPU work beside a GPU that mostly waits: 288 s in
    one process on the lent H200, 16 cores, at 044ddbc), else one."""
    import importlib.util

    if importlib.util.find_spec("xdist") is None:
        return 1
    return max(1, min(4, (os.cpu_count() or 1) // 4))


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
    _refuse_links(run_dir, junit, log)
    log.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)
    workers = tier_workers() if workers is None else workers
    spread = ["-n", str(workers), "--dist", "loadgroup"] if workers > 1 else []
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider", *spread,
           f"--junitxml={junit}", "-o", f"junit_suite_name={SUITE}{commit or measured}", *pytest_args]
    started, t0 = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), time.monotonic()
    with os.fdopen(open_nofollow(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as out:
        p = subprocess.Popen(cmd, cwd=root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            code = -9
    _refuse_links(run_dir, junit, log)   # made into a link while the tier ran: not read
    results_ = parse_junit(junit) if junit.exists() else {"passed": [], "failed": [], "skipped": []}
    if code == -9:
        results_["failed"].append({"name": TIER_STOPPED, "message": f"stopped after {timeout_s:.0f} s"})
    rec = record(results_, commit or measured, code, started, time.monotonic() - t0,
                 command=" ".join(["python -m pytest -m gpu", *spread]), report=junit if junit.exists() else None)
    m = mf.Manifest.load(run_dir)
    m.gpu_tier = rec
    m.save(run_dir)
    return rec


def _refuse_links(run_dir: Path, *paths: Path) -> None:
    """GpuTierError naming a symbolic link among the run's logs folder and `paths` (the runbook's rule: a run's files
    are never links; writing through one would change the file it points to)."""
    for p in (run_dir / "logs", *paths):
        if p.is_symlink():
            raise GpuTierError(f"{p} is a symbolic link (to {os.readlink(p)}), which a run's files never are: the tier "
                               f"would write its log or report through it into the file it points to. Remove the "
                               f"link (rm {p}; the file it points to is left as it is) and run the tier again")


def problems(m: mf.Manifest, run_dir: Path) -> list[str]:
    """What keeps a run's GPU tier record from letting it be published (empty where nothing does): the record's
    own verdict and shape, and its report read again (see the module docstring). One line each."""
    run_dir = Path(run_dir)
    name, rec = run_dir.name, m.gpu_tier
    measured = str((m.versions or {}).get("book_commit") or "")
    how = (f"run `python -m helpers.book.gputier runs/{name}` on the GPU host at commit {measured or 'the run’s'} "
           f"(scripts/device-run.sh runs it after the chapters)")
    if not rec:
        return [f"{name}: no record of the GPU test tier (pytest -m gpu) at the commit that measured it; {how}"]
    bad = _shape(rec)
    if bad:
        return [f"{name}: its GPU test tier record is malformed: {bad}; it was not written by the tier: {how}"]
    out = []
    if rec["failed"]:
        names = ", ".join(f["name"] for f in rec["failed"][:6]) + (" ..." if len(rec["failed"]) > 6 else "")
        out.append(f"{name}: the GPU test tier failed at {rec['commit']}: {names}")
    off = [s["name"] for s in rec["skipped"] if not hardware_skip(s["reason"])]
    if off:
        out.append(f"{name}: GPU tests skipped for a reason other than missing hardware: {', '.join(off[:6])}")
    if not (rec["passed"] or rec["failed"]):
        out.append(f"{name}: the GPU test tier ran no test at {rec['commit']}")
    elif not rec["ok"] and not out:
        out.append(f"{name}: the GPU test tier did not pass at {rec['commit']} (pytest exit {rec['exit_code']})")
    verdict = rec["exit_code"] == 0 and bool(rec["passed"] or rec["failed"]) and not rec["failed"] and not off
    if rec["ok"] and not verdict:
        out.append(f"{name}: its GPU test tier record says ok, but pytest exited {rec['exit_code']} with "
                   f"{len(rec['failed'])} failed: a record that disagrees with itself was not written by the tier; {how}")
    if measured and rec["commit"] != measured:
        out.append(f"{name}: the GPU test tier ran at {rec['commit']}, not at the commit that measured the run "
                   f"({measured}); {how}")
    return out + [f"{name}: {p}; {how}" for p in _evidence(rec, run_dir)]


#: the record's keys and what each must be (record writes them so); report_sha256 is checked where present
_SHAPE = {"commit": (str,), "ok": (bool,), "exit_code": (int,), "passed": (list,), "failed": (list,),
          "skipped": (list,), "started": (str,), "duration_s": (int, float)}


def _shape(rec) -> str | None:
    """What in a gpu_tier record departs from what `record` writes (None: nothing)."""
    if not isinstance(rec, dict):
        return f"a {type(rec).__name__}, not a mapping"
    for k, types in _SHAPE.items():
        v = rec.get(k)
        if not isinstance(v, types) or (bool not in types and isinstance(v, bool)):
            return f"`{k}` is {str(v)[:40]!r}, not a {' or '.join(t.__name__ for t in types)}"
    if not all(isinstance(x, str) for x in rec["passed"]):
        return "`passed` is not a list of test names"
    for k, fields in (("failed", ("name",)), ("skipped", ("name", "reason"))):
        if not all(isinstance(x, dict) and all(isinstance(x.get(f), str) for f in fields) for x in rec[k]):
            return f"`{k}` is not a list of {{{', '.join(fields)}}} entries"
    sha = rec.get("report_sha256")
    if sha is not None and not (isinstance(sha, str) and len(sha) == 64):
        return f"`report_sha256` is {str(sha)[:40]!r}, not a SHA-256"
    return None


def _evidence(rec: dict, run_dir: Path) -> list[str]:
    """What in the run's JUnit report disagrees with the record (see the module docstring)."""
    path = run_dir / JUNIT
    if path.is_symlink():
        return [f"its GPU tier report {JUNIT} is a symbolic link (to {os.readlink(path)}), not the tier's own file"]
    if not path.exists():
        return [f"its GPU tier report {JUNIT} is missing: the record cannot be checked against it"]
    try:
        data = _read_report(path)
        root = ET.fromstring(data)
    except (OSError, ET.ParseError) as e:
        return [f"its GPU tier report {JUNIT} cannot be read as a JUnit report ({type(e).__name__}: {e})"]
    sha = rec.get("report_sha256")
    if sha is not None and hashlib.sha256(data).hexdigest() != sha:
        return [f"its GPU tier report {JUNIT} is not the one recorded (its SHA-256 differs from report_sha256): "
                "it changed after the tier ran"]
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    got = _parse(root)
    out = []
    counts = _counts(suite)
    cases = (len(got["passed"]) + len(got["failed"]) + len(got["skipped"]), len(got["failed"]), len(got["skipped"]))
    if counts != cases:
        out.append(f"its GPU tier report's counts (tests, failures + errors, skipped: {counts}) disagree with its "
                   f"test cases ({cases})")
    said = {"passed": set(rec["passed"]), "skipped": {x["name"] for x in rec["skipped"]},
            "failed": {x["name"] for x in rec["failed"]} - ({TIER_STOPPED} if rec["exit_code"] == -9 else set())}
    for k in ("passed", "failed", "skipped"):
        seen = {x if isinstance(x, str) else x["name"] for x in got[k]}
        if seen != said[k]:
            diff = sorted(said[k] ^ seen)
            out.append(f"the record and its report disagree on the tests {k}: {', '.join(diff[:3])}"
                       f"{' ...' if len(diff) > 3 else ''} (in one and not the other)")
    out += _report_time_and_commit(rec, suite)
    return out


def _counts(suite) -> tuple | None:
    try:
        return (int(suite.get("tests")), int(suite.get("failures")) + int(suite.get("errors")),
                int(suite.get("skipped")))
    except (AttributeError, TypeError, ValueError):
        return None


def _report_time_and_commit(rec: dict, suite) -> list[str]:
    """The report's commit (its suite's name) against the record's; for a record from before report_sha256, the
    report's timestamp against the tier's run instead."""
    named = str(suite.get("name", "")) if suite is not None else ""
    if named.startswith(SUITE):
        at = named[len(SUITE):]
        return [] if at == rec["commit"] else [f"its GPU tier report was made at commit {at}, the record says "
                                               f"{rec['commit']}"]
    if "report_sha256" in rec:
        return [f"its GPU tier report does not name its commit (suite {named[:40]!r}, not {SUITE}<commit>)"]
    try:   # an older record: the report must come from the tier's own run
        ts = dt.datetime.fromisoformat(suite.get("timestamp"))
        start = dt.datetime.fromisoformat(rec["started"])
        ok = start - dt.timedelta(seconds=5) <= ts <= start + dt.timedelta(seconds=rec["duration_s"] + 5)
    except (AttributeError, TypeError, ValueError):
        return [f"its GPU tier report has no timestamp to set against the record's start ({rec['started']})"]
    return [] if ok else [f"its GPU tier report was made at {ts.isoformat()}, outside the tier's run recorded from "
                          f"{rec['started']} for {rec['duration_s']} s"]


def summary(m: mf.Manifest) -> str:
    """One line for the status page: what the GPU tier found, or that the run has no record of it."""
    rec = m.gpu_tier
    if rec and _shape(rec):
        return f"**malformed record** ({_shape(rec)}): not written by the tier"
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
    except (GpuTierError, mf.RunbookError, OSError) as e:   # OSError: a link met while reading, a write that failed
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"GPU test tier at {rec['commit']}: {len(rec['passed'])} passed, {len(rec['failed'])} failed, "
          f"{len(rec['skipped'])} skipped ({rec['duration_s']} s); recorded in {args.run_dir}/manifest.json")
    for f in rec["failed"]:
        print(f"  failed: {f['name']}: {f['message']}")
    return 0 if rec["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
