"""Continuing an interrupted run (`--resume RUN`) with the plan it was started with: finished chapters are
kept, the others run again into the same folder, where their sweeps resume from the points already
measured. The plan is read back from the run's manifest and checked again before anything runs.
"""
from __future__ import annotations

from pathlib import Path

from helpers.book.lock import RunLock
from helpers.book.manifest import Manifest, point_latest, run_dir_arg, check_writable_dir
from helpers.book.planning import plan
from helpers.book.targets import RunbookError, Target


def prepare(args, runs_dir: Path, root: Path) -> tuple[Target, list[str] | None, Path, dict, RunLock]:
    """For `--resume` (argparse's `args`): the run's target and chapter selection, its folder, its manifest
    and the run's lock, taken (released again if the run cannot be resumed). Options that would change the
    plan are refused."""
    given = [o for o, v in (("--target", args.target), ("--chapters", args.chapters),
                            ("--run-id", args.run_id), ("-p", args.param)) if v]
    if given:
        raise RunbookError(f"--resume continues a run with the plan it was started with; {', '.join(given)} "
                           f"cannot change it (start a new run for other settings)")
    run_dir = run_dir_arg(args.resume, runs_dir, "--resume")
    check_writable_dir(run_dir, "--resume: the run folder")
    lock = RunLock(run_dir).acquire()
    try:
        manifest = Manifest.load(run_dir)
        if manifest.plan is None:
            raise RunbookError(f"{run_dir / 'manifest.json'} records no plan (the run was made before runs "
                               f"could be resumed); start a new run")
        target = Target.from_plan(manifest.plan)
        only = manifest.plan.get("only")
        plan(target, root, only, run_dir=run_dir)  # validate before running anything
        left = [c["stem"] for c in manifest.chapters if c["status"] not in ("ok", "skipped")]
        print(f"resuming run {run_dir.name}: target {target.name}; to run: {', '.join(left) or 'nothing'}")
        if runs_dir.resolve() == run_dir.parent:
            point_latest(runs_dir, run_dir)
    except BaseException:
        lock.release()
        raise
    return target, only, run_dir, manifest, lock


def chapter_records(manifest: Manifest, steps: list[dict]) -> dict[str, dict]:
    """The manifest's chapter records by stem; a chapter added to the book since the run started is
    listed (appended to the manifest), to run."""
    recs = {c["stem"]: c for c in manifest.chapters}
    for st in steps:   # chapters added to the book since the run started: listed, to run
        if st["stem"] not in recs:
            recs[st["stem"]] = {"docname": st["docname"], "stem": st["stem"], "parameters": dict(st["parameters"]),
                                "status": "skipped" if st["skip"] else "pending", "duration_s": 0.0,
                                "started": None, "finished": None, "error": None}
            manifest.chapters.append(recs[st["stem"]])
    return recs
