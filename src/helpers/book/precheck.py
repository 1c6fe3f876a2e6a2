"""Check a run's parameters before its first chapter starts, with each chapter's own checks.

Every chapter validates its parameters in the cell after its `parameters` cell, with one call:

    P = params.validate({"mode": mode, ...}, {"mode": params.choice("recorded", "auto"), ...})
    P = params.validate({k: v for k, v in globals().items() if k in ch.PARAMS}, ch.PARAMS)

That call is the one place a chapter says what its parameters may be (inline, or a spec dictionary
the package holds). `chapter_checks(notebook)` reads
it from the notebook (parsed, not executed: only the cell's imports and the spec dictionary itself are
evaluated), so the runbook can check a target's values and the command line's `-p` values against the
same specs before anything runs, and a typo costs one message instead of a run of failed chapters.

`problems(...)` returns one line per bad value, naming where the value came from (the target file or
the command line), the chapter, the parameter, the value and what is allowed; a value for a parameter
the chapter's validate() call does not check is refused too.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.core import params as P


class PrecheckError(RuntimeError):
    """A chapter's parameter checks cannot be read from its notebook."""


@dataclass
class ChapterChecks:
    notebook: Path
    defaults: dict = field(default_factory=dict)      # the parameters cell's values
    specs: dict = field(default_factory=dict)         # parameter -> params.Spec, from the validate() call
    values_expr: dict = field(default_factory=dict)   # parameter -> the expression validate() checks


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _strip_magics(src: str) -> str:
    """IPython lines (%magic, !shell) become blank lines, so the rest parses as Python."""
    return "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines())


def _validate_call(tree: ast.AST) -> ast.Call | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name == "validate" and len(node.args) >= 2:
                return node
    return None


_CACHE: dict[tuple[str, float], ChapterChecks] = {}


def _declared_specs(stem: str) -> dict | None:
    """The PARAMS of the notebook's chapter module, where it has one (helpers.chapters)."""
    import importlib.util

    from helpers import chapters

    name = chapters.MODULES.get(stem)
    if name is None or importlib.util.find_spec(f"helpers.chapters.{name}") is None:
        return None
    specs = getattr(chapters.module(stem), "PARAMS", None)
    if specs is None:
        return None
    bad = [k for k, s in specs.items() if not isinstance(s, P.Spec)]
    if bad:
        raise PrecheckError(f"helpers.chapters.{name}.PARAMS: {bad} are not params.Spec objects")
    return specs


def chapter_checks(notebook: str | Path) -> ChapterChecks:
    """The parameter specs a chapter's validate() call declares, and its parameters cell's defaults."""
    nb_path = Path(notebook)
    key = (str(nb_path.resolve()), nb_path.stat().st_mtime)
    if key in _CACHE:
        return _CACHE[key]
    nb = json.loads(nb_path.read_text())
    cells = nb.get("cells", [])
    tagged = [i for i, c in enumerate(cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        raise PrecheckError(f"{nb_path}: {len(tagged)} cells tagged 'parameters' (exactly one is required)")
    defaults: dict[str, Any] = {}
    exec(compile(_source(cells[tagged[0]]), f"{nb_path}:parameters", "exec"), {}, defaults)  # literals only
    declared = _declared_specs(nb_path.stem)
    if declared is not None:   # the chapter module's PARAMS, imported (helpers.chapters)
        out = ChapterChecks(nb_path, defaults, dict(declared), {})
        _CACHE[key] = out
        return out
    nxt = next((c for c in cells[tagged[0] + 1:] if c.get("cell_type") == "code"), None)
    src = _strip_magics(_source(nxt)) if nxt else ""
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        raise PrecheckError(f"{nb_path}: the cell after the parameters cell does not parse ({e})") from None
    call = _validate_call(tree)
    if call is None:
        raise PrecheckError(f"{nb_path}: the cell after the parameters cell has no params.validate({{...}}, {{...}}) "
                            "call; the runbook checks a run's parameters with it before the run starts")
    ns: dict[str, Any] = {}
    for stmt in tree.body:   # the cell's imports: what the spec dictionary refers to
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) and stmt.lineno < call.lineno:
            exec(compile(ast.Module([stmt], []), f"{nb_path}:imports", "exec"), ns)
    try:
        specs = eval(compile(ast.Expression(call.args[1]), f"{nb_path}:specs", "eval"), ns)
    except Exception as e:  # noqa: BLE001 - name what could not be read
        raise PrecheckError(f"{nb_path}: cannot evaluate the specs of its params.validate() call "
                            f"({type(e).__name__}: {e}); they may use only the cell's imports") from None
    values_expr = {}   # a literal {"name": expr} gives the expression checked; otherwise the value itself is
    if isinstance(call.args[0], ast.Dict):
        for k, v in zip(call.args[0].keys, call.args[0].values):
            if isinstance(k, ast.Constant):
                values_expr[k.value] = v
    bad = [k for k, s in specs.items() if not isinstance(s, P.Spec)]
    if bad:
        raise PrecheckError(f"{nb_path}: validate() specs {bad} are not params.Spec objects")
    out = ChapterChecks(nb_path, defaults, dict(specs), values_expr)
    _CACHE[key] = out
    return out


def problems(chapter: str, notebook: str | Path, given: dict[str, Any], origins: dict[str, str],
             runbook_set: tuple[str, ...] = ("run_dir",)) -> list[str]:
    """One line per value in `given` (the parameters the run injects into `chapter`) that the chapter would
    refuse; `origins` says where each came from (a target file, the command line)."""
    checks = chapter_checks(notebook)
    out = []
    values = {**checks.defaults, **given}
    for name in given:
        if name in runbook_set:
            continue
        where = origins.get(name, "the run's parameters")
        if name not in checks.specs:
            allowed = ", ".join(sorted(k for k in checks.specs if k not in runbook_set)) or "none"
            out.append(f"{where}: chapter {chapter}: parameter '{name}' = {P.short(given[name])} is not one the chapter "
                       f"checks (its parameters: {allowed})")
            continue
        expr = checks.values_expr.get(name)
        value = given[name]
        if expr is not None and not (isinstance(expr, ast.Name) and expr.id == name):
            try:   # the chapter checks an expression of its parameters: evaluate it the same way
                value = eval(compile(ast.Expression(expr), "<value>", "eval"), {}, dict(values))
            except Exception:  # noqa: BLE001 - fall back to the raw value
                value = given[name]
        why = P.problem(name, value, checks.specs[name], _valid(values, checks.specs))
        if why:
            out.append(f"{where}: chapter {chapter}: {why}")
    # a parameter left at its default can still be refused by one that was given (nnodes given, rdzv_endpoint not)
    for name, spec in checks.specs.items():
        given_on = [o for o in spec.on if o in given]
        if name in given or name in runbook_set or not given_on or name not in values:
            continue
        why = P.problem(name, values[name], spec, _valid(values, checks.specs))
        if why:
            where = origins.get(given_on[0], "the run's parameters")
            out.append(f"{where}: chapter {chapter}: {why}")
    return out


def _valid(values: dict[str, Any], specs: dict[str, "P.Spec"]) -> dict[str, Any]:
    """The values their own specs accept: a rule between parameters is checked only on those."""
    return {k: v for k, v in values.items() if k not in specs or P.problem(k, v, specs[k]) is None}
