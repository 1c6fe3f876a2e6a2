"""Execute the book's chapters on this machine with papermill, record the run, build the site.

    python -m helpers.book.runbook                      # target `auto`: measure what this machine can
    python -m helpers.book.runbook --target recorded    # the recorded investigation only
    python -m helpers.book.runbook --render runs/ID     # re-render an existing run, measuring nothing

A run is a folder runs/<run-id>/ with the executed notebooks (notebooks/), the chapters' result
tables (results/<chapter>/), each chapter's log of stderr (logs/) and manifest.json: per-chapter
status (ok / failed / skipped, with the error), durations, parameters, the hardware fingerprint,
software versions and timestamps. The manifest is rewritten after every chapter, so an interrupted
run keeps what finished. runs/latest points at the newest run. The site is then built from the run
with execution off ("run where the hardware is, render anywhere"): a failed or skipped chapter is
rendered as a page that says so, and the status page lists every chapter.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from helpers import __version__, repo_root
from helpers.book import environment, layout

TARGETS_DIR = "targets"
_TARGET_KEYS = {"description", "parameters", "chapters", "skip", "execution_timeout", "requires"}
ALWAYS = ("run_dir",)  # parameters the runbook itself sets


class RunbookError(RuntimeError):
    """A problem with the runbook's inputs (target, chapters, run directory)."""


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


def load_target(name: str, root: Path | None = None) -> Target:
    """Read targets/<name>.yaml; refuse an unknown name, listing the known ones."""
    root = root or repo_root()
    path = root / TARGETS_DIR / f"{name}.yaml"
    known = known_targets(root)
    if not path.exists():
        raise RunbookError(f"unknown target {name!r}; known targets: {', '.join(known)} "
                           f"(each is a file {TARGETS_DIR}/<name>.yaml)")
    raw = yaml.safe_load(path.read_text()) or {}
    extra = set(raw) - _TARGET_KEYS
    if extra:
        raise RunbookError(f"{path}: unknown key(s) {sorted(extra)}; allowed: {sorted(_TARGET_KEYS)}")
    if "description" not in raw:
        raise RunbookError(f"{path}: needs a `description`")
    return Target(name, raw["description"], raw.get("parameters") or {}, raw.get("chapters") or {},
                  raw.get("skip") or [], int(raw.get("execution_timeout", 900)),
                  requires=_requires(path, raw.get("requires")))


def plan(target: Target, root: Path | None = None, only: list[str] | None = None,
         run_dir: Path | None = None) -> list[dict]:
    """Per chapter: docname, notebook path, parameters to inject (validated against what the
    chapter declares), and whether it is skipped. Refuses a selection whose chapters need results
    (helpers.book.layout.NEEDS) that no earlier selected chapter produces and `run_dir` does not hold."""
    root = root or repo_root()
    docs = chapters(root)
    stems = [stem(d) for d in docs]
    for s in list(target.chapters) + list(target.skip) + list(only or []):
        if s not in stems:
            raise RunbookError(f"target {target.name!r} or --chapters names chapter {s!r}, which is not "
                               f"a notebook in _toc.yml; chapters: {', '.join(stems)}")
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
        if bad:
            raise RunbookError(f"target {target.name!r}: chapter {s} does not declare parameter(s) {bad}; "
                               f"it declares: {', '.join(declared) or 'none'}")
        params.update(override)
        skipped = s in target.skip or (only is not None and s not in only)
        steps.append({"docname": doc, "stem": s, "notebook": nb, "parameters": params,
                      "declared": list(declared), "skip": skipped})
    unused = set(target.parameters) - used_globals
    if unused:
        raise RunbookError(f"target {target.name!r}: parameter(s) {sorted(unused)} are declared by no chapter")
    selected = [st["stem"] for st in steps if not st["skip"]]
    problems = layout.check_needs(selected, run_dir, {st["stem"]: st["parameters"].get("mode") for st in steps})
    if problems:
        raise RunbookError("; ".join(problems))
    unmet = unmet_requirements(target, steps)
    if unmet:
        raise RunbookError(f"target {target.name!r} cannot run here:\n  - " + "\n  - ".join(unmet))
    return steps


_REQUIRE_KEYS = ("parameters", "paths", "packages")


def _requires(path: Path, raw) -> dict:
    """A target's `requires` as {kind: {name: what it is}}; a list gives names without a description."""
    if not raw:
        return {}
    if not isinstance(raw, dict) or set(raw) - set(_REQUIRE_KEYS):
        raise RunbookError(f"{path}: `requires` takes the keys {', '.join(_REQUIRE_KEYS)}, each a list of names "
                           f"or a mapping name -> what it is; got {raw!r}")
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


def apply_overrides(target: Target, items: list[str]) -> None:
    """`-p NAME=VALUE` (every chapter that declares NAME) or `-p CHAPTER.NAME=VALUE` (one chapter);
    VALUE is read as YAML (`-p tolerance=0.3`, `-p concurrencies=[1,4]`)."""
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise RunbookError(f"-p {item!r}: expected NAME=VALUE or CHAPTER.NAME=VALUE")
        try:
            val = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise RunbookError(f"-p {item!r}: the value is not valid YAML ({exc})") from None
        chapter, dot, name = key.strip().rpartition(".")
        if dot:
            target.chapters.setdefault(chapter, {})[name] = val
        else:
            target.parameters[name] = val


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
    tmp = run_dir / ".manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, default=str))
    os.replace(tmp, run_dir / "manifest.json")


def read_manifest(run_dir: Path) -> dict:
    path = Path(run_dir) / "manifest.json"
    if not path.exists():
        raise RunbookError(f"{run_dir} is not a run directory (no manifest.json); "
                           f"runs are made by `python -m helpers.book.runbook --target NAME`")
    return json.loads(path.read_text())


def _point_latest(runs_dir: Path, run_dir: Path) -> None:
    link = runs_dir / "latest"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(run_dir.name)


# ----------------------------------------------------------------------------- execution
class _stderr_to:
    """Point this process's file descriptor 2 at `f` (restored on exit)."""

    def __init__(self, f):
        self.f = f

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        os.dup2(self.f.fileno(), 2)

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        return False


def execute(target: Target, run_dir: Path, root: Path, only: list[str] | None = None,
            echo=print) -> dict:
    """Execute every chapter of the plan into run_dir; return the manifest."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    steps = plan(target, root, only)
    (run_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    manifest = {
        "run_id": run_dir.name, "target": target.name, "target_description": target.description,
        "started": _now(), "finished": None, "status": "running",
        "hardware": fingerprint(), "versions": versions(root), "environment": _environment_record(),
        "chapters": [],
    }
    write_manifest(run_dir, manifest)
    n = len(steps)
    t_run = time.perf_counter()
    for i, step in enumerate(steps, 1):
        rec = {"docname": step["docname"], "stem": step["stem"], "parameters": dict(step["parameters"]),
               "status": "skipped", "duration_s": 0.0, "started": None, "finished": None, "error": None}
        manifest["chapters"].append(rec)
        label = f"[{i:>2}/{n}] {step['stem']:<24}"
        if step["skip"]:
            rec["error"] = {"ename": "Skipped", "evalue": "not selected for this run"
                            if only is not None and step["stem"] not in only else
                            f"skipped by target {target.name!r}"}
            echo(f"{label} skipped")
            write_manifest(run_dir, manifest)
            continue
        params = dict(step["parameters"])
        if "run_dir" in step["declared"]:
            params["run_dir"] = str(run_dir.resolve())
        rec["parameters"] = params
        out_nb = run_dir / "notebooks" / f"{step['stem']}.ipynb"
        rec["started"] = _now()
        if echo is print:  # show the chapter while it runs; its result completes the line
            print(label, end=" ", flush=True)
            label = ""
        t0 = time.perf_counter()
        try:
            with open(run_dir / "logs" / f"{step['stem']}.log", "w") as log, _stderr_to(log):
                # the kernel process inherits fd 2: its own warnings land in the chapter's log
                papermill.execute_notebook(
                    str(step["notebook"]), str(out_nb), parameters=params, kernel_name="python3",
                    progress_bar=False, log_output=False, stdout_file=log, stderr_file=log,
                    execution_timeout=target.execution_timeout, cwd=str(root),
                )
            rec["status"] = "ok"
        except PapermillExecutionError as exc:
            rec["status"] = "failed"
            rec["error"] = {"ename": exc.ename, "evalue": str(exc.evalue)[:2000],
                            "cell_index": exc.cell_index,
                            "traceback": "\n".join(exc.traceback)[-6000:] if exc.traceback else ""}
        except KeyboardInterrupt:
            rec["status"] = "failed"
            rec["error"] = {"ename": "KeyboardInterrupt", "evalue": "the run was interrupted here"}
            rec["duration_s"] = round(time.perf_counter() - t0, 2)
            rec["finished"] = _now()
            manifest["status"] = "interrupted"
            manifest["finished"] = _now()
            write_manifest(run_dir, manifest)
            raise
        except Exception as exc:  # noqa: BLE001 - a chapter's failure must not stop the others
            rec["status"] = "failed"
            rec["error"] = {"ename": type(exc).__name__, "evalue": str(exc)[:2000],
                            "traceback": traceback.format_exc()[-6000:]}
        rec["duration_s"] = round(time.perf_counter() - t0, 2)
        rec["finished"] = _now()
        msg = f"{label}{' ' if label else ''}{rec['status']:<7} {rec['duration_s']:6.1f} s"
        if rec["error"]:
            msg += f"  {rec['error']['ename']}: {rec['error']['evalue'].splitlines()[0][:160] if rec['error']['evalue'] else ''}"
        echo(msg)
        write_manifest(run_dir, manifest)
    manifest["finished"] = _now()
    manifest["duration_s"] = round(time.perf_counter() - t_run, 2)
    failed = [c["stem"] for c in manifest["chapters"] if c["status"] == "failed"]
    manifest["status"] = "failed" if failed else "ok"
    write_manifest(run_dir, manifest)
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
    else:
        where = f" in cell {err['cell_index']}" if err.get("cell_index") is not None else ""
        head = (f"This chapter **failed**{where} in run `{manifest['run_id']}` "
                f"(target `{manifest['target']}`) after {rec['duration_s']:.1f} s. The other chapters "
                f"still ran; the executed notebook with the error is kept in the run folder as "
                f"`notebooks/{rec['stem']}.ipynb`.")
    body = [f"# {title}", "", head, ""]
    if err and rec["status"] != "skipped":
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
    counts = {s: sum(1 for c in m["chapters"] if c["status"] == s) for s in ("ok", "failed", "skipped")}
    total = sum(c["duration_s"] for c in m["chapters"])
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
        row("chapters", f"{counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped"),
        row("execution time, all chapters (s)", f"{total:.1f}"),
        "", "## Chapters", "",
        row("#", "chapter", "status", "time (s)", "error"), row("---", "---", "---", "---:", "---"),
    ]
    for i, c in enumerate(m["chapters"], 1):
        err = c.get("error") or {}
        e = f"{err.get('ename', '')}: {str(err.get('evalue', '')).splitlines()[0][:200] if err.get('evalue') else ''}" if err else ""
        lines.append(row(i, titles.get(c["stem"], c["stem"]), f"**{c['status']}**", f"{c['duration_s']:.1f}", e))
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
            if rec and rec["status"] == "ok" and executed.exists():
                _stage_notebook(executed, stage_dir / f"{doc}.ipynb", ctx)
            else:
                rec = rec or {"stem": stem(doc), "status": "skipped", "duration_s": 0.0,
                              "error": {"ename": "Skipped", "evalue": "not part of this run"}}
                (stage_dir / f"{doc}.md").write_text(staging.public_text(
                    _problem_page(titles[stem(doc)], rec, manifest), ctx))
        elif src_md.exists():
            shutil.copy(src_md, stage_dir / f"{doc}.md")
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
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
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
               "  python -m helpers.book.runbook --target auto --chapters 01_environment,06_vm_p2p",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="auto", help="parameter set to run (default: auto)")
    p.add_argument("--run-id", help="name of the run folder (default: <UTC time>-<target>-<host>)")
    p.add_argument("--runs-dir", default="runs", help="where run folders go (default: runs/)")
    p.add_argument("--chapters", help="comma-separated chapter stems to execute; the rest are skipped")
    p.add_argument("--no-build", action="store_true", help="execute only; build the site later with --render")
    p.add_argument("--render", metavar="RUN_DIR", help="build the site from an existing run; execute nothing")
    p.add_argument("--no-strict", action="store_true", help="build without -W -n (warnings not fatal)")
    p.add_argument("-p", "--param", action="append", default=[], metavar="[CHAPTER.]NAME=VALUE",
                   help="override a target parameter for every chapter, or for one (value read as YAML)")
    p.add_argument("--list-targets", action="store_true", help="list the targets and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    root = repo_root()
    try:
        if args.list_targets:
            for name in known_targets(root):
                t = load_target(name, root)
                print(f"{name:<12} {' '.join(t.description.split())}")
            return 0
        if args.render:
            run_dir = Path(args.render)
            if not run_dir.is_absolute():
                run_dir = (Path.cwd() / run_dir)
            read_manifest(run_dir)
            build(run_dir.resolve(), root, strict=not args.no_strict)
            return 0
        target = load_target(args.target, root)
        apply_overrides(target, args.param)
        only = [s.strip() for s in args.chapters.split(",") if s.strip()] if args.chapters else None
        plan(target, root, only)  # validate before creating anything
        runs_dir = Path(args.runs_dir)
        if not runs_dir.is_absolute():
            runs_dir = root / runs_dir
        run_id = args.run_id or (dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
                                 + f"-{target.name}-{socket.gethostname().split('.')[0][:20]}")
        run_dir = runs_dir / run_id
        if run_dir.exists():
            raise RunbookError(f"run folder {run_dir} already exists; choose another --run-id")
        run_dir.mkdir(parents=True)
        _point_latest(runs_dir, run_dir)
        print(f"run {run_id}: target {target.name}, {len(chapters(root))} chapters -> {run_dir}")
        manifest = execute(target, run_dir, root, only)
        print(f"executed in {manifest['duration_s']:.1f} s: status {manifest['status']}")
        if not args.no_build:
            build(run_dir, root, strict=not args.no_strict)
        return 0 if manifest["status"] == "ok" else 1
    except RunbookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
