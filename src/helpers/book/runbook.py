"""Execute the book's chapters on this machine with papermill, record the run, build the site.

    python -m helpers.book.runbook                      # target `auto`: measure what this machine can
    python -m helpers.book.runbook --target recorded    # the recorded investigation only
    python -m helpers.book.runbook --render runs/ID     # re-render an existing run, measuring nothing

    python -m helpers.book.runbook --resume runs/ID     # continue an interrupted run
    python -m helpers.book.runbook --replay runs/ID     # present a run again with today's chapters, measuring nothing

A run is a folder runs/<run-id>/ with the executed notebooks (notebooks/), the chapters' result
tables (results/<chapter>/), each chapter's log of stderr (logs/) and manifest.json: per-chapter
status (pending / running / ok / partial / failed / interrupted / skipped, with the error), durations,
parameters, the hardware fingerprint, software versions, timestamps and the plan the run was started
with. Every chapter is in the manifest from the start; the manifest is rewritten atomically (never half
a file) whenever a chapter starts or ends, and on SIGTERM or Ctrl-C the chapter in progress is marked
interrupted. `--resume RUN` continues a run with the plan it was started with: finished chapters are
kept, the others run again into the same folder, where their sweeps resume from the points already
measured. One process owns a run at a time (RunLock: `<run>/.runbook.lock`, the owner's pid and host): a
second `--resume` of a run that is still executing is refused at once, naming the owner. runs/latest points
at the newest run. The site is then built from the run with execution off
("run where the hardware is, render anywhere"): a chapter that did not finish is rendered as a page that
says so, and the status page lists every chapter.

Every input is checked before the first chapter starts, each problem with one message: the target
file (YAML, its keys and their types), the chapter selection, the run id (a plain name), and every
parameter value from the target or the command line against the checks the chapter itself declares
(helpers.book.precheck).

This module is the command line and the site's build; the jobs live in their own modules, whose public
names it re-exports: helpers.book.targets (load_target, apply_overrides), helpers.book.planning (the
chapters, plan), helpers.book.manifest (the run folder and its manifest), helpers.book.lock (RunLock),
helpers.book.execution (execute), helpers.book.resume (--resume) and helpers.book.staging (stage, the
status page and the page of a chapter that did not finish).
"""
from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from helpers import repo_root
from helpers.core import procs
from helpers.book import replay, resume
from helpers.book.execution import RunInterrupted, signals_interrupt, execute
from helpers.book.lock import LOCK_NAME, RunLock
from helpers.book.manifest import (RESERVED_RUN_IDS, RUN_ID, STATUSES, Manifest, environment_record, point_latest,
                                   run_dir_arg, check_run_id, check_writable_dir, commit_provenance, fingerprint,
                                   new_manifest, read_manifest, versions, write_manifest)
from helpers.book.planning import (ALWAYS, chapters, declared_parameters, parse_chapters, plan, stem, toc_entries,
                                   unmet_requirements)
from helpers.book.staging import stage, status_page
from helpers.book.targets import (MAX_EXECUTION_TIMEOUT_S, MAX_TARGET_BYTES, TARGETS_DIR, RunbookError, Target,
                                  apply_overrides, known_targets, load_target, load_yaml, target_path)

#: the names other code imports from the runbook (they live in the modules of its jobs)
__all__ = ["ALWAYS", "LOCK_NAME", "Manifest", "MAX_EXECUTION_TIMEOUT_S", "MAX_TARGET_BYTES", "RESERVED_RUN_IDS", "RUN_ID",
           "STATUSES", "TARGETS_DIR", "RunInterrupted", "RunLock", "RunbookError", "Target", "environment_record",
           "apply_overrides", "build", "chapters", "check_run_id", "check_writable_dir", "commit_provenance",
           "declared_parameters", "execute", "fingerprint", "known_targets", "load_target", "load_yaml", "main",
           "new_manifest", "parse_chapters", "plan", "read_manifest", "repo_root", "stage", "status_page", "stem",
           "target_path", "toc_entries", "unmet_requirements", "versions", "write_manifest"]


def build(run_dir: Path, root: Path | None = None, strict: bool = True, echo=print,
          out_dir: Path | None = None) -> Path:
    """Build the HTML site from a run into <out_dir>/_build/html (out_dir defaults to the repository
    root); return index.html's path."""
    root = root or repo_root()
    out = Path(out_dir or root)
    run_dir = Path(run_dir).resolve()
    stage_dir = out / "_build" / "stage"
    stage(run_dir, root, stage_dir)
    html = out / "_build" / "html"
    if html.exists():
        shutil.rmtree(html)
    cmd = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build", str(stage_dir), "--path-output", str(out),
           "--builder", "html"]
    if strict:
        cmd += ["-W", "-n", "--keep-going"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, preexec_fn=procs.die_with_parent)
    log = out / "_build" / "build.log"
    log.write_text(proc.stdout + "\n" + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise RunbookError(f"the book build failed (exit {proc.returncode}); full log: {log}\n{tail}")
    echo(f"built the site from {run_dir.name} in {time.perf_counter() - t0:.1f} s: {html / 'index.html'}")
    return html / "index.html"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m helpers.book.runbook",
        description=__doc__.split("\n\n")[0] + " Targets are the files targets/<name>.yaml.",
        epilog="Examples:\n"
               "  python -m helpers.book.runbook --list-targets\n"
               "  python -m helpers.book.runbook --target auto\n"
               "  python -m helpers.book.runbook --target recorded --no-build\n"
               "  python -m helpers.book.runbook --render runs/latest\n"
               "  python -m helpers.book.runbook --resume runs/latest\n"
               "  python -m helpers.book.runbook --replay runs/h200x2-20261129f\n"
               "  python -m helpers.book.runbook --target auto --chapters 01_environment,06_vm_p2p\n"
               "  python -m helpers.book.runbook --target cpu-demo -p 03_baselines_tuning.concurrencies=[1,4]",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=None, help="parameter set to run: a name in targets/ or a YAML file "
                                                  "(default: auto)")
    p.add_argument("--run-id", help="name of the run folder, a plain name (default: <UTC time>-<target>-<host>)")
    p.add_argument("--runs-dir", default="runs", help="where run folders go (default: runs/)")
    p.add_argument("--chapters", help="comma-separated chapter stems to execute; the rest are skipped")
    p.add_argument("--no-build", action="store_true", help="execute only; build the site later with --render")
    p.add_argument("--render", metavar="RUN_DIR", help="build the site from an existing run; execute nothing")
    p.add_argument("--resume", metavar="RUN", help="continue an interrupted run (a folder, or a run id in "
                                                  "--runs-dir) with the plan it was started with")
    p.add_argument("--replay", metavar="RUN", help="execute again, in place, every chapter of a run that ran ok "
                                                  "with today's book, measuring nothing: chapters that measured "
                                                  "present what the run saved (helpers.book.replay); results/ "
                                                  "keeps its measurements byte for byte")
    p.add_argument("--allow-dirty", action="store_true", help="with --replay: replay from a tree with modified "
                                                             "tracked files (recorded as +dirty)")
    p.add_argument("--no-strict", action="store_true", help="build without -W -n (warnings not fatal)")
    p.add_argument("--out-dir", metavar="DIR", help="build the site into DIR/_build/html (default: the "
                                                   "repository root, so _build/html)")
    p.add_argument("-p", "--param", action="append", default=[], metavar="[CHAPTER.]NAME=VALUE",
                   help="override a target parameter for every chapter, or for one (value read as YAML)")
    p.add_argument("--list-targets", action="store_true", help="list the targets and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    root = repo_root()
    lock = None
    try:
        runs_dir = Path(args.runs_dir)
        if not runs_dir.is_absolute():
            runs_dir = root / runs_dir
        out_dir = Path(args.out_dir).resolve() if args.out_dir else None
        if not str(args.runs_dir).strip():
            raise RunbookError("--runs-dir '': give the folder where run folders go (default: runs)")
        if args.list_targets:
            for name in known_targets(root):
                t = load_target(name, root)
                print(f"{name:<12} {' '.join(t.description.split())}")
            return 0
        _refuse_unused(args)
        if args.render:
            run_dir = run_dir_arg(args.render, runs_dir, "--render")
            read_manifest(run_dir)
            build(run_dir, root, strict=not args.no_strict, out_dir=out_dir)
            return 0
        if args.replay:
            run_dir = run_dir_arg(args.replay, runs_dir, "--replay")
            replay.replay(run_dir, root, allow_dirty=args.allow_dirty)
            print(f"replayed {run_dir.name}: results/ kept its measurements; notebooks/ and manifest.json rewritten")
            if not args.no_build:
                build(run_dir, root, strict=not args.no_strict, out_dir=out_dir)
            return 0
        if args.resume:
            target, only, run_dir, manifest, lock = resume.prepare(args, runs_dir, root)
        else:
            target, only, run_dir, lock = _start(args, runs_dir, root)
            manifest = None
        return _execute_and_build(args, target, run_dir, root, only, manifest, out_dir)
    except RunbookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if lock is not None:
            lock.release()


def _refuse_unused(args) -> None:
    """Options that would have no effect together, or given empty, are refused, never silently ignored."""
    for opt, v in (("--resume", args.resume), ("--render", args.render), ("--replay", args.replay),
                   ("--out-dir", args.out_dir)):
        if v is not None and not str(v).strip():
            raise RunbookError(f"{opt} {v!r} is empty; give a run folder or a run id in --runs-dir"
                               if opt != "--out-dir" else "--out-dir '' is empty; give the folder to build the site into")
    if args.allow_dirty and not args.replay:
        raise RunbookError("--allow-dirty applies to --replay only; drop it (a new run records a modified tree itself)")
    if args.replay:
        given = [o for o, v in (("--resume", args.resume), ("--render", args.render), ("--target", args.target),
                                ("--chapters", args.chapters), ("--run-id", args.run_id), ("-p", args.param)) if v]
        if given:
            raise RunbookError(f"--replay presents a run again with the parameters its manifest recorded; "
                               f"{', '.join(given)} cannot change that: drop it")
    if args.render and args.resume:
        raise RunbookError("--render and --resume: give one (--resume executes what is left, then builds)")
    if args.render:
        given = [o for o, v in (("--target", args.target), ("--chapters", args.chapters), ("--run-id", args.run_id),
                                ("-p", args.param), ("--no-build", args.no_build)) if v]
        if given:
            raise RunbookError(f"--render builds the site from an existing run and executes nothing; {', '.join(given)} "
                               "would have no effect: drop it (or start a run without --render)")
    elif args.no_build and (args.out_dir or args.no_strict):
        opt = "--out-dir" if args.out_dir else "--no-strict"
        raise RunbookError(f"{opt} with --no-build: no site is built, so {opt} would have no effect; drop --no-build "
                           f"to build the site, or drop {opt} (build later with --render RUN {opt} ...)")


def _start(args, runs_dir: Path, root: Path) -> tuple[Target, list[str] | None, Path, RunLock]:
    """A new run: its target (the command line's -p over it), chapter selection, folder (made, and
    runs/latest pointed at it) and lock; every input is checked before the folder is made."""
    target = load_target(args.target if args.target is not None else "auto", root)
    apply_overrides(target, args.param)
    only = parse_chapters(args.chapters, root)
    if args.run_id is not None:
        check_run_id(args.run_id)
    plan(target, root, only)  # validate before creating anything
    check_writable_dir(runs_dir, "--runs-dir")
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname().split(".")[0][:20]) or "host"
    run_id = args.run_id or check_run_id(dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
                                         + f"-{re.sub(r'[^A-Za-z0-9._-]', '-', target.name)}-{host}")
    run_dir = runs_dir / run_id
    if run_dir.exists() or run_dir.is_symlink():
        raise RunbookError(f"run folder {run_dir} already exists; choose another --run-id, or continue it "
                           f"with --resume {run_dir}")
    try:
        run_dir.mkdir(parents=True)
    except OSError as e:
        from helpers.core import results

        raise RunbookError(str(results.write_error(run_dir, e, "could not be made"))) from None
    lock = RunLock(run_dir).acquire()
    try:
        point_latest(runs_dir, run_dir)
    except BaseException:   # the run cannot start: its lock goes
        lock.release()
        raise
    print(f"run {run_id}: target {target.name}, {len(chapters(root))} chapters -> {run_dir}")
    return target, only, run_dir, lock


def executed_line(manifest: Manifest) -> str:
    """The run's execution in a line: its wall time in this session (chapters that time nothing run two at a time:
    helpers.book.execution) and, where that differs, the chapters' own times summed."""
    wall = manifest.session_duration_s if manifest.session_duration_s is not None else manifest.duration_s
    both = f" ({manifest.duration_s:.1f} s of chapters, some side by side)" if manifest.duration_s > wall + 0.5 else ""
    return f"executed in {wall:.1f} s{both}: status {manifest.status}"


def _execute_and_build(args, target: Target, run_dir: Path, root: Path, only: list[str] | None,
                       manifest: Manifest | None, out_dir: Path | None) -> int:
    """Execute the run (a new one, or what is left of a resumed one), then build the site unless
    --no-build; the exit status: 0 ok or partial, 1 a chapter failed, 130 Ctrl-C, 143 SIGTERM or SIGHUP."""
    try:
        with signals_interrupt():
            manifest = execute(target, run_dir, root, only, manifest=manifest)
    except KeyboardInterrupt as exc:
        print(f"\ninterrupted ({str(exc) or 'Ctrl-C'}): the manifest says which chapters finished; continue with "
              f"python -m helpers.book.runbook --resume {run_dir}", file=sys.stderr)
        return 130 if not isinstance(exc, RunInterrupted) else 143
    print(executed_line(manifest))
    if not args.no_build:
        build(run_dir, root, strict=not args.no_strict, out_dir=out_dir)
    if manifest.status == "partial":
        print(f"partial: {', '.join(c['stem'] for c in manifest.chapters if c['status'] == 'partial')} "
              f"stopped short of the plan before the cell's time limit (the manifest says what is left); "
              f"resume with python -m helpers.book.runbook --resume {run_dir}")
    return 0 if manifest.status in ("ok", "partial") else 1


if __name__ == "__main__":
    sys.exit(main())
