"""A run's folder: its name, its manifest (written atomically, read back checked), the record of what ran
where (software versions, the commit, the machine's fingerprint, the Python environment), the runs/latest
link, and the checks that a folder given on the command line is a run, or can be written.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import socket
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path

from helpers import __version__
from helpers.core.params import short
from helpers.book import environment
from helpers.book.targets import RunbookError, Target

#: a chapter's status in the manifest
STATUSES = ("pending", "running", "ok", "partial", "failed", "interrupted", "skipped")
#: run ids are plain names: a letter or digit, then letters, digits, '.', '_', '-' (no path, not 'latest')
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
RESERVED_RUN_IDS = ("latest",)


def check_run_id(run_id: str) -> str:
    """A run id is a plain folder name under runs/ (no '/', no '..', not 'latest')."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id) or run_id in RESERVED_RUN_IDS or ".." in run_id:
        raise RunbookError(f"--run-id {short(run_id)}: a run id is a plain name of letters, digits, '.', '_' and '-' "
                           f"(starting with a letter or digit, no '/' or '..', at most 128 characters, and not "
                           f"{' or '.join(RESERVED_RUN_IDS)!r}, which the runbook keeps for the newest run), "
                           f"e.g. 20261201-h200-mine")
    return run_id


def _git(root: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def versions(root: Path) -> dict:
    """Software versions, read from package metadata (nothing heavy is imported)."""
    import importlib.metadata as md

    out = {"python": platform.python_version(), "helpers": __version__}
    for pkg in ("torch", "papermill", "jupyter-book", "myst-nb", "nbclient", "pandas", "matplotlib",
                "nvidia-ml-py", "transformers", "sglang", "flashinfer-python"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    commit = _git(root, "rev-parse", "--short", "HEAD")
    if commit:
        dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
        out["book_commit"] = commit + ("+dirty" if dirty else "")
    elif os.environ.get("BOOK_COMMIT"):  # a copy without .git (a GPU host): the sender says which
        out["book_commit"] = os.environ["BOOK_COMMIT"] + " (from BOOK_COMMIT)"
    return out


def commit_provenance(manifest: "Manifest") -> tuple[str, bool]:
    """(what the status page says of the commit a run was made from, whether it is a recorded clean
    commit). Only a commit read from git with no modified tracked file counts as clean; a commit the
    sender named (BOOK_COMMIT, unverified), a modified tree or none at all is said to be so."""
    commit = str((manifest.versions or {}).get("book_commit") or "")
    if not commit:
        return "made from an unrecorded commit (this run predates commit recording)", False
    if commit.endswith("+dirty"):
        return f"made from a modified commit: `{commit}` (tracked files differed from it)", False
    if "(from BOOK_COMMIT)" in commit:
        return f"made from an unverified commit: `{commit}` (named by the sender; the copy had no git)", False
    return f"made from the clean commit `{commit}`", True


def fingerprint() -> dict:
    """The machine a run executed on (helpers.machine.probe's fingerprint where available)."""
    try:
        from helpers.machine.probe import fingerprint as fp

        return fp()
    except Exception as exc:  # noqa: BLE001 - the run must go on; say why the probe failed
        return {"hostname": socket.gethostname(), "platform": platform.platform(),
                "logical_cpus": os.cpu_count(), "probe_error": f"{type(exc).__name__}: {exc}"}


def environment_record() -> dict:
    """Which Python environment runs the book and why (helpers.book.environment); never fails the run."""
    try:
        return environment.record()
    except Exception as exc:  # noqa: BLE001 - say why instead of stopping the run
        return {"kind": "unknown", "reason": f"the environment could not be read ({type(exc).__name__}: {exc})"}


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def write_manifest(run_dir: Path, manifest: "Manifest | dict") -> None:
    """Write manifest.json atomically: a temporary file in the same folder, flushed to disk, then renamed
    over the old one (a reader, or a crash, never sees half a file)."""
    from helpers.core import results

    run_dir = Path(run_dir)
    tmp = run_dir / f".manifest.json.{os.getpid()}.tmp"
    data = json.dumps(manifest.to_dict() if isinstance(manifest, Manifest) else manifest, indent=2, default=str)
    try:
        with os.fdopen(results.open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, run_dir / "manifest.json")
    except results.WriteError:
        raise
    except OSError as e:   # the last good manifest stays in place, whole
        raise results.write_error(run_dir / "manifest.json", e,
                                  "could not be written (its last good state is kept)") from None
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass
    try:
        fd = os.open(run_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


@dataclass
class Manifest:
    """A run's manifest.json, typed: what the runbook writes when a run starts (new_manifest) and adds as it
    goes. Required: run_id, target, chapters (one dict per chapter: stem, docname, status in STATUSES,
    duration_s, parameters, ...). The others are optional, because older runs lack some of them (environment,
    plan and sessions came later; duration_s is written when a run ends; replayed and gpu_tier by replay and
    gputier). A key the class does not know, or a value of the wrong type, is refused naming the file."""

    run_id: str
    target: str
    chapters: list
    target_description: str | None = None
    started: str | None = None
    finished: str | None = None
    status: str | None = None
    hardware: dict | None = None
    versions: dict | None = None
    environment: dict | None = None
    plan: dict | None = None
    sessions: list | None = None
    duration_s: float | None = None
    session_duration_s: float | None = None
    replayed: dict | None = None
    gpu_tier: dict | None = None

    #: written even where None (a running run has "finished": null); the other optional keys only when set
    ALWAYS = ("run_id", "target", "target_description", "started", "finished", "status", "hardware", "versions",
              "chapters")

    @classmethod
    def from_dict(cls, m, where: Path | str) -> "Manifest":
        """The manifest a mapping read from `where` holds; refused (RunbookError naming `where`) where keys
        are missing or unknown or a value has the wrong type."""
        bad = _manifest_problems(m)
        if bad:
            raise RunbookError(f"{where}: not a valid run manifest: " + "; ".join(bad[:5]))
        return cls(**m)

    @classmethod
    def load(cls, run_dir: Path) -> "Manifest":
        """`run_dir`'s manifest.json, checked (read_manifest's refusals)."""
        return cls.from_dict(_read_json(run_dir), Path(run_dir) / "manifest.json")

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name in self.ALWAYS or getattr(self, f.name) is not None}

    def save(self, run_dir: Path) -> None:
        """Write it as `run_dir`/manifest.json, atomically (write_manifest)."""
        write_manifest(run_dir, self.to_dict())


_TYPES = {"str": str, "list": list, "dict": dict, "float": (int, float)}


def _manifest_problems(m) -> list[str]:
    """What in a mapping read from manifest.json departs from Manifest (an empty list: nothing)."""
    if not isinstance(m, dict):
        return [f"the top level is a {type(m).__name__}, not a mapping"]
    known = {f.name: f for f in fields(Manifest)}
    bad = [f"unknown key `{k}` (a manifest holds {', '.join(known)})" for k in m if k not in known]
    for k, f in known.items():
        kind = str(f.type).split(" ")[0]           # "str | None" -> str
        if k in ("run_id", "target", "chapters") and k not in m:
            bad.append(f"`{k}` should be a {kind}, got nothing (the key is missing)")
        elif k in m and not isinstance(m[k], _TYPES[kind]) and not (m[k] is None and f.default is None):
            bad.append(f"`{k}` should be a {kind}, got {m[k]!r:.60}")
    for i, c in enumerate(m["chapters"] if isinstance(m.get("chapters"), list) else []):
        if not isinstance(c, dict) or not isinstance(c.get("stem"), str) or not isinstance(c.get("docname"), str):
            bad.append(f"chapter entry {i} lacks its stem or docname: {str(c)[:80]}")
        elif c.get("status") not in STATUSES:
            bad.append(f"chapter {c['stem']}: status {c.get('status')!r} is not one of {STATUSES}")
        elif not isinstance(c.get("duration_s", 0), (int, float)):
            bad.append(f"chapter {c['stem']}: duration_s {c.get('duration_s')!r} is not a number")
    return bad


def _read_json(run_dir: Path):
    path = Path(run_dir) / "manifest.json"
    if not Path(run_dir).is_dir():
        raise RunbookError(f"{run_dir} is not a run directory (no such folder); runs are made by "
                           f"`python -m helpers.book.runbook --target NAME` and live in runs/")
    if not path.exists():
        raise RunbookError(f"{run_dir} is not a run directory (no manifest.json); "
                           f"runs are made by `python -m helpers.book.runbook --target NAME`")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise RunbookError(f"{path}: not a readable run manifest ({type(e).__name__}: {e}); it may have been cut "
                           f"short or edited by hand: restore it from the run's copy, or make the run again") from None


def read_manifest(run_dir: Path) -> dict:
    """A run's manifest as a plain mapping, checked as Manifest.load checks it: a missing, unreadable or
    malformed one (unknown or missing keys, wrong types) is refused naming the file. Readers move to
    Manifest.load; this stays for those that still read by key."""
    return Manifest.load(run_dir).to_dict()


def point_latest(runs_dir: Path, run_dir: Path) -> None:
    link = runs_dir / "latest"
    if link.is_symlink():
        link.unlink()
    elif link.exists():
        raise RunbookError(f"{link} is a real folder or file, not the link the runbook keeps to the newest run; "
                           f"rename it (a run id cannot be 'latest')")
    link.symlink_to(run_dir.name)


def new_manifest(target: Target, run_dir: Path, root: Path, steps: list[dict], only: list[str] | None) -> Manifest:
    """The manifest of a run about to start: every chapter listed, pending or skipped."""
    recs = []
    for st in steps:
        rec = {"docname": st["docname"], "stem": st["stem"], "parameters": dict(st["parameters"]),
               "parameter_origins": dict(st.get("origins") or {}),
               "status": "skipped" if st["skip"] else "pending", "duration_s": 0.0, "started": None,
               "finished": None, "error": None}
        if st["skip"]:
            rec["error"] = {"ename": "Skipped", "evalue": "not selected for this run"
                            if only is not None and st["stem"] not in only else f"skipped by target {target.name!r}"}
        recs.append(rec)
    return Manifest(run_id=run_dir.name, target=target.name, target_description=target.description,
                    started=utc_now(), finished=None, status="running", hardware=fingerprint(),
                    versions=versions(root), environment=environment_record(),
                    plan={**target.as_plan(), "only": only}, sessions=[], chapters=recs)


def check_writable_dir(folder: Path, what: str) -> None:
    """Refuse, in one line, a folder the run cannot write: a file, under a file, read-only or not permitted.
    A folder not there yet is tried in its nearest existing parent (it will be made there)."""
    import tempfile

    from helpers.core import results

    folder = Path(folder)
    longest = max((len(os.fsencode(part)) for part in folder.parts), default=0)
    if longest > 255 or len(os.fsencode(str(folder))) > 4095:
        raise RunbookError(f"{what} {short(str(folder))}: a path of {len(str(folder))} characters, with a name of "
                           f"{longest} bytes in it, is longer than a file system allows (names up to 255 bytes, "
                           f"paths up to 4095); give a shorter folder")
    probe = folder
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        where = "is a file" if probe == folder else f"is under {probe}, which is a file"
        raise RunbookError(f"{what} {folder} {where}, not a folder; give a folder (or remove that file)")
    try:
        fd, name = tempfile.mkstemp(prefix=".runbook-probe-", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        why, fix = results.cause(e)
        raise RunbookError(f"{what} {folder} cannot be written ({probe}: {why}); {fix}") from None


def run_dir_arg(text: str, runs_dir: Path, what: str) -> Path:
    def exists(path: Path) -> bool:
        try:
            return path.exists()
        except OSError:     # a name longer than the file system allows: not a run folder
            return False

    p = Path(text)
    if "/" not in text and RUN_ID.fullmatch(text) and exists(runs_dir / text):
        p = runs_dir / text   # a run id names the run in runs_dir, before a folder of that name here (issue 47)
    elif not p.is_absolute():
        p = Path.cwd() / p
    if not exists(p):
        raise RunbookError(f"{what} {short(text)}: no such run folder (looked for {short(str(p))}); runs live in "
                           f"{runs_dir}")
    return p.resolve()
