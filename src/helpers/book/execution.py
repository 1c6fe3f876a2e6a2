"""Executing a run: every chapter of the plan with papermill into the run folder, the manifest rewritten as
each starts and ends, each chapter's stderr in its log, the target's cell time limit handed to the kernel
(its sweeps keep within it), and an interrupt (Ctrl-C, SIGTERM, SIGHUP) recorded on the chapter it stopped.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from helpers.book import resume
from helpers.book.manifest import Manifest, new_manifest, utc_now, write_manifest
from helpers.book.planning import gpu_visible, plan, producers, quiet
from helpers.book.targets import RunbookError, Target
from helpers.core import procs, results
from helpers.core.results import CELL_TIMEOUT_ENV


class RunInterrupted(KeyboardInterrupt):
    """The run was asked to stop (SIGTERM, SIGHUP): handled like Ctrl-C."""


class signals_interrupt:
    """SIGTERM and SIGHUP raise RunInterrupted in the main thread while the run executes."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __enter__(self):
        self.saved = {}

        def handler(signum, _frame):
            raise RunInterrupted(signal.Signals(signum).name)

        for sig in self.SIGNALS:
            try:
                self.saved[sig] = signal.signal(sig, handler)
            except (ValueError, OSError):   # not the main thread: nothing to install
                pass
        return self

    def __exit__(self, *exc):
        for sig, h in self.saved.items():
            signal.signal(sig, h)
        return False


class stderr_to:
    """Point this process's file descriptor 2 at `f` (restored on exit)."""

    def __init__(self, f):
        self.f = f
        self.saved = None

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        os.dup2(self.f.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        return False


def _end_children(grace_s: float = 5.0) -> None:
    """After an interrupt: end what this process started and did not stop (a kernel, a build). Their
    keepers end the servers and workers those started."""
    kids = procs.descendants(os.getpid())
    procs.send(kids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(procs.alive(p) for p in kids) and time.monotonic() < deadline:
        time.sleep(0.1)
    procs.send([p for p in kids if procs.alive(p)], signal.SIGKILL)


def execute(target: Target, run_dir: Path, root: Path, only: list[str] | None = None,
            echo=print, manifest: Manifest | None = None) -> Manifest:
    """Execute every chapter of the plan into run_dir; return the manifest. With `manifest` (a run being
    resumed), chapters already ok or skipped are kept and the others run again."""
    steps = plan(target, root, only, run_dir=run_dir)
    (run_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    resuming = manifest is not None
    if manifest is None:
        manifest = new_manifest(target, run_dir, root, steps, only)
    recs = resume.chapter_records(manifest, steps)
    manifest.status = "running"
    manifest.finished = None
    session = {"started": utc_now(), "finished": None, "pid": os.getpid(), "resumed": resuming, "ran": []}
    manifest.sessions = [*(manifest.sessions or []), session]
    save = _saver(run_dir, manifest)
    save()
    n = len(steps)
    t_run = time.perf_counter()
    todo = []
    for i, step in enumerate(steps, 1):
        rec = recs[step["stem"]]
        label = f"[{i:>2}/{n}] {step['stem']:<24}"
        if rec["status"] == "skipped" or step["skip"]:
            echo(f"{label} skipped")
            continue
        if resuming and rec["status"] == "ok":
            echo(f"{label} ok (kept from before)")
            continue
        todo.append((step, rec, label))
    lanes = side_by_side_lanes()
    if lanes < 2:
        for step, rec, label in todo:
            _run_chapter(step, rec, label, target, run_dir, root, echo, manifest, session, save)
    else:
        _run_in_lanes(todo, lanes, target, run_dir, root, echo, manifest, session, save)
    return _finish(manifest, session, run_dir, t_run)


#: BOOK_LANES=1 runs every chapter alone, one after another
LANES_ENV = "BOOK_LANES"


def side_by_side_lanes() -> int:
    """How many chapters that time nothing may run at once: 2 where the machine has two cores or more (one
    kernel each; a chapter's CPU is mostly its kernel's start and imports, one core), else 1; BOOK_LANES sets
    it (1: every chapter alone)."""
    text = os.environ.get(LANES_ENV, "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            raise RunbookError(f"{LANES_ENV}={text[:40]!r}: expected a whole number of lanes, 1 or more (1: every "
                               f"chapter alone)")
        return int(text)
    return 2 if (os.cpu_count() or 1) >= 2 else 1


def _run_in_lanes(todo: list, lanes: int, target: Target, run_dir: Path, root: Path, echo, manifest: Manifest,
                  session: dict, save) -> None:
    """The plan in its order, a chapter that times something alone (in this thread, as always), and chapters
    that time nothing (planning.quiet) up to `lanes` at once, each once the chapters it reads from
    (planning.producers) have ended. An interrupt stops every chapter running and records it on each."""
    gpu = gpu_visible()
    lock = threading.Lock()

    def locked_save():
        with lock:
            save()

    running: dict = {}   # future -> (step, rec, when it started)
    stopping = threading.Event()
    with ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="chapter") as pool:
        try:
            for step, rec, label in todo:
                if not quiet(step, gpu):
                    _drain(running, 0)
                    _run_chapter(step, rec, label, target, run_dir, root, echo, manifest, session, locked_save)
                    continue
                needs = producers(step)
                while running and (len(running) >= lanes or needs & {v[0]["stem"] for v in running.values()}):
                    _drain(running, len(running) - 1)
                with lock:   # every key the chapter's thread sets exists before it starts (a save reads them)
                    rec.setdefault("runs", 0)
                    rec.setdefault("parameter_origins", {})
                fut = pool.submit(_run_chapter, step, rec, label, target, run_dir, root, echo, manifest, session,
                                  locked_save, side=True, stopping=stopping)
                running[fut] = (step, rec, time.perf_counter())
            _drain(running, 0)
        except KeyboardInterrupt as exc:
            stopping.set()
            for fut, (step, rec, t0) in running.items():
                if not fut.done():
                    _interrupted(exc, rec, t0, manifest, session, run_dir, end_children=False)
            _end_children()
            wait(list(running), timeout=60)   # their kernels ended: each thread returns
            locked_save()
            raise


def _drain(running: dict, keep: int) -> None:
    """Wait until at most `keep` chapters run; a chapter's own error is in its record (raised only for a bug)."""
    while len(running) > keep:
        done, _ = wait(list(running), return_when=FIRST_COMPLETED)
        for fut in done:
            running.pop(fut)
            fut.result()


def _saver(run_dir: Path, manifest: Manifest):
    """save(): write the manifest; a failed write is warned about and the run goes on."""
    failed_writes = []

    def save():
        try:
            write_manifest(run_dir, manifest)
        except OSError as e:   # keep going: the next write may succeed; the last one must
            failed_writes.append(str(e))
            print(f"warning: {e}; the run goes on", file=sys.stderr)

    return save


def _run_chapter(step: dict, rec: dict, label: str, target: Target, run_dir: Path, root: Path, echo,
                 manifest: Manifest, session: dict, save, side: bool = False,
                 stopping: threading.Event | None = None) -> None:
    """Execute one chapter of the plan; its record `rec` in the manifest says how it went (saved as the
    chapter starts and as it ends). An interrupt is recorded on it and raised again. `side`: it runs in a
    lane beside another chapter (a thread: its line is printed whole at its end, its kernel's own output goes
    to its log by the kernel's file descriptors); `stopping` set: the run was interrupted, which the main
    thread has recorded on this chapter already."""
    params = dict(step["parameters"])
    if "run_dir" in step["declared"]:
        params["run_dir"] = str(run_dir.resolve())
    out_nb = run_dir / "notebooks" / f"{step['stem']}.ipynb"
    rec.update(parameters=params, parameter_origins=dict(step.get("origins") or {}), status="running", started=utc_now(), finished=None, error=None,
               runs=rec.get("runs", 0) + 1)
    session["ran"].append(step["stem"])
    save()
    if echo is print and not side:  # show the chapter while it runs; its result completes the line
        print(label, end=" ", flush=True)
        label = ""
    t0 = time.perf_counter()
    chapter_results = run_dir / "results" / step["stem"]
    (chapter_results / f"{results.PARTIAL}.json").unlink(missing_ok=True)   # said by an earlier session
    os.environ[CELL_TIMEOUT_ENV] = str(target.execution_timeout)   # the kernel's sweeps keep within it
    try:
        _papermill(step, out_nb, params, target, run_dir, root, rec, side)
        if stopping is not None and stopping.is_set():
            return
        rec["status"] = "ok"
        short = results.partial_reasons(chapter_results)
        if short:   # it ran whole, but stopped short of its plan on purpose: what is left is for --resume
            rec["status"] = "partial"
            rec["error"] = {"ename": "Partial", "evalue": "; ".join(short)[:1800] + f". Resume with "
                            f"`python -m helpers.book.runbook --resume {run_dir}` (for more time per cell "
                            f"instead, start a new run from a copy of the target with a larger "
                            f"execution_timeout: --resume keeps the plan)"}
    except KeyboardInterrupt as exc:
        _interrupted(exc, rec, t0, manifest, session, run_dir)
        save()
        raise
    except Exception as exc:  # noqa: BLE001 - a chapter's failure must not stop the others
        if stopping is not None and stopping.is_set():   # the interrupt ended this chapter's kernel: recorded
            return
        _failed(exc, rec, target, out_nb)
    rec["duration_s"] = round(time.perf_counter() - t0, 2)
    rec["finished"] = utc_now()
    msg = f"{label}{' ' if label else ''}{rec['status']:<7} {rec['duration_s']:6.1f} s"
    if rec["error"]:
        msg += f"  {rec['error']['ename']}: {rec['error']['evalue'].splitlines()[0][:160] if rec['error']['evalue'] else ''}"
    echo(msg)
    save()


def _failed(exc: BaseException, rec: dict, target: Target, out_nb: Path) -> None:
    """A chapter's failure in its record (called in the except clause that caught it): papermill's cell error,
    a cell past the time limit, a file that could not be written or read (named), or any other error."""
    from papermill.exceptions import PapermillExecutionError

    rec["status"] = "failed"
    if isinstance(exc, PapermillExecutionError):
        rec["error"] = {"ename": exc.ename, "evalue": str(exc.evalue)[:2000],
                        "cell_index": exc.cell_index,
                        "traceback": "\n".join(exc.traceback)[-6000:] if exc.traceback else ""}
        return
    if _cell_timeout(exc):   # nbclient's CellTimeoutError is an OSError (a TimeoutError), not a write error
        rec["error"] = {"ename": "CellTimeout", "evalue": cell_timeout_message(target.execution_timeout, exc),
                        "traceback": traceback.format_exc()[-6000:]}
        return
    if isinstance(exc, OSError) and not isinstance(exc, results.WriteError):   # name the file and the cause
        exc = results.write_error(exc.filename or out_nb, exc, "could not be written or read")
    rec["error"] = {"ename": type(exc).__name__, "evalue": str(exc)[:2000],
                    "traceback": traceback.format_exc()[-6000:]}


def _cell_timeout(exc: BaseException) -> bool:
    from nbclient.exceptions import CellTimeoutError

    return isinstance(exc, CellTimeoutError)


def cell_timeout_message(limit_s: int, exc: BaseException | None = None) -> str:
    """What a chapter whose cell ran past the target's cell time limit says: the limit, where it comes from,
    and what to change."""
    first = str(exc or "").strip().splitlines()[0][:300] if str(exc or "").strip() else ""
    return (f"a cell ran longer than the cell time limit, execution_timeout = {limit_s} s (the target's), and was "
            f"stopped{f' ({first})' if first else ''}. Raise execution_timeout in a copy of the target "
            f"(targets/<yours>.yaml) and start a new run with it, or make the chapter's work smaller (-p)")[:2000]


def _papermill(step: dict, out_nb: Path, params: dict, target: Target, run_dir: Path, root: Path,
               rec: dict, side: bool = False) -> None:
    """papermill executes the chapter into `out_nb`; its output and stderr, the kernel's included, go to
    the chapter's log. Alone, this process's fd 2 points at the log while it runs (the kernel inherits it);
    beside another chapter (`side`, a thread), the kernel is started with the log as its stdout and stderr."""
    import papermill

    with results.append_text(run_dir / "logs" / f"{step['stem']}.log") as log, \
            (contextlib.nullcontext() if side else stderr_to(log)):
        log.write(f"=== {utc_now()}: {'resumed' if rec['runs'] > 1 else 'started'} by runbook "
                  f"pid {os.getpid()}{' beside another chapter' if side else ''} ===\n")
        log.flush()
        # the kernel process's fd 2 is the log: its own warnings land in the chapter's log
        papermill.execute_notebook(
            str(step["notebook"]), str(out_nb), parameters=params, kernel_name="python3",
            progress_bar=False, log_output=False, stdout_file=log, stderr_file=log,
            execution_timeout=target.execution_timeout, cwd=str(root),
            **({"kernel_manager_class": _kernel_manager_writing_to(log)} if side else {}),
        )


def _kernel_manager_writing_to(log):
    """nbclient's kernel manager, starting the kernel with `log` as its stdout and stderr."""
    from jupyter_client.manager import AsyncKernelManager

    class LogKernelManager(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd, **kw):
            kw["stdout"] = kw["stderr"] = log
            return await super()._async_launch_kernel(kernel_cmd, **kw)

    return LogKernelManager


def _interrupted(exc: KeyboardInterrupt, rec: dict, t0: float, manifest: Manifest, session: dict,
                 run_dir: Path, end_children: bool = True) -> None:
    """The run was interrupted in this chapter: say so in its record and the manifest, and end what the
    chapter started."""
    why = str(exc) or "Ctrl-C"
    rec["status"] = "interrupted"
    rec["error"] = {"ename": type(exc).__name__,
                    "evalue": f"the run was interrupted here ({why}); continue it with "
                              f"`python -m helpers.book.runbook --resume {run_dir}`"}
    rec["duration_s"] = round(time.perf_counter() - t0, 2)
    rec["finished"] = utc_now()
    manifest.status = "interrupted"
    manifest.finished = utc_now()
    session["finished"] = utc_now()
    if end_children:
        _end_children()


def _finish(manifest: Manifest, session: dict, run_dir: Path, t_run: float) -> Manifest:
    """The run's end in its manifest: durations and the overall status, written (a failure to write it
    is an error: the last write must succeed)."""
    manifest.finished = utc_now()
    session["finished"] = utc_now()
    manifest.duration_s = round(sum(c.get("duration_s") or 0.0 for c in manifest.chapters), 2)
    manifest.session_duration_s = round(time.perf_counter() - t_run, 2)
    left = [c["stem"] for c in manifest.chapters if c["status"] not in ("ok", "skipped", "failed", "partial")]
    failed = [c["stem"] for c in manifest.chapters if c["status"] == "failed"]
    partial = [c["stem"] for c in manifest.chapters if c["status"] == "partial"]
    manifest.status = "failed" if failed else ("interrupted" if left else ("partial" if partial else "ok"))
    try:
        write_manifest(run_dir, manifest)
    except OSError as e:
        raise RunbookError(f"the run ended but {e}; then continue with --resume {run_dir}") from None
    return manifest
