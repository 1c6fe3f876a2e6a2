"""Replaying a run (`--replay RUN`): today's chapters present what a run measured, measuring nothing.

Every chapter the run's manifest lists as ok is executed again, in place, with the parameters the manifest
recorded for it; a chapter whose `auto` mode measures this machine (its PARAMS allow the mode
helpers.core.layout.REPLAY_MODE: the environment probe, the memory-fit's GPUs, the VM/P2P sweeps) runs in
that mode instead, loading what its `auto` execution saved. The run's measurements stay as they were: every
file of results/ is byte-identical afterwards except the derived presentation a chapter recomputes on every
execution (helpers.core.layout.PRESENTATION); a replay that changed anything else is undone and refused.
The executed notebooks replace notebooks/ only when every chapter ran; the manifest keeps every field of the
measurement (hardware, versions, started and finished, the commit it was made from) and gains `replayed`:
the book's commit (and whether it was clean), the date, the chapters and the modes they ran in. A chapter that
measured in a mode without a replay (a live server, the decode step's GPU timing) is never re-executed: its
executed notebook stays as the run made it, and `replayed.kept` says why (helpers.core.layout.PRESENTS_ONLY
names the chapters whose `auto` reads only).

Refused before any work, each with the input and the fix: a folder without manifest.json, a chapter whose
saved results are missing, a chapter the book no longer has, and a tree with modified tracked files (the
pages would be presented by no commit anyone can check out) unless `--allow-dirty`, which records the
commit as `+dirty` as a run made from such a tree is.
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from helpers.book.lock import RunLock
from helpers.book.manifest import Manifest, utc_now, versions
from helpers.book.planning import ALWAYS, chapters, declared_parameters, stem
from helpers.book import precheck
from helpers.book.targets import RunbookError
from helpers.chapters import ChapterError, module
from helpers.core import layout, results


def replay_mode(chapter: str, mode) -> str | None:
    """The mode `chapter` runs in when a run that executed it in `mode` is replayed: `auto` becomes
    REPLAY_MODE where the chapter offers it; anything else is kept."""
    try:
        spec = module(chapter).PARAMS.get("mode")
    except (ChapterError, AttributeError):
        return mode
    if mode != "auto" or spec is None:
        return mode
    try:
        spec.check(layout.REPLAY_MODE)
    except ValueError:
        return mode
    return layout.REPLAY_MODE


def plan(run_dir: Path, root: Path, allow_dirty: bool = False) -> tuple[Manifest, list[dict], dict, list[dict]]:
    """(the run's manifest, the steps to execute, the book's versions, the chapters kept as measured) for
    replaying `run_dir`; every
    problem refused at once, before any work, as one RunbookError naming the input and the fix."""
    manifest = Manifest.load(run_dir)   # refuses a folder without manifest.json, or a malformed one, naming it
    vers = versions(root)
    commit = str(vers.get("book_commit") or "")
    if commit.endswith("+dirty") and not allow_dirty:
        raise RunbookError(f"--replay {run_dir.name}: the book's tracked files differ from commit "
                           f"{commit.removesuffix('+dirty')} (git status), so the pages would be presented by no "
                           "commit anyone can check out; commit first, or pass --allow-dirty to replay anyway (the "
                           "manifest then records the commit as +dirty, as a run made from such a tree)")
    docs = {stem(d): d for d in chapters(root)}
    steps, problems, kept = [], [], []
    for rec in manifest.chapters or []:
        if rec.get("status") != "ok":
            continue
        s = rec["stem"]
        if s not in docs:
            problems.append(f"chapter {s} ran ok in this run but is no longer a notebook in _toc.yml: the book "
                            "cannot present it again; replay with the commit that still has it")
            continue
        nb = root / f"{docs[s]}.ipynb"
        declared = declared_parameters(nb)
        recorded = {k: v for k, v in (rec.get("parameters") or {}).items() if k not in ALWAYS}
        params = {k: v for k, v in recorded.items() if k in declared}
        if "mode" in params:
            params["mode"] = replay_mode(s, params["mode"])
            if params["mode"] == layout.REPLAY_MODE and not _replayable(s, run_dir, params):
                params["mode"] = recorded["mode"]   # kept as measured below
        if params.get("mode") not in (None, "recorded", layout.REPLAY_MODE) and s not in layout.PRESENTS_ONLY:
            kept.append({"stem": s, "mode": params["mode"], "why": f"it ran in mode {params['mode']!r}, which measures "
                         "the machine it runs on, and it has no replay mode: its executed notebook is kept as measured"})
            continue
        problems += precheck.problems(s, nb, params, {k: "the run's manifest" for k in params}, ALWAYS)
        if params.get("mode") == layout.REPLAY_MODE:
            problems += _missing_inputs(run_dir, s)
        steps.append({"docname": docs[s], "stem": s, "notebook": nb, "parameters": params,
                      "declared": list(declared), "dropped": sorted(set(recorded) - set(params))})
    if not steps and not problems:
        problems.append(f"{run_dir / 'manifest.json'} lists no chapter that ran ok and can be replayed: there is "
                        "nothing to present")
    problems += layout.check_needs([st["stem"] for st in steps], run_dir,
                                   {st["stem"]: st["parameters"].get("mode") for st in steps})
    if problems:
        raise RunbookError(f"--replay {run_dir.name} refused:\n  - " + "\n  - ".join(problems))
    return manifest, steps, vers, kept


def _replayable(chapter: str, run_dir: Path, params: dict) -> bool:
    """A chapter that offers REPLAY_MODE may still lack, in this run, what its replay presents (its module's
    `replayable(run_dir, parameters)` says so): it is then kept as measured."""
    check = getattr(module(chapter), "replayable", None)
    return True if check is None else bool(check(run_dir, params))


def _missing_inputs(run_dir: Path, chapter: str) -> list[str]:
    return [f"chapter {chapter} replays its saved '{name}', but {layout.path(run_dir, chapter, name)} does not "
            f"exist ({layout.result(chapter, name).description}): the run lacks what its auto execution measured, "
            f"so it cannot be presented again; run the chapter there with --resume or a new run"
            for name in layout.REPLAY_INPUTS.get(chapter, ()) if not layout.exists(run_dir, chapter, name)]


def digest(run_dir: Path) -> dict[str, str]:
    """Every file under results/ by its path relative to results/, with its SHA-256."""
    base = Path(run_dir) / "results"
    return {str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(base.rglob("*")) if p.is_file()} if base.exists() else {}


def changed_measurements(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The results/ files a replay changed, added or removed that are not derived presentation."""
    def presentation(rel: str) -> bool:
        parts = Path(rel).parts
        return len(parts) == 2 and parts[1] in layout.presentation_files(parts[0])

    return sorted(rel for rel in set(before) | set(after)
                  if before.get(rel) != after.get(rel) and not presentation(rel))


def replay(run_dir: Path, root: Path, allow_dirty: bool = False, echo=print) -> Manifest:
    """Replay `run_dir` (see the module's docstring); return its manifest with the `replayed` entry."""
    from helpers.book.execution import stderr_to   # the runbook's own way of logging a chapter's stderr

    run_dir = Path(run_dir).resolve()
    manifest, steps, vers, kept = plan(run_dir, root, allow_dirty)
    lock = RunLock(run_dir).acquire()
    try:
        before = digest(run_dir)
        with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
            saved = Path(tmp) / "results"
            if (run_dir / "results").exists():
                shutil.copytree(run_dir / "results", saved, symlinks=True)
            out = Path(tmp) / "notebooks"
            out.mkdir()
            started, failed = utc_now(), []
            for k in kept:
                echo(f"        {k['stem']:<24} kept: {k['why']}")
            for i, st in enumerate(steps, 1):
                err = _execute(st, out, run_dir, root, stderr_to)
                echo(f"[{i:>2}/{len(steps)}] {st['stem']:<24} {st['parameters'].get('mode', ''):<9} "
                     f"{'ok' if err is None else 'failed: ' + err}")
                if err is not None:
                    failed.append(f"{st['stem']}: {err}")
            changed = changed_measurements(before, digest(run_dir))
            if changed or failed:
                _restore(run_dir, saved)
                why = (f"it changed the run's measurements {changed} (only derived presentation, "
                       f"helpers.core.layout.PRESENTATION, may change)" if changed else "chapters failed: "
                       + "; ".join(failed))
                raise RunbookError(f"--replay {run_dir.name}: {why}; results/ was restored and notebooks/ left "
                                   "as it was (the chapters' logs are in logs/)")
            for st in steps:
                shutil.copyfile(out / f"{st['stem']}.ipynb", run_dir / "notebooks" / f"{st['stem']}.ipynb")
        manifest.replayed = _entry(manifest, steps, vers, kept, started, before, digest(run_dir))
        manifest.save(run_dir)
        return manifest
    finally:
        lock.release()


def _execute(st: dict, out: Path, run_dir: Path, root: Path, stderr_to) -> str | None:
    """Execute one chapter into `out`; its stderr appended to the run's log of it. None, or the error."""
    import papermill

    params = dict(st["parameters"])
    if "run_dir" in st["declared"]:
        params["run_dir"] = str(run_dir)
    (run_dir / "logs").mkdir(exist_ok=True)
    try:
        with results.append_text(run_dir / "logs" / f"{st['stem']}.log") as log, stderr_to(log):
            log.write(f"=== {utc_now()}: replayed by runbook --replay (mode {params.get('mode')}) ===\n")
            log.flush()
            papermill.execute_notebook(str(st["notebook"]), str(out / f"{st['stem']}.ipynb"), parameters=params,
                                       kernel_name="python3", progress_bar=False, log_output=False, stdout_file=log,
                                       stderr_file=log, cwd=str(root))
    except Exception as exc:  # noqa: BLE001 - reported, and the replay is refused as a whole
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else ''}"
    return None


def _restore(run_dir: Path, saved: Path) -> None:
    if saved.exists():
        shutil.rmtree(run_dir / "results", ignore_errors=True)
        shutil.copytree(saved, run_dir / "results", symlinks=True)


def _entry(manifest: Manifest, steps: list[dict], vers: dict, kept: list[dict], started: str, before: dict,
           after: dict) -> dict:
    """The manifest's `replayed` entry: who presented the run again, when, and how (an earlier replay is
    kept under `previous`)."""
    commit = str(vers.get("book_commit") or "unrecorded")
    prev = manifest.replayed
    entry = {"book_commit": commit, "clean": bool(vers.get("book_commit")) and not commit.endswith("+dirty")
             and "BOOK_COMMIT" not in commit, "started": started, "finished": utc_now(),
             "chapters": [st["stem"] for st in steps],
             "modes": {st["stem"]: st["parameters"].get("mode") for st in steps if "mode" in st["parameters"]},
             "kept": {k["stem"]: k["why"] for k in kept},
             "parameters_dropped": {st["stem"]: st["dropped"] for st in steps if st["dropped"]},
             "presentation_rewritten": sorted(r for r in set(before) | set(after) if before.get(r) != after.get(r)),
             "versions": {k: v for k, v in vers.items() if k != "book_commit"}}
    if prev:
        entry["previous"] = [*(prev.pop("previous", []) or []), prev]
    return entry
