"""Execute the book's chapters on this machine with papermill, record the run, build the site.

    python -m helpers.book.runbook                      # target `auto`: measure what this machine can
    python -m helpers.book.runbook --target recorded    # the recorded investigation only
    python -m helpers.book.runbook --render runs/ID     # re-render an existing run, measuring nothing

    python -m helpers.book.runbook --resume runs/ID     # continue an interrupted run

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
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from helpers import __version__, repo_root
from helpers.core import layout, procs
from helpers.book import environment, precheck
from helpers.core.params import short
from helpers.core.results import CELL_TIMEOUT_ENV

TARGETS_DIR = "targets"
_TARGET_KEYS = {"description", "parameters", "chapters", "skip", "execution_timeout", "requires"}
ALWAYS = ("run_dir",)  # parameters the runbook itself sets
#: a chapter's status in the manifest
STATUSES = ("pending", "running", "ok", "partial", "failed", "interrupted", "skipped")
#: run ids are plain names: a letter or digit, then letters, digits, '.', '_', '-' (no path, not 'latest')
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
RESERVED_RUN_IDS = ("latest",)
MAX_EXECUTION_TIMEOUT_S = 7 * 24 * 3600
#: a target file is a page of settings (the largest in targets/ is about 3 KiB); more is refused unread
MAX_TARGET_BYTES = 256 * 1024


class RunbookError(RuntimeError):
    """A problem with the runbook's inputs (target, chapters, run directory)."""


class RunInterrupted(KeyboardInterrupt):
    """The run was asked to stop (SIGTERM, SIGHUP): handled like Ctrl-C."""


# ----------------------------------------------------------------------------- table of contents
def toc_entries(root: Path | None = None) -> list[str]:
    """The docnames of _toc.yml in reading order (root first), e.g. 'notebooks/01_environment'."""
    root = root or repo_root()
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    out = [toc["root"]]

    def walk(items):
        for it in items or []:
            if "file" in it:
                out.append(it["file"])
            walk(it.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return out


def chapters(root: Path | None = None) -> list[str]:
    """Notebook docnames in _toc.yml order (the chapters the runbook executes)."""
    root = root or repo_root()
    return [d for d in toc_entries(root) if (root / f"{d}.ipynb").exists()]


def stem(docname: str) -> str:
    return docname.rsplit("/", 1)[-1]


def declared_parameters(nb_path: Path) -> dict:
    """The parameters a notebook declares in its `parameters` cell (name -> papermill's info)."""
    import papermill

    return papermill.inspect_notebook(str(nb_path))


# ----------------------------------------------------------------------------- targets
class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that holds one key twice (plain YAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:   # an unhashable key: the base constructor says so
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key!r} appears twice, at line {first + 1} and at line "
                        f"{key_node.start_mark.line + 1} (YAML would keep the second silently); keep one",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def load_yaml(text: str):
    """YAML text as Python values, refusing duplicate keys (naming both lines)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def known_targets(root: Path | None = None) -> list[str]:
    root = root or repo_root()
    return sorted(p.stem for p in (root / TARGETS_DIR).glob("*.yaml"))


@dataclass
class Target:
    name: str
    description: str
    parameters: dict = field(default_factory=dict)
    chapters: dict = field(default_factory=dict)
    skip: list = field(default_factory=list)
    execution_timeout: int = 900
    requires: dict = field(default_factory=dict)  # see unmet_requirements
    path: str = ""                                  # the file it was read from
    origins: dict = field(default_factory=dict)     # (chapter or "", parameter) -> where the value came from
    overrides: list = field(default_factory=list)   # the -p items applied
    cli: list = field(default_factory=list)         # [(chapter or "", parameter)] given with -p, in order

    def origin(self, chapter: str, name: str) -> str:
        return self.origins.get((chapter, name)) or self.origins.get(("", name)) or self.path or "the target"

    def step_origin(self, chapter: str, name: str) -> str:
        """Where the value `chapter` receives for `name` comes from, the command line first (it wins)."""
        if (chapter, name) in self.cli or ("", name) in self.cli:
            return self.origins.get((chapter, name)) if (chapter, name) in self.cli else self.origins[("", name)]
        return self.origin(chapter, name)

    def as_plan(self) -> dict:
        """What the manifest records, so that --resume runs the same plan."""
        return {"target": self.name, "target_file": self.path, "description": self.description,
                "parameters": self.parameters, "chapters": self.chapters, "skip": self.skip,
                "execution_timeout": self.execution_timeout, "requires": self.requires,
                "overrides": self.overrides, "cli": [list(x) for x in self.cli],
                "origins": [[c, n, w] for (c, n), w in self.origins.items()]}

    @classmethod
    def from_plan(cls, p: dict) -> "Target":
        t = cls(p["target"], p.get("description", ""), dict(p.get("parameters") or {}),
                {k: dict(v or {}) for k, v in (p.get("chapters") or {}).items()}, list(p.get("skip") or []),
                int(p.get("execution_timeout", 900)), dict(p.get("requires") or {}), p.get("target_file", ""),
                {(c, n): w for c, n, w in p.get("origins") or []}, list(p.get("overrides") or []),
                [tuple(x) for x in p.get("cli") or []])
        return t


def target_path(name: str, root: Path | None = None) -> Path:
    """targets/<name>.yaml for a plain name; a path (it holds '/' or ends in .yaml/.yml) as given."""
    root = root or repo_root()
    if "/" in name or name.endswith((".yaml", ".yml")) or name in (".", ".."):
        p = Path(name)
        return p if p.is_absolute() else Path.cwd() / p
    return root / TARGETS_DIR / f"{name}.yaml"


def load_target(name: str, root: Path | None = None) -> Target:
    """Read a target (targets/<name>.yaml, or a YAML file by path); refuse, with one message naming the
    file, a missing file or a directory, YAML that does not parse, a top level that is not a mapping,
    unknown keys, and keys of the wrong type."""
    root = root or repo_root()
    if not isinstance(name, str) or not name.strip():
        raise RunbookError(f"--target {name!r}: give a target name ({', '.join(known_targets(root))}) or a YAML file")
    path = target_path(name, root)
    known = known_targets(root)
    if path.is_dir():
        raise RunbookError(f"target {name!r}: {path} is a directory; a target is a YAML file "
                           f"({TARGETS_DIR}/<name>.yaml); known targets: {', '.join(known)}")
    if not path.exists():
        raise RunbookError(f"unknown target {name!r}; known targets: {', '.join(known)} "
                           f"(each is a file {TARGETS_DIR}/<name>.yaml, or give the path of a YAML file)")
    try:
        size = path.stat().st_size
        if size > MAX_TARGET_BYTES:
            raise RunbookError(f"{path}: {size / 1024:.0f} KiB is too large for a target (at most "
                               f"{MAX_TARGET_BYTES // 1024} KiB: a target is a page of settings, like the files in "
                               f"{TARGETS_DIR}/); give the right file")
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise RunbookError(f"{path}: cannot be read as text ({e})") from None
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as e:
        where = ""
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        raise RunbookError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', None) or e}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RunbookError(f"{path}: a target is a mapping with the keys {sorted(_TARGET_KEYS)}; this file's top "
                           f"level is a {type(raw).__name__} ({str(raw)[:60]!r})")
    bad = []
    extra = set(map(str, raw)) - _TARGET_KEYS
    if extra:
        bad.append(f"unknown key(s) {sorted(extra)}; allowed: {sorted(_TARGET_KEYS)}")
    desc = raw.get("description")
    if not isinstance(desc, str) or not desc.strip():
        bad.append(f"needs a `description` (a sentence saying what the target runs); got {short(desc)}")
    params = raw.get("parameters")
    if params is None:
        params = {}
    elif not isinstance(params, dict):
        bad.append(f"`parameters` must be a mapping NAME: VALUE (applied to every chapter that declares NAME); "
                   f"got a {type(params).__name__}: {str(params)[:60]}")
        params = {}
    chap = raw.get("chapters")
    if chap is None:
        chap = {}
    elif not isinstance(chap, dict):
        bad.append(f"`chapters` must be a mapping CHAPTER: {{NAME: VALUE}} (per-chapter overrides, by notebook "
                   f"stem); got a {type(chap).__name__}: {str(chap)[:60]}")
        chap = {}
    else:
        for k, v in list(chap.items()):
            if v is None:
                chap[k] = {}
            elif not isinstance(v, dict):
                bad.append(f"`chapters: {k}:` must be a mapping NAME: VALUE; got a {type(v).__name__}: {str(v)[:60]}")
                chap[k] = {}
    skip = raw.get("skip")
    if skip is None:
        skip = []
    elif isinstance(skip, str) or not isinstance(skip, list) or not all(isinstance(x, str) for x in skip):
        bad.append(f"`skip` must be a list of chapter stems, e.g. `skip: [06_vm_p2p]`; got {short(skip)}"
                   + (" (a string, which would be read letter by letter)" if isinstance(skip, str) else ""))
        skip = []
    timeout = raw.get("execution_timeout", 900)
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout)
            or timeout < 1 or timeout > MAX_EXECUTION_TIMEOUT_S or float(timeout) != int(timeout)):
        bad.append(f"`execution_timeout` must be a whole number of seconds from 1 to {MAX_EXECUTION_TIMEOUT_S} "
                   f"(the time limit of one notebook cell); got {short(timeout)}"
                   + (" (0 would remove the time limit)" if timeout == 0 and not isinstance(timeout, bool) else ""))
        timeout = 900
    try:
        requires = _requires(path, raw.get("requires"))
    except RunbookError as e:
        bad.append(str(e).split(": ", 1)[1])
        requires = {}
    if bad:
        raise RunbookError("\n".join(f"{path}: {b}" for b in bad))
    try:
        shown = str(path.relative_to(root))
    except ValueError:
        shown = str(path)
    is_path = "/" in name or name.endswith((".yaml", ".yml"))
    return Target(path.stem if is_path else name, desc, dict(params),
                  {str(k): dict(v) for k, v in chap.items()}, list(skip), int(timeout), requires, shown)


def parse_chapters(text: str | None, root: Path | None = None) -> list[str] | None:
    """--chapters: comma-separated chapter stems (None: every chapter). An empty selection is refused."""
    if text is None:
        return None
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        stems = [stem(d) for d in chapters(root)]
        raise RunbookError(f"--chapters {text!r} names no chapter; give comma-separated chapter stems, e.g. "
                           f"--chapters {stems[0]},{stems[-1]} (chapters: {', '.join(stems)})")
    return list(dict.fromkeys(names))


def check_run_id(run_id: str) -> str:
    """A run id is a plain folder name under runs/ (no '/', no '..', not 'latest')."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id) or run_id in RESERVED_RUN_IDS or ".." in run_id:
        raise RunbookError(f"--run-id {run_id!r}: a run id is a plain name of letters, digits, '.', '_' and '-' "
                           f"(starting with a letter or digit, no '/' or '..', at most 128 characters, and not "
                           f"{' or '.join(RESERVED_RUN_IDS)!r}, which the runbook keeps for the newest run), "
                           f"e.g. 20261201-h200-mine")
    return run_id


def plan(target: Target, root: Path | None = None, only: list[str] | None = None,
         run_dir: Path | None = None, check_values: bool = True) -> list[dict]:
    """Per chapter: docname, notebook path, parameters to inject (validated against what the
    chapter declares and checks), and whether it is skipped. Refuses a selection whose chapters need
    results (helpers.core.layout.NEEDS) that no earlier selected chapter produces and `run_dir` does
    not hold. Every problem is one line of the RunbookError."""
    root = root or repo_root()
    docs = chapters(root)
    stems = [stem(d) for d in docs]
    problems = []
    for where, names in ((f"{target.path or target.name}: `chapters`", list(target.chapters)),
                         (f"{target.path or target.name}: `skip`", list(target.skip)),
                         ("--chapters", list(only or []))):
        for s in names:
            if s not in stems:
                origin = where
                if where.endswith("`chapters`") and any(c == s for c, _ in target.origins):
                    origin = next(w for (c, _), w in target.origins.items() if c == s)
                problems.append(f"{origin} names chapter {s!r}, which is not a notebook in _toc.yml; "
                                f"chapters: {', '.join(stems)}")
    if problems:
        raise RunbookError("\n".join(problems))
    used_globals: set[str] = set()
    steps = []
    for doc in docs:
        nb = root / f"{doc}.ipynb"
        declared = declared_parameters(nb)
        s = stem(doc)
        params = {k: v for k, v in target.parameters.items() if k in declared}
        used_globals |= set(params)
        override = target.chapters.get(s) or {}
        bad = [k for k in override if k not in declared]
        for k in bad:
            problems.append(f"{target.origin(s, k)}: chapter {s} does not declare parameter {k!r}; it declares: "
                            f"{', '.join(declared) or 'none'}")
        params.update({k: v for k, v in override.items() if k in declared})
        # the command line wins over the target, also over the target's value for this chapter
        # (-p NAME=VALUE over `chapters: CHAPTER: NAME`), and -p CHAPTER.NAME over -p NAME
        for c, k in sorted(target.cli, key=lambda x: x[0] != ""):
            if k in declared and c == "":
                params[k] = target.parameters[k]
            elif k in declared and c == s:
                params[k] = target.chapters[s][k]
        skipped = s in target.skip or (only is not None and s not in only)
        steps.append({"docname": doc, "stem": s, "notebook": nb, "parameters": params,
                      "declared": list(declared), "skip": skipped,
                      "origins": {k: target.step_origin(s, k) for k in params}})
    unused = set(target.parameters) - used_globals
    for k in sorted(unused):
        problems.append(f"{target.origin('', k)}: parameter {k!r} is declared by no chapter")
    if check_values:
        for st in steps:
            if st["skip"]:
                continue
            try:
                problems += precheck.problems(st["stem"], st["notebook"], st["parameters"],
                                              st["origins"], ALWAYS)
            except precheck.PrecheckError as e:
                problems.append(str(e))
    if problems:
        raise RunbookError("\n".join(problems))
    unmet = unmet_requirements(target, steps)
    if unmet:
        raise RunbookError(f"target {target.name!r} cannot run here:\n  - " + "\n  - ".join(unmet))
    selected = [st["stem"] for st in steps if not st["skip"]]
    needs = layout.check_needs(selected, run_dir, {st["stem"]: st["parameters"].get("mode") for st in steps})
    if needs:
        raise RunbookError("\n".join(needs))
    return steps


_REQUIRE_KEYS = ("parameters", "paths", "packages")


def _requires(path: Path, raw) -> dict:
    """A target's `requires` as {kind: {name: what it is}}; a list gives names without a description."""
    if not raw:
        return {}
    if not isinstance(raw, dict) or set(raw) - set(_REQUIRE_KEYS):
        raise RunbookError(f"{path}: `requires` takes the keys {', '.join(_REQUIRE_KEYS)}, each a list of names "
                           f"or a mapping name -> what it is; got {short(raw)}")
    return {k: ({str(n): "" for n in v} if isinstance(v, list) else {str(n): str(d or "") for n, d in v.items()})
            for k, v in raw.items() if v}


def unmet_requirements(target: Target, steps: list[dict]) -> list[str]:
    """What a target's `requires` asks for and this plan lacks, one sentence each (empty: all met).

    `parameters` must be set (not empty) and `paths` must exist on this machine, in every chapter that
    declares them and will run live (selected, its mode not "recorded"); `packages` must be importable
    by this Python (the one that runs the kernels) where any such chapter runs, or, if the target names
    no parameters, where any selected chapter runs other than recorded. Chapters skipped or recorded need
    nothing, so `--chapters` or `-p CHAPTER.mode=recorded` narrow what is required."""
    req = target.requires or {}
    if not req:
        return []
    running = [st for st in steps if not st["skip"] and st["parameters"].get("mode") != "recorded"]
    names = set(req.get("parameters", {})) | set(req.get("paths", {}))
    users = [st for st in running if names & set(st["declared"])] if names else running
    how = (f"Set it with `-p NAME=...` (make: PARAMS=NAME=...), or copy {TARGETS_DIR}/{target.name}.yaml to "
           f"{TARGETS_DIR}/<yours>.yaml and set it under `parameters`")

    def need(stems):
        return f"{stems[0]} needs it" if len(stems) == 1 else f"{', '.join(stems[:-1])} and {stems[-1]} need it"

    out = []
    for kind in ("parameters", "paths"):
        for name, what in req.get(kind, {}).items():
            values = {st["stem"]: st["parameters"].get(name) for st in users if name in st["declared"]}
            label = f"`{name}`" + (f" ({what})" if what else "")
            unset = [s for s, v in values.items() if v in (None, "", [], {})]
            missing = [s for s, v in values.items() if s not in unset and kind == "paths"
                       and not Path(str(v)).expanduser().exists()]
            if unset:
                out.append(f"{label} is not set; {need(unset)}. " + how.replace("NAME", name))
            elif missing:
                out.append(f"{label} = {values[missing[0]]!r} does not exist on this machine; {need(missing)}. "
                           + how.replace("NAME", name))
    if users:
        import importlib.util

        for pkg, what in req.get("packages", {}).items():
            if importlib.util.find_spec(pkg) is None:
                out.append(f"the Python package `{pkg}`" + (f" ({what})" if what else "") + " is not importable by "
                           f"{sys.executable}, which runs the chapters; {need([st['stem'] for st in users])}. Install "
                           "it there, or run the book with a Python that has it (make: PY=/path/to/that/python; "
                           "see appendix/rerun.md)")
    if out:
        out.append("Chapters left out (--chapters) or set to recorded (-p CHAPTER.mode=recorded) need none of this")
    return out


def _item(text: str, chars: int = 80) -> str:
    """A -p item as a message shows it: a long one cut, saying how long it was."""
    return text if len(text) <= chars else f"{text[:chars]}... ({len(text)} characters)"


def apply_overrides(target: Target, items: list[str]) -> None:
    """`-p NAME=VALUE` (every chapter that declares NAME) or `-p CHAPTER.NAME=VALUE` (one chapter);
    VALUE is read as YAML (`-p tolerance=0.3`, `-p concurrencies=[1,4]`). The command line wins: a value given
    here replaces the target's, its per-chapter values included, and `-p CHAPTER.NAME` wins over `-p NAME`;
    `plan` checks every value that a chapter will receive, whoever gave it."""
    bad = []
    for item in items or []:
        key, sep, value = item.partition("=")
        chapter, dot, name = key.strip().rpartition(".")
        if not sep or not name.strip() or (dot and not chapter.strip()):
            bad.append(f"-p {short(item)}: expected NAME=VALUE or CHAPTER.NAME=VALUE (e.g. -p tolerance=0.3 or "
                       f"-p 06_vm_p2p.sweep=full)")
            continue
        try:
            val = load_yaml(value)
        except yaml.YAMLError as exc:
            bad.append(f"-p {short(item)}: the value is not valid YAML ({str(exc).splitlines()[0]})")
            continue
        if dot:
            target.chapters.setdefault(chapter, {})[name] = val
            target.origins[(chapter, name)] = f"the command line (-p {_item(item)})"
        else:
            target.parameters[name] = val
            target.origins[("", name)] = f"the command line (-p {_item(item)})"
        key = (chapter if dot else "", name)
        if key in target.cli:
            target.cli.remove(key)
        target.cli.append(key)
        target.overrides.append(item)
    if bad:
        raise RunbookError("\n".join(bad))


# ----------------------------------------------------------------------------- run record
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


def commit_provenance(manifest: dict) -> tuple[str, bool]:
    """(what the status page says of the commit a run was made from, whether it is a recorded clean
    commit). Only a commit read from git with no modified tracked file counts as clean; a commit the
    sender named (BOOK_COMMIT, unverified), a modified tree or none at all is said to be so."""
    commit = str((manifest.get("versions") or {}).get("book_commit") or "")
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


def _environment_record() -> dict:
    """Which Python environment runs the book and why (helpers.book.environment); never fails the run."""
    try:
        return environment.record()
    except Exception as exc:  # noqa: BLE001 - say why instead of stopping the run
        return {"kind": "unknown", "reason": f"the environment could not be read ({type(exc).__name__}: {exc})"}


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def write_manifest(run_dir: Path, manifest: dict) -> None:
    """Write manifest.json atomically: a temporary file in the same folder, flushed to disk, then renamed
    over the old one (a reader, or a crash, never sees half a file)."""
    from helpers.core import results

    run_dir = Path(run_dir)
    tmp = run_dir / f".manifest.json.{os.getpid()}.tmp"
    data = json.dumps(manifest, indent=2, default=str)
    try:
        with open(tmp, "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, run_dir / "manifest.json")
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


def read_manifest(run_dir: Path) -> dict:
    """A run's manifest, checked: a missing, unreadable or malformed one is refused naming the file."""
    path = Path(run_dir) / "manifest.json"
    if not Path(run_dir).is_dir():
        raise RunbookError(f"{run_dir} is not a run directory (no such folder); runs are made by "
                           f"`python -m helpers.book.runbook --target NAME` and live in runs/")
    if not path.exists():
        raise RunbookError(f"{run_dir} is not a run directory (no manifest.json); "
                           f"runs are made by `python -m helpers.book.runbook --target NAME`")
    try:
        m = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise RunbookError(f"{path}: not a readable run manifest ({type(e).__name__}: {e}); it may have been cut "
                           f"short or edited by hand: restore it from the run's copy, or make the run again") from None
    bad = []
    if not isinstance(m, dict):
        bad.append(f"the top level is a {type(m).__name__}, not a mapping")
    else:
        for k, t in (("run_id", str), ("target", str), ("chapters", list)):
            if not isinstance(m.get(k), t):
                bad.append(f"`{k}` should be a {t.__name__}, got {m.get(k)!r:.60}")
        for i, c in enumerate(m.get("chapters") or [] if isinstance(m.get("chapters"), list) else []):
            if not isinstance(c, dict) or not isinstance(c.get("stem"), str) or not isinstance(c.get("docname"), str):
                bad.append(f"chapter entry {i} lacks its stem or docname: {str(c)[:80]}")
            elif c.get("status") not in STATUSES:
                bad.append(f"chapter {c['stem']}: status {c.get('status')!r} is not one of {STATUSES}")
            elif not isinstance(c.get("duration_s", 0), (int, float)):
                bad.append(f"chapter {c['stem']}: duration_s {c.get('duration_s')!r} is not a number")
    if bad:
        raise RunbookError(f"{path}: not a valid run manifest: " + "; ".join(bad[:5]))
    return m


def _point_latest(runs_dir: Path, run_dir: Path) -> None:
    link = runs_dir / "latest"
    if link.is_symlink():
        link.unlink()
    elif link.exists():
        raise RunbookError(f"{link} is a real folder or file, not the link the runbook keeps to the newest run; "
                           f"rename it (a run id cannot be 'latest')")
    link.symlink_to(run_dir.name)


# ----------------------------------------------------------------------------- one process per run
LOCK_NAME = ".runbook.lock"


class RunLock:
    """One runbook process per run folder: `<run>/.runbook.lock` holds the owner's pid, host, start time and
    command line, under an exclusive flock that the kernel releases when the owner dies however it dies
    (kill -9 included). A second process is refused at once, naming the owner; a lock file whose owner is
    gone (its flock free) is stale and is taken over, with a message. Released (removed) at exit."""

    def __init__(self, run_dir: Path, echo=None):
        self.path = Path(run_dir) / LOCK_NAME
        self.fd: int | None = None
        self.echo = echo or (lambda m: print(m, file=sys.stderr))
        self.took_over: dict | None = None

    @staticmethod
    def _read(fd: int) -> dict:
        try:
            data = os.pread(fd, 65536, 0)
            owner = json.loads(data) if data.strip() else {}
            return owner if isinstance(owner, dict) else {}
        except (OSError, ValueError):
            return {}

    def acquire(self) -> "RunLock":
        import fcntl

        from helpers.core import results

        for _ in range(20):   # the file can be removed by its releasing owner between open and flock: retry
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise RunbookError(str(results.write_error(self.path, e, "(the run's lock) could not be made"))) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = self._read(fd)
                os.close(fd)
                run = self.path.parent
                raise RunbookError(
                    f"run {run} is in use by another runbook process: pid {owner.get('pid', '?')} on host "
                    f"{owner.get('host', '?')}, since {owner.get('started', '?')} ({owner.get('command', '?')}). "
                    f"Two processes in one run would measure every point twice, each under the other's load. "
                    f"Wait for it to finish, or stop it (kill {owner.get('pid', 'PID')}) and continue with "
                    f"--resume {run}") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            old = self._read(fd)
            if old:
                self.took_over = old
                self.echo(f"note: took over the stale lock of run {self.path.parent.name}: its owner, pid "
                          f"{old.get('pid', '?')} on host {old.get('host', '?')} (since {old.get('started', '?')}), "
                          f"is no longer running")
            me = {"pid": os.getpid(), "host": socket.gethostname(), "started": _now(),
                  "command": " ".join(["python -m helpers.book.runbook", *sys.argv[1:]])[:300]}
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(me).encode() + b"\n", 0)
                os.fsync(fd)
            except OSError as e:
                os.close(fd)
                raise RunbookError(str(results.write_error(self.path, e, "(the run's lock) could not be written"))) from None
            self.fd = fd
            return self
        raise RunbookError(f"{self.path}: could not take the run's lock (the file kept changing); try again")

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False


# ----------------------------------------------------------------------------- execution
class _stderr_to:
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

def new_manifest(target: Target, run_dir: Path, root: Path, steps: list[dict], only: list[str] | None) -> dict:
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
    return {"run_id": run_dir.name, "target": target.name, "target_description": target.description,
            "started": _now(), "finished": None, "status": "running", "hardware": fingerprint(),
            "versions": versions(root), "environment": _environment_record(),
            "plan": {**target.as_plan(), "only": only}, "sessions": [],
            "chapters": recs}


def execute(target: Target, run_dir: Path, root: Path, only: list[str] | None = None,
            echo=print, manifest: dict | None = None) -> dict:
    """Execute every chapter of the plan into run_dir; return the manifest. With `manifest` (a run being
    resumed), chapters already ok or skipped are kept and the others run again."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    steps = plan(target, root, only, run_dir=run_dir)
    (run_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    resuming = manifest is not None
    if manifest is None:
        manifest = new_manifest(target, run_dir, root, steps, only)
    recs = {c["stem"]: c for c in manifest["chapters"]}
    for st in steps:   # chapters added to the book since the run started: listed, to run
        if st["stem"] not in recs:
            recs[st["stem"]] = {"docname": st["docname"], "stem": st["stem"], "parameters": dict(st["parameters"]),
                                "status": "skipped" if st["skip"] else "pending", "duration_s": 0.0,
                                "started": None, "finished": None, "error": None}
            manifest["chapters"].append(recs[st["stem"]])
    manifest["status"] = "running"
    manifest["finished"] = None
    session = {"started": _now(), "finished": None, "pid": os.getpid(), "resumed": resuming, "ran": []}
    manifest.setdefault("sessions", []).append(session)
    failed_writes = []

    def save():
        try:
            write_manifest(run_dir, manifest)
        except OSError as e:   # keep going: the next write may succeed; the last one must
            failed_writes.append(str(e))
            print(f"warning: {e}; the run goes on", file=sys.stderr)

    save()
    n = len(steps)
    t_run = time.perf_counter()
    for i, step in enumerate(steps, 1):
        rec = recs[step["stem"]]
        label = f"[{i:>2}/{n}] {step['stem']:<24}"
        if rec["status"] == "skipped" or step["skip"]:
            echo(f"{label} skipped")
            continue
        if resuming and rec["status"] == "ok":
            echo(f"{label} ok (kept from before)")
            continue
        params = dict(step["parameters"])
        if "run_dir" in step["declared"]:
            params["run_dir"] = str(run_dir.resolve())
        out_nb = run_dir / "notebooks" / f"{step['stem']}.ipynb"
        rec.update(parameters=params, parameter_origins=dict(step.get("origins") or {}), status="running", started=_now(), finished=None, error=None,
                   runs=rec.get("runs", 0) + 1)
        session["ran"].append(step["stem"])
        save()
        if echo is print:  # show the chapter while it runs; its result completes the line
            print(label, end=" ", flush=True)
            label = ""
        t0 = time.perf_counter()
        from helpers.core import results

        chapter_results = run_dir / "results" / step["stem"]
        (chapter_results / f"{results.PARTIAL}.json").unlink(missing_ok=True)   # said by an earlier session
        os.environ[CELL_TIMEOUT_ENV] = str(target.execution_timeout)   # the kernel's sweeps keep within it
        try:
            with open(run_dir / "logs" / f"{step['stem']}.log", "a") as log, _stderr_to(log):
                log.write(f"=== {_now()}: {'resumed' if rec['runs'] > 1 else 'started'} by runbook "
                          f"pid {os.getpid()} ===\n")
                log.flush()
                # the kernel process inherits fd 2: its own warnings land in the chapter's log
                papermill.execute_notebook(
                    str(step["notebook"]), str(out_nb), parameters=params, kernel_name="python3",
                    progress_bar=False, log_output=False, stdout_file=log, stderr_file=log,
                    execution_timeout=target.execution_timeout, cwd=str(root),
                )
            rec["status"] = "ok"
            short = results.partial_reasons(chapter_results)
            if short:   # it ran whole, but stopped short of its plan on purpose: what is left is for --resume
                rec["status"] = "partial"
                rec["error"] = {"ename": "Partial", "evalue": "; ".join(short)[:1800] + f". Resume with "
                                f"`python -m helpers.book.runbook --resume {run_dir}` (or raise the target's "
                                f"execution_timeout)"}
        except PapermillExecutionError as exc:
            rec["status"] = "failed"
            rec["error"] = {"ename": exc.ename, "evalue": str(exc.evalue)[:2000],
                            "cell_index": exc.cell_index,
                            "traceback": "\n".join(exc.traceback)[-6000:] if exc.traceback else ""}
        except KeyboardInterrupt as exc:
            why = str(exc) or "Ctrl-C"
            rec["status"] = "interrupted"
            rec["error"] = {"ename": type(exc).__name__,
                            "evalue": f"the run was interrupted here ({why}); continue it with "
                                      f"`python -m helpers.book.runbook --resume {run_dir}`"}
            rec["duration_s"] = round(time.perf_counter() - t0, 2)
            rec["finished"] = _now()
            manifest["status"] = "interrupted"
            manifest["finished"] = _now()
            session["finished"] = _now()
            _end_children()
            save()
            raise
        except Exception as exc:  # noqa: BLE001 - a chapter's failure must not stop the others
            from helpers.core import results

            if isinstance(exc, OSError) and not isinstance(exc, results.WriteError):   # name the file and the cause
                exc = results.write_error(exc.filename or out_nb, exc, "could not be written or read")
            rec["status"] = "failed"
            rec["error"] = {"ename": type(exc).__name__, "evalue": str(exc)[:2000],
                            "traceback": traceback.format_exc()[-6000:]}
        rec["duration_s"] = round(time.perf_counter() - t0, 2)
        rec["finished"] = _now()
        msg = f"{label}{' ' if label else ''}{rec['status']:<7} {rec['duration_s']:6.1f} s"
        if rec["error"]:
            msg += f"  {rec['error']['ename']}: {rec['error']['evalue'].splitlines()[0][:160] if rec['error']['evalue'] else ''}"
        echo(msg)
        save()
    manifest["finished"] = _now()
    session["finished"] = _now()
    manifest["duration_s"] = round(sum(c.get("duration_s") or 0.0 for c in manifest["chapters"]), 2)
    manifest["session_duration_s"] = round(time.perf_counter() - t_run, 2)
    left = [c["stem"] for c in manifest["chapters"] if c["status"] not in ("ok", "skipped", "failed", "partial")]
    failed = [c["stem"] for c in manifest["chapters"] if c["status"] == "failed"]
    partial = [c["stem"] for c in manifest["chapters"] if c["status"] == "partial"]
    manifest["status"] = "failed" if failed else ("interrupted" if left else ("partial" if partial else "ok"))
    try:
        write_manifest(run_dir, manifest)
    except OSError as e:
        raise RunbookError(f"the run ended but {e}; then continue with --resume {run_dir}") from None
    return manifest


# ----------------------------------------------------------------------------- rendering
def _title(nb_path: Path, fallback: str) -> str:
    try:
        nb = json.loads(Path(nb_path).read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                for line in "".join(cell["source"]).splitlines():
                    if line.startswith("# "):
                        return line[2:].strip()
    except (OSError, ValueError, KeyError):
        pass
    return fallback


def _fence(text: str) -> str:
    return "````text\n" + text.replace("````", "'''") + "\n````"


def _problem_page(title: str, rec: dict, manifest: dict) -> str:
    err = rec.get("error") or {}
    if rec["status"] == "skipped":
        head = f"This chapter was **skipped** in run `{manifest['run_id']}` ({err.get('evalue', '')})."
    elif rec["status"] in ("pending", "running", "interrupted"):
        said = {"pending": "**did not run**: the run ended before it started",
                "running": "**did not finish**: the run was stopped while it ran (its process was killed)",
                "interrupted": "**was interrupted** while it ran"}[rec["status"]]
        head = (f"This chapter {said} in run `{manifest['run_id']}` (target `{manifest['target']}`). "
                f"Continue the run with `python -m helpers.book.runbook --resume runs/{manifest['run_id']}`: "
                f"finished chapters are kept and this one resumes from the points it had measured.")
    else:
        where = f" in cell {err['cell_index']}" if err.get("cell_index") is not None else ""
        head = (f"This chapter **failed**{where} in run `{manifest['run_id']}` "
                f"(target `{manifest['target']}`) after {rec['duration_s']:.1f} s. The other chapters "
                f"still ran; the executed notebook with the error is kept in the run folder as "
                f"`notebooks/{rec['stem']}.ipynb`.")
    body = [f"# {title}", "", head, ""]
    if err and rec["status"] not in ("skipped", "pending"):
        body += [f"**{err.get('ename', 'Error')}**: ", "", _fence(str(err.get("evalue", ""))), ""]
        if err.get("traceback"):
            import re

            tb = re.sub(r"\x1b\[[0-9;]*m", "", err["traceback"])
            body += ["Traceback (end):", "", _fence(tb[-3000:]), ""]
    body += ["See the [status page](../appendix/status.md) for the whole run."]
    return "\n".join(body) + "\n"


def status_page(manifest: dict, titles: dict[str, str]) -> str:
    """The appendix status page, generated from a run's manifest."""
    def row(*cells):
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    m = manifest
    counts = {s: sum(1 for c in m["chapters"] if c["status"] == s) for s in STATUSES}
    total = sum(c.get("duration_s") or 0.0 for c in m["chapters"])
    said = ", ".join(f"{counts[s]} {s}" for s in ("ok", "failed", "skipped")) + "".join(
        f", {counts[s]} {s}" for s in ("partial", "interrupted", "running", "pending") if counts[s])
    lines = [
        "# Run status", "",
        "What executed where: this page is generated from the run's `manifest.json` each time the site "
        "is built, so it always describes the run being shown.", "",
        "## The run", "",
        row("field", "value"), row("---", "---"),
        row("run id", f"`{m['run_id']}`"),
        row("target", f"`{m['target']}`: {m.get('target_description', '')}"),
        row("started (UTC)", m.get("started")), row("finished (UTC)", m.get("finished") or "not finished"),
        row("overall status", m.get("status")),
        row("made from", commit_provenance(m)[0]),
        row("chapters", said),
        row("sessions", f"{len(m.get('sessions') or [])} (a run continued with --resume has more than one)"
            if m.get("sessions") else "not recorded"),
        row("execution time, all chapters (s)", f"{total:.1f}"),
        "", "## Chapters", "",
        row("#", "chapter", "status", "time (s)", "error"), row("---", "---", "---", "---:", "---"),
    ]
    for i, c in enumerate(m["chapters"], 1):
        err = c.get("error") or {}
        e = f"{err.get('ename', '')}: {str(err.get('evalue', '')).splitlines()[0][:200] if err.get('evalue') else ''}" if err else ""
        lines.append(row(i, titles.get(c["stem"], c["stem"]), f"**{c['status']}**", f"{c.get('duration_s') or 0.0:.1f}", e))
    lines += ["", "## Hardware", "", row("item", "value"), row("---", "---")]
    for k, v in (m.get("hardware") or {}).items():
        if k == "hostname":  # the machine's name tells a reader nothing and is not for publishing
            continue
        lines.append(row(k, v if not isinstance(v, (list, dict)) else json.dumps(v)))
    lines += ["", "## Software versions", "", row("package", "version"), row("---", "---")]
    for k, v in (m.get("versions") or {}).items():
        lines.append(row(k, v))
    lines += environment.lines(m)
    lines += ["", "## Parameters per chapter", "", row("chapter", "parameters"), row("---", "---")]
    for c in m["chapters"]:
        p = {k: v for k, v in (c.get("parameters") or {}).items() if k != "run_dir"}
        lines.append(row(c["stem"], "`" + json.dumps(p) + "`" if p else "defaults"))
    return "\n".join(lines) + "\n"


def _stage_notebook(src: Path, dst: Path, ctx=None) -> None:
    """Copy an executed chapter for rendering: code folds away behind a toggle (the reader sees
    the narrative, tables and figures first); papermill's injected cell becomes a "parameters of this
    run" box; nothing of the machines that ran or built it stays on the page (helpers.book.staging)."""
    from helpers.book import staging

    nb = json.loads(Path(src).read_text())
    staging.clean_notebook(nb, ctx or staging.RunContext())
    # another page can show this chapter's figures: _glued/<stem>/<key>.png in the staged book
    stage_root = next((p for p in Path(dst).parents if (p / "_config.yml").exists()), Path(dst).parent)
    staging.export_glued_figures(nb, stage_root / staging.GLUED_DIR / Path(src).stem)
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if not {"hide-input", "remove-input"} & set(tags):
            tags.append("hide-input")
    Path(dst).write_text(json.dumps(nb))


def stage(run_dir: Path, root: Path, stage_dir: Path) -> Path:
    """Lay out a buildable book in stage_dir from the repository's pages and the run's notebooks."""
    manifest = read_manifest(run_dir)
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    stage_dir.mkdir(parents=True)
    cfg = yaml.safe_load((root / "_config.yml").read_text())
    cfg.setdefault("execute", {})["execute_notebooks"] = "off"
    from helpers.book import staging  # pages name the run they show: {{ site_run }}, {{ site_machine }}, ...

    subs = cfg.setdefault("parse", {}).setdefault("myst_substitutions", {})
    subs.update(staging.run_substitutions(manifest))
    (stage_dir / "_config.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    shutil.copy(root / "_toc.yml", stage_dir / "_toc.yml")
    for extra in ("references.bib", "logo.png"):
        if (root / extra).exists():
            shutil.copy(root / extra, stage_dir / extra)
    shutil.copytree(root / TARGETS_DIR, stage_dir / TARGETS_DIR)  # shown on the re-running page
    if (root / "_static").is_dir():  # the book's CSS (jupyter-book includes every .css in it)
        shutil.copytree(root / "_static", stage_dir / "_static")
    ctx = staging.RunContext.from_manifest(manifest, local_root=root, local_run_dir=run_dir)
    recs = {c["docname"]: c for c in manifest["chapters"]}
    titles = {}
    for doc in toc_entries(root):
        src_nb, src_md = root / f"{doc}.ipynb", root / f"{doc}.md"
        (stage_dir / doc).parent.mkdir(parents=True, exist_ok=True)
        if src_nb.exists():
            rec = recs.get(doc)
            titles[stem(doc)] = _title(src_nb, stem(doc))
            executed = run_dir / "notebooks" / f"{stem(doc)}.ipynb"
            if rec and rec["status"] in ("ok", "partial") and executed.exists():
                _stage_notebook(executed, stage_dir / f"{doc}.ipynb", ctx)
            else:
                rec = rec or {"stem": stem(doc), "status": "skipped", "duration_s": 0.0,
                              "error": {"ename": "Skipped", "evalue": "not part of this run"}}
                (stage_dir / f"{doc}.md").write_text(staging.public_text(
                    _problem_page(titles[stem(doc)], rec, manifest), ctx))
        elif src_md.exists():
            shutil.copy(src_md, stage_dir / f"{doc}.md")
    # pages that cite a chapter's values: a run made before a value existed shows "not in this run" there
    for doc in toc_entries(root):
        page = stage_dir / f"{doc}.md"
        if (root / f"{doc}.md").exists() and page.exists():
            text, missing = staging.cite_only_what_the_run_has(page.read_text(), stage_dir)
            if missing:
                page.write_text(text)
                print(f"note: {doc}.md cites {len(missing)} value(s) this run's chapters do not have (made by an "
                      f"older book); shown as 'not in this run': {', '.join(missing[:4])}"
                      f"{' ...' if len(missing) > 4 else ''}", file=sys.stderr)
    (stage_dir / "appendix").mkdir(exist_ok=True)
    (stage_dir / "appendix" / "status.md").write_text(staging.public_text(status_page(manifest, titles), ctx))
    return stage_dir


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


# ----------------------------------------------------------------------------- CLI
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
    p.add_argument("--no-strict", action="store_true", help="build without -W -n (warnings not fatal)")
    p.add_argument("--out-dir", metavar="DIR", help="build the site into DIR/_build/html (default: the "
                                                   "repository root, so _build/html)")
    p.add_argument("-p", "--param", action="append", default=[], metavar="[CHAPTER.]NAME=VALUE",
                   help="override a target parameter for every chapter, or for one (value read as YAML)")
    p.add_argument("--list-targets", action="store_true", help="list the targets and exit")
    return p


def check_writable_dir(folder: Path, what: str) -> None:
    """Refuse, in one line, a folder the run cannot write: a file, under a file, read-only or not permitted.
    A folder not there yet is tried in its nearest existing parent (it will be made there)."""
    import tempfile

    from helpers.core import results

    folder = Path(folder)
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


def _run_dir_arg(text: str, runs_dir: Path, what: str) -> Path:
    p = Path(text)
    if not p.is_absolute():
        p = Path.cwd() / p
    if not p.exists() and "/" not in text and RUN_ID.fullmatch(text):
        p = runs_dir / text
    if not p.exists():
        raise RunbookError(f"{what} {text!r}: no such run folder (looked for {p}); runs live in {runs_dir}")
    return p.resolve()


class _signals_interrupt:
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
        if args.render and args.resume:
            raise RunbookError("--render and --resume: give one (--resume executes what is left, then builds)")
        if args.render:
            run_dir = _run_dir_arg(args.render, runs_dir, "--render")
            read_manifest(run_dir)
            build(run_dir, root, strict=not args.no_strict, out_dir=out_dir)
            return 0
        if args.resume:
            given = [o for o, v in (("--target", args.target), ("--chapters", args.chapters),
                                    ("--run-id", args.run_id), ("-p", args.param)) if v]
            if given:
                raise RunbookError(f"--resume continues a run with the plan it was started with; {', '.join(given)} "
                                   f"cannot change it (start a new run for other settings)")
            run_dir = _run_dir_arg(args.resume, runs_dir, "--resume")
            check_writable_dir(run_dir, "--resume: the run folder")
            lock = RunLock(run_dir).acquire()
            manifest = read_manifest(run_dir)
            if not isinstance(manifest.get("plan"), dict):
                raise RunbookError(f"{run_dir / 'manifest.json'} records no plan (the run was made before runs "
                                   f"could be resumed); start a new run")
            target = Target.from_plan(manifest["plan"])
            only = manifest["plan"].get("only")
            plan(target, root, only, run_dir=run_dir)  # validate before running anything
            left = [c["stem"] for c in manifest["chapters"] if c["status"] not in ("ok", "skipped")]
            print(f"resuming run {run_dir.name}: target {target.name}; to run: {', '.join(left) or 'nothing'}")
            if runs_dir.resolve() == run_dir.parent:
                _point_latest(runs_dir, run_dir)
        else:
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
            _point_latest(runs_dir, run_dir)
            manifest = None
            print(f"run {run_id}: target {target.name}, {len(chapters(root))} chapters -> {run_dir}")
        try:
            with _signals_interrupt():
                manifest = execute(target, run_dir, root, only, manifest=manifest)
        except KeyboardInterrupt as exc:
            print(f"\ninterrupted ({str(exc) or 'Ctrl-C'}): the manifest says which chapters finished; continue with "
                  f"python -m helpers.book.runbook --resume {run_dir}", file=sys.stderr)
            return 130 if not isinstance(exc, RunInterrupted) else 143
        print(f"executed in {manifest['duration_s']:.1f} s: status {manifest['status']}")
        if not args.no_build:
            build(run_dir, root, strict=not args.no_strict, out_dir=out_dir)
        if manifest["status"] == "partial":
            print(f"partial: {', '.join(c['stem'] for c in manifest['chapters'] if c['status'] == 'partial')} "
                  f"stopped short of the plan before the cell's time limit (the manifest says what is left); "
                  f"resume with python -m helpers.book.runbook --resume {run_dir}")
        return 0 if manifest["status"] in ("ok", "partial") else 1
    except RunbookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if lock is not None:
            lock.release()


if __name__ == "__main__":
    sys.exit(main())
