"""Planning a run: the book's chapters (in _toc.yml order), the chapter selection, and the plan: per chapter,
the parameters it will receive, checked before anything runs against what the chapter declares and checks
(helpers.book.precheck), against what the target `requires` of this machine, and against the results each
selected chapter needs (helpers.core.layout.NEEDS).
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

from helpers import repo_root
from helpers.core.params import short
from helpers.book import precheck
from helpers.book.targets import MAX_EXECUTION_TIMEOUT_S, TARGETS_DIR, RunbookError, Target
from helpers.core import layout

ALWAYS = ("run_dir",)  # parameters the runbook itself sets
_CACHE: dict[tuple, object] = {}   # _toc.yml's entries and notebooks' declared parameters, by file and mtime


def toc_entries(root: Path | None = None) -> list[str]:
    """The docnames of _toc.yml in reading order (root first), e.g. 'notebooks/01_environment'."""
    root = root or repo_root()
    path = root / "_toc.yml"
    st = path.stat()
    key = ("toc", str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _CACHE:
        _CACHE[key] = _toc_entries(yaml.safe_load(path.read_text()))
    return list(_CACHE[key])


def _toc_entries(toc: dict) -> list[str]:
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

    st = Path(nb_path).stat()
    key = ("nb", str(Path(nb_path).resolve()), st.st_mtime_ns, st.st_size)
    if key not in _CACHE:
        _CACHE[key] = papermill.inspect_notebook(str(nb_path))
    return dict(_CACHE[key])


def parse_chapters(text: str | None, root: Path | None = None) -> list[str] | None:
    """--chapters: comma-separated chapter stems (None: every chapter). An empty selection is refused."""
    if text is None:
        return None
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        stems = [stem(d) for d in chapters(root)]
        raise RunbookError(f"--chapters {short(text)} names no chapter; give comma-separated chapter stems, e.g. "
                           f"--chapters {stems[0]},{stems[-1]} (chapters: {', '.join(stems)})")
    return list(dict.fromkeys(names))


def gpu_visible() -> bool:
    """Whether this machine shows an NVIDIA GPU to its processes (a device node or the driver's /proc entry)."""
    return Path("/dev/nvidia0").exists() or Path("/proc/driver/nvidia/gpus").is_dir()


def effective(step: dict, name: str) -> str:
    """A parameter's value for this step, as text: what the plan injects, else the notebook's default."""
    if name in step["parameters"]:
        return str(step["parameters"][name])
    return step.get("defaults", {}).get(name, "").strip().strip("'\"")


def quiet(step: dict, gpu: bool) -> bool:
    """Whether the chapter times nothing in this run, so it may run beside another chapter that times nothing
    (helpers.core.layout.QUIET_IN_AUTO_WITHOUT_GPU, COMPUTES_ONLY): every chapter in mode recorded or replay,
    the computing chapters always, and the chapters that read recorded data in mode auto where no GPU is seen
    and no server or CPU engine is given. Anything else runs alone, as every chapter did before."""
    s = step["stem"]
    if s in layout.COMPUTES_ONLY:
        return True
    mode = effective(step, "mode")
    if mode in (*layout.RECORDED_MODES, layout.REPLAY_MODE):
        return True
    if mode != "auto" or gpu or s not in layout.QUIET_IN_AUTO_WITHOUT_GPU:
        return False
    for name, value in layout.MEASURES_WHEN.items():
        if name in step.get("declared", ()):
            v = effective(step, name)
            if (value is None and v) or (value is not None and v == value):
                return False
    return True


def producers(step: dict) -> set[str]:
    """The chapters whose results this one reads (helpers.core.layout.NEEDS)."""
    return {n.producer for n in layout.NEEDS.get(step["stem"], ())}


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
                problems.append(f"{origin} names chapter {short(s)}, which is not a notebook in _toc.yml; "
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
            problems.append(f"{target.origin(s, k)}: chapter {s} does not declare parameter {short(k)}; it declares: "
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
                      "defaults": {k: str((v or {}).get("default", "")) for k, v in declared.items()},
                      "origins": {k: target.step_origin(s, k) for k in params}})
    for c, values in [("", target.parameters), *target.chapters.items()]:
        for k in ALWAYS:
            if k in (values or {}):
                problems.append(f"{target.origin(c, k)}: parameter {short(k)} is set by the runbook itself (the run's "
                                f"folder: --runs-dir/--run-id), not by a target or -p; remove it")
    unused = set(target.parameters) - used_globals - set(ALWAYS)
    for k in sorted(unused):
        problems.append(f"{target.origin('', k)}: parameter {short(k)} is declared by no chapter")
    if check_values:
        for st in steps:
            if st["skip"]:
                continue
            try:
                found = precheck.problems(st["stem"], st["notebook"], st["parameters"], st["origins"], ALWAYS)
                slow = None if found else precheck.time_problem(
                    st["stem"], st["notebook"], st["parameters"], st["origins"], target.execution_timeout,
                    f"raise execution_timeout in {target.path or 'the target file'} (at most {MAX_EXECUTION_TIMEOUT_S} s)")
                problems += found + ([slow] if slow else [])
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
                out.append(f"{label} = {short(values[missing[0]])} does not exist on this machine; {need(missing)}. "
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
