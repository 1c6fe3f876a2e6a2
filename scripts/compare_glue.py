#!/usr/bin/env python3
"""Are two versions of the book's code saying the same thing? Compare the values glued by executed chapters.

A restructuring of the package must leave every glued value (the numbers and sentences the pages cite) as it
was. This script executes chapters with one checkout's code and compares glued values between two sets of
executed notebooks:

    # execute chapters of a checkout (its notebooks, its src/) against a copy of a committed run, with the
    # parameters that run's manifest recorded for each chapter (chapters that only read: 05, 07_diagnosis, 90)
    scripts/compare_glue.py replay --checkout /tmp/before --run runs/h200-20261202f --out /tmp/b-a \\
        --chapters 05_expert_parallelism 07_diagnosis 90_provenance
    scripts/compare_glue.py replay --checkout .          --run runs/h200-20261202f --out /tmp/a-a ...

    # compare: every key of either side, value by value; with --varying, a second execution of the first
    # side's code on the same machine, keys whose values differ between the two first-side executions are
    # live measurements (they vary run to run) and may differ; every other difference is an error
    scripts/compare_glue.py compare /tmp/b-a /tmp/a-a
    scripts/compare_glue.py compare runs/base-auto/notebooks runs/new-auto/notebooks --varying runs/base-auto2/notebooks

Exit status 0 when nothing differs that may not, 1 otherwise; each difference is printed with its chapter,
key and both values. Figures compare as "<image>" (present on both sides), not pixel by pixel.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers.core.glue import read_glued


def _notebooks(folder: Path) -> dict[str, Path]:
    nbs = {p.stem: p for p in sorted(folder.glob("*.ipynb"))}
    if not nbs:
        sys.exit(f"{folder}: no executed notebooks (*.ipynb) there; give a run's notebooks/ folder")
    return nbs


def _short(text: str, limit: int = 160) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def compare(a: Path, b: Path, varying: Path | None) -> int:
    """Print the differences between the glued values of two folders of executed notebooks; return 1 when
    a difference is not explained by a live measurement."""
    na, nb_ = _notebooks(a), _notebooks(b)
    nc = _notebooks(varying) if varying else {}
    errors = allowed = same = 0
    for stem in sorted(set(na) | set(nb_)):
        if stem not in na or stem not in nb_:
            print(f"{stem}: executed on one side only ({a if stem in na else b})")
            errors += 1
            continue
        ga, gb = read_glued(na[stem]), read_glued(nb_[stem])
        gc = read_glued(nc[stem]) if stem in nc else {}
        only_a, only_b = sorted(set(ga) - set(gb)), sorted(set(gb) - set(ga))
        live = {k for k in ga if k in gc and gc[k] != ga[k]}
        diff = [k for k in sorted(set(ga) & set(gb)) if ga[k] != gb[k]]
        bad = [k for k in diff if k not in live]
        for k in only_a:
            print(f"{stem}: key '{k}' glued before, not after")
        for k in only_b:
            print(f"{stem}: key '{k}' glued after, not before")
        for k in bad:
            print(f"{stem}: '{k}' differs\n    before: {_short(ga[k])}\n    after:  {_short(gb[k])}")
        n_same = len(set(ga) & set(gb)) - len(diff)
        print(f"{stem}: {len(ga)} keys before, {len(gb)} after; {n_same} identical, "
              f"{len(diff) - len(bad)} differ as live measurements (they differ between two executions of the "
              f"code before), {len(bad) + len(only_a) + len(only_b)} other differences")
        errors += len(bad) + len(only_a) + len(only_b)
        allowed += len(diff) - len(bad)
        same += n_same
    print(f"total: {same} identical, {allowed} live measurements that vary, {errors} differences")
    return 1 if errors else 0


def replay(checkout: Path, run: Path, out: Path, chapters: list[str], timeout_s: int) -> int:
    """Execute `chapters` of `checkout` against a temporary copy of `run`, each with the parameters the run's
    manifest recorded for it (run_dir pointed at the copy); executed notebooks go to `out`."""
    manifest = json.loads((run / "manifest.json").read_text())
    recorded = {c["stem"]: c for c in manifest.get("chapters", [])}
    missing = [c for c in chapters if c not in recorded]
    if missing:
        sys.exit(f"{run}/manifest.json has no chapter(s) {missing}; it has {sorted(recorded)}")
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(checkout / "src"), "BOOK_ROOT": str(checkout)}
    failed = 0
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        copy = Path(tmp) / run.name
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("notebooks", "logs"))
        for stem in chapters:
            params = {**recorded[stem]["parameters"], "run_dir": str(copy)}
            cmd = [sys.executable, "-m", "papermill", str(checkout / "notebooks" / f"{stem}.ipynb"),
                   str(out / f"{stem}.ipynb"), "--cwd", str(checkout / "notebooks"), "--no-progress-bar",
                   "-k", "python3", "--execution-timeout", str(timeout_s)]
            for k, v in params.items():
                cmd += ["-y", json.dumps({k: v})]
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s + 60)
            status = "ok" if r.returncode == 0 else f"failed (exit {r.returncode}): {_short(r.stderr[-600:], 600)}"
            print(f"{run.name} {stem} with {checkout}: {status}")
            failed += r.returncode != 0
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare", help="compare the glued values of two folders of executed notebooks")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--varying", type=Path, help="a second execution of the 'before' code: keys that differ "
                                                "between it and 'before' are live measurements")
    r = sub.add_parser("replay", help="execute a checkout's chapters against a copy of a committed run")
    r.add_argument("--checkout", type=Path, required=True)
    r.add_argument("--run", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--chapters", nargs="+", required=True)
    r.add_argument("--timeout-s", type=int, default=600)
    a = ap.parse_args(argv)
    if a.cmd == "compare":
        return compare(a.before, a.after, a.varying)
    return replay(a.checkout.resolve(), a.run.resolve(), a.out, a.chapters, a.timeout_s)


if __name__ == "__main__":
    sys.exit(main())
