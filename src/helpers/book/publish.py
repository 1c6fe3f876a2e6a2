"""Whether a committed run may be the published site (Makefile: SITE_RUN).

The published site must show the current book: a run made from a clean commit (its status page says so),
every chapter of _toc.yml executed and ok unless its target skips it on purpose, its GPU test tier (pytest -m
gpu) passed at the commit that measured it (helpers.book.gputier, which reads the tier's JUnit report again and
holds the record to it), and the chapter sources
(the notebooks and _toc.yml) unchanged since that commit, so that what the site shows is what the book's
code executes today. A run presented again by `runbook --replay` (its manifest's `replayed`) holds
notebooks of two commits: each chapter the replay executed must be unchanged since the replay's commit,
which must be clean, and each it kept as measured since the measuring commit; _toc.yml since the replay.
`problems` lists what fails; `make site` and a test refuse a run with any.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from helpers import repo_root
from helpers.book import gputier, runbook


def site_run(root: Path | None = None) -> str:
    """The published run, `runs/<run-id>`, as the Makefile's SITE_RUN names it (the one place it is written)."""
    root = root or repo_root()
    m = re.search(r"^SITE_RUN\s*[?:]?=\s*(runs/\S+)", (root / "Makefile").read_text(), re.M)
    if not m:
        raise runbook.RunbookError(f"{root / 'Makefile'}: no `SITE_RUN ?= runs/<run-id>` line")
    return m.group(1)


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)


def problems(run_dir: Path, root: Path | None = None, check_sources: bool = True) -> list[str]:
    """What keeps `run_dir` from being the published site; empty where nothing does."""
    root = root or repo_root()
    run_dir = Path(run_dir)
    m = runbook.Manifest.load(run_dir)
    out = []
    said, clean = runbook.commit_provenance(m)
    if not clean:
        out.append(f"{run_dir.name}: its status page says it was {said}; make the run from a clean commit "
                   f"(scripts/device-run.sh does, from a clean copy)")
    try:
        skip = set(runbook.load_target(m.target, root).skip)
    except runbook.RunbookError:
        skip = set()
    recs = {c["stem"]: c for c in m.chapters}
    for doc in runbook.chapters(root):
        s = runbook.stem(doc)
        if s in skip:
            continue
        rec = recs.get(s)
        if rec is None:
            out.append(f"{run_dir.name}: chapter {s} is in _toc.yml but not in the run (target {m.target} "
                       f"runs it); the site would show it as skipped")
        elif rec.get("status") != "ok":
            out.append(f"{run_dir.name}: chapter {s} is {rec.get('status')} in the run (target {m.target} "
                       f"runs it)")
    out += gputier.problems(m, run_dir)
    rep = m.replayed
    if rep and not rep.get("clean"):
        out.append(f"{run_dir.name}: it was presented again (runbook --replay) from a modified tree at "
                   f"{rep.get('book_commit')}; replay it from a clean commit")
    elif clean and check_sources:
        out += _stale(run_dir.name, root, _sources_by_commit(m, recs))
    return out


def _sources_by_commit(m: runbook.Manifest, recs: dict) -> dict[str, list[str]]:
    """commit -> the chapter sources the notebooks executed at that commit must still match: each chapter's
    notebook under the commit that executed it (a replay's, for the chapters it executed), _toc.yml under
    the last presentation's."""
    measured = str(m.versions["book_commit"])
    rep = m.replayed
    executed = set(rep.get("chapters", ())) - set(rep.get("kept", {})) if rep else set()
    by: dict[str, list[str]] = {}
    for s in recs:
        by.setdefault(str(rep["book_commit"]) if s in executed else measured, []).append(f"notebooks/{s}.ipynb")
    by.setdefault(str(rep["book_commit"]) if rep else measured, []).append("_toc.yml")
    return by


def _stale(name: str, root: Path, by: dict[str, list[str]]) -> list[str]:
    out = []
    for commit, paths in by.items():
        known = _git(root, "cat-file", "-e", f"{commit}^{{commit}}")
        if known.returncode != 0:
            out.append(f"{name}: its commit {commit} is not in this repository's history (a shallow "
                       f"clone?): cannot tell whether its chapters are today's")
            continue
        diff = _git(root, "diff", "--name-only", commit, "HEAD", "--", *paths)
        changed = [x for x in diff.stdout.split() if x]
        if changed:
            out.append(f"{name}: the chapter sources changed since its commit {commit} "
                       f"({', '.join(changed[:4])}{' ...' if len(changed) > 4 else ''}); the site would show "
                       f"stale chapters: make a new run from HEAD, or present the run again "
                       f"(python -m helpers.book.runbook --replay runs/{name}) where its chapters can")
    return out


def main(argv: list[str] | None = None) -> int:
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m helpers.book.publish runs/<run-id>", file=sys.stderr)
        return 2
    try:
        found = problems(Path(args[0]))
    except (runbook.RunbookError, OSError, ValueError) as e:   # a manifest that is not one, unreadable files: one line
        found = [str(e).splitlines()[0] if str(e) else type(e).__name__]
    for p in found:
        print(f"error: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
