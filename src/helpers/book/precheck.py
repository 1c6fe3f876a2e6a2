"""Check a run's parameters before its first chapter starts, with each chapter's own checks.

A chapter's parameters are declared once, in its chapter module (helpers.chapters.<module>.PARAMS), and its
notebook validates against that same dictionary in the cell after its `parameters` cell:

    from helpers.chapters import vm_p2p as ch
    P = params.validate({"mode": mode, ...}, ch.PARAMS)

`chapter_checks(notebook)` imports those specs (tests/test_chapters.py holds that every chapter's notebook
validates against them) and reads the parameters cell's default values (literals, read with
ast.literal_eval, never executed), so the runbook can check a target's values and the command line's `-p`
values against the same specs before anything runs, and a typo costs one message instead of a run of
failed chapters. A notebook that is not one of the book's chapters (no entry in helpers.chapters.MODULES,
such as the tests' throw-away books) has no specs here: only its parameter names are checked before the run,
and its values by its own validation cell when it runs.

`problems(...)` returns one line per bad value, naming where the value came from (the target file or
the command line), the chapter, the parameter, the value and what is allowed; a value for a parameter
the chapter does not have is refused too.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.core import params as P


class PrecheckError(RuntimeError):
    """A chapter's parameters cell cannot be read, or its chapter module's PARAMS are not specs."""


@dataclass
class ChapterChecks:
    notebook: Path
    defaults: dict = field(default_factory=dict)   # the parameters cell's values
    specs: dict | None = None                      # parameter -> params.Spec (chapter module's PARAMS);
    #                                                None: not one of the book's chapters (names checked only)


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


_CACHE: dict[tuple[str, float], ChapterChecks] = {}


def declared_specs(stem: str) -> dict | None:
    """The PARAMS of the notebook's chapter module (helpers.chapters); None for a notebook that is not
    one of the book's chapters."""
    from helpers import chapters

    name = chapters.MODULES.get(stem)
    if name is None:
        return None
    specs = getattr(chapters.module(stem), "PARAMS", None)
    if not isinstance(specs, dict):
        raise PrecheckError(f"helpers.chapters.{name} has no PARAMS dictionary; declare the chapter's "
                            "parameter specs there (the runbook checks a run against them before it starts)")
    bad = [k for k, s in specs.items() if not isinstance(s, P.Spec)]
    if bad:
        raise PrecheckError(f"helpers.chapters.{name}.PARAMS: {bad} are not params.Spec objects")
    return specs


def parameter_defaults(nb_path: Path, cell) -> dict[str, Any]:
    """The parameters cell's `name = literal` lines, read without executing anything."""
    try:
        tree = ast.parse(_source(cell))
    except SyntaxError as e:
        raise PrecheckError(f"{nb_path}: the parameters cell does not parse ({e})") from None
    out: dict[str, Any] = {}
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            raise PrecheckError(f"{nb_path}: line {stmt.lineno} of the parameters cell is not `name = value`; "
                                "the cell holds one literal assignment per parameter")
        try:
            out[stmt.targets[0].id] = ast.literal_eval(stmt.value)
        except ValueError:
            raise PrecheckError(f"{nb_path}: parameter '{stmt.targets[0].id}' has a default that is not a literal "
                                f"({ast.unparse(stmt.value)}); write the value itself") from None
    return out


def chapter_checks(notebook: str | Path) -> ChapterChecks:
    """The chapter's parameter specs (its chapter module's PARAMS) and its parameters cell's defaults."""
    nb_path = Path(notebook)
    key = (str(nb_path.resolve()), nb_path.stat().st_mtime)
    if key in _CACHE:
        return _CACHE[key]
    cells = json.loads(nb_path.read_text()).get("cells", [])
    tagged = [i for i, c in enumerate(cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        raise PrecheckError(f"{nb_path}: {len(tagged)} cells tagged 'parameters' (exactly one is required)")
    specs = declared_specs(nb_path.stem)
    out = ChapterChecks(nb_path, parameter_defaults(nb_path, cells[tagged[0]]), None if specs is None else dict(specs))
    _CACHE[key] = out
    return out


def problems(chapter: str, notebook: str | Path, given: dict[str, Any], origins: dict[str, str],
             runbook_set: tuple[str, ...] = ("run_dir",)) -> list[str]:
    """One line per value in `given` (the parameters the run injects into `chapter`) that the chapter would
    refuse; `origins` says where each came from (a target file, the command line)."""
    checks = chapter_checks(notebook)
    out = []
    values = {**checks.defaults, **given}
    specs = checks.specs if checks.specs is not None else {}
    known = checks.specs if checks.specs is not None else checks.defaults
    for name in given:
        if name in runbook_set:
            continue
        where = origins.get(name, "the run's parameters")
        if name not in known:
            allowed = ", ".join(sorted(k for k in known if k not in runbook_set)) or "none"
            out.append(f"{where}: chapter {chapter}: parameter '{name}' = {P.short(given[name])} is not one the chapter "
                       f"checks (its parameters: {allowed})")
            continue
        if name in specs:
            why = P.problem(name, given[name], specs[name], _valid(values, specs))
            if why:
                out.append(f"{where}: chapter {chapter}: {why}. {_fix(chapter, name)}")
    # a parameter left at its default can still be refused by one that was given (nnodes given, rdzv_endpoint not)
    for name, spec in specs.items():
        given_on = [o for o in spec.on if o in given]
        if name in given or name in runbook_set or not given_on or name not in values:
            continue
        why = P.problem(name, values[name], spec, _valid(values, specs))
        if why:
            where = origins.get(given_on[0], "the run's parameters")
            out.append(f"{where}: chapter {chapter}: {why}. {_fix(chapter, given_on[0])}")
    return out


def time_problem(chapter: str, notebook: str | Path, given: dict[str, Any], origins: dict[str, str],
                 cell_limit_s: float | None, fix_limit: str) -> str | None:
    """Why the plan these values make cannot finish within a notebook cell's limit (`cell_limit_s`, the
    target's execution_timeout), or None: the chapter module's `PLAN_TIME(values)` (a params.Estimate, the
    least time its longest cell takes) against the limit. Checked only where every value passes its spec."""
    from helpers import chapters

    checks = chapter_checks(notebook)
    if checks.specs is None or cell_limit_s is None:
        return None
    estimate = getattr(chapters.module(Path(notebook).stem), "PLAN_TIME", None)
    values = {**checks.defaults, **given}
    if estimate is None or any(k not in values or P.problem(k, values[k], s) for k, s in checks.specs.items()):
        return None
    est = estimate({k: s.check(values[k]) for k, s in checks.specs.items()})
    if est is None or est.seconds <= cell_limit_s:
        return None
    named = sorted((n for n in est.names if n in given),
                   key=lambda n: not origins.get(n, "").startswith("the command line"))
    where = origins.get(named[0], "the run's parameters") if named else "the chapter's defaults"
    shown = ", ".join(f"{n} = {P.short(values[n])}" for n in est.names)
    return (f"{where}: chapter {chapter}: the plan these values make ({shown}) takes at least {est.seconds:,.0f} s "
            f"in one notebook cell (estimated: {est.how}), more than the cell limit of {cell_limit_s:,.0f} s "
            f"(the target's execution_timeout); {est.fix}, or {fix_limit}")


def _fix(chapter: str, name: str) -> str:
    return (f"Fix: give an allowed value with -p {chapter}.{name}=VALUE or in the target file "
            f"(`chapters: {chapter}: {name}:`)")


def _valid(values: dict[str, Any], specs: dict[str, "P.Spec"]) -> dict[str, Any]:
    """The values their own specs accept: a rule between parameters is checked only on those."""
    return {k: v for k, v in values.items() if k not in specs or P.problem(k, v, specs[k]) is None}
