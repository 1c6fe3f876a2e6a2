"""Validation of notebook parameters.

Each chapter has one cell tagged `parameters` holding literals only; the next cell calls `validate`
with a spec per parameter. A bad value fails at once with a `ParameterError` naming the parameter,
the value and what is allowed, and how to set it (one line per bad value). Numbers must be finite:
NaN and infinity are refused (a comparison with NaN is always false, so a range check alone would
let it through). A spec may also depend on other parameters (`depends`: rdzv_endpoint is required when
nnodes is above 1): its rule sees their values too. The runbook runs the same checks on a target's values
before the first chapter starts (helpers.book.precheck).
"""
from __future__ import annotations

import ast
import math
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable

MODES = ("recorded", "auto", "live")
#: the most items a list parameter may hold (a sweep of more points than this is a mistake, not a plan)
MAX_LIST = 64
#: the longest string parameter (a path or a name)
MAX_STRING = 4096


def short(value: Any, items: int = 4, chars: int = 120) -> str:
    """`repr(value)` for a message, at most a few items of a long list and a few dozen characters of a long
    string, saying how many there were."""
    if isinstance(value, (list, tuple)) and len(value) > items:
        head = ", ".join(short(v, items, 40) for v in value[:items])
        return f"[{head}, ... ({len(value)} items)]"
    if isinstance(value, dict) and len(value) > items:
        head = ", ".join(f"{k!r}: {short(v, items, 40)}" for k, v in list(value.items())[:items])
        return f"{{{head}, ... ({len(value)} keys)}}"
    text = repr(value)
    return text if len(text) <= chars else f"{text[:chars]}... ({len(text)} characters)"


@dataclass(frozen=True)
class Estimate:
    """What a chapter's values imply for the time of its longest notebook cell (a chapter module's
    `PLAN_TIME(values)` returns one, or None where nothing long runs): at least `seconds`, from the
    parameters `names`, `how` it was estimated (the assumption stated) and `fix` (what to make smaller)."""

    seconds: float
    names: tuple[str, ...]
    how: str
    fix: str


class ParameterError(ValueError):
    """A notebook parameter has a value the chapter cannot use."""


def _fix_hint(name: str) -> str:
    return (
        f"set `{name}` in the target's parameters file (targets/<name>.yaml) "
        f"or pass `-p {name} VALUE` to papermill"
    )


@dataclass(frozen=True)
class Spec:
    """What one parameter may be: `check(value)` returns the normalised value or raises ValueError
    with a description of what is allowed. `rule(value, *others)`, where given, sees the values of the
    parameters named in `on` too and returns why the combination is refused (None where it is allowed)."""

    describe: str
    check: Callable[[Any], Any]
    on: tuple[str, ...] = ()
    rule: Callable[..., str | None] | None = None


def depends(spec: Spec, on: str | tuple[str, ...], rule: Callable[..., str | None]) -> Spec:
    """`spec`, and then `rule(value, *values of on)`: why the value cannot go with those parameters' values
    (a sentence naming what to set and how), or None. Checked only where the others are valid themselves."""
    names = (on,) if isinstance(on, str) else tuple(on)
    return Spec(spec.describe, spec.check, names, rule)


def choice(*allowed: Any) -> Spec:
    def check(v):
        if v not in allowed:
            raise ValueError
        return v

    return Spec("one of " + ", ".join(repr(a) for a in allowed), check)


def number(lo: float | None = None, hi: float | None = None, integer: bool = False) -> Spec:
    def check(v):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError
        if not math.isfinite(v):
            raise ValueError
        if integer and not float(v).is_integer():
            raise ValueError
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise ValueError
        return int(v) if integer else float(v)

    kind = "an integer" if integer else "a finite number"
    rng = []
    if lo is not None:
        rng.append(f">= {lo}")
    if hi is not None:
        rng.append(f"<= {hi}")
    return Spec(kind + (" " + " and ".join(rng) if rng else ""), check)


def number_list(lo: float | None = None, hi: float | None = None, integer: bool = False,
                min_len: int = 1, max_len: int = MAX_LIST) -> Spec:
    item = number(lo, hi, integer)

    def check(v):
        if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
            raise ValueError
        if not min_len <= len(v) <= max_len:
            raise ValueError
        return [item.check(x) for x in v]

    return Spec(f"a list of {min_len} to {max_len} items, each {item.describe}", check)


def string(allow_empty: bool = True, max_len: int = MAX_STRING) -> Spec:
    def check(v):
        if not isinstance(v, str) or (not allow_empty and not v.strip()) or len(v) > max_len:
            raise ValueError
        return v

    return Spec("a string" + ("" if allow_empty else " (not empty)") + f" of at most {max_len} characters", check)


def boolean() -> Spec:
    def check(v):
        if not isinstance(v, bool):
            raise ValueError
        return v

    return Spec("True or False", check)


def problem(name: str, value: Any, spec: Spec, values: dict[str, Any] | None = None) -> str | None:
    """Why `value` is not allowed for parameter `name` (None when it is); with `values` (every parameter's
    value) also why it cannot go with the parameters its spec depends on."""
    try:
        spec.check(value)
    except (ValueError, TypeError, ArithmeticError):
        return f"parameter '{name}' = {short(value)} is not allowed: expected {spec.describe}"
    if spec.rule is None or values is None or any(o not in values for o in spec.on):
        return None
    why = spec.rule(value, *[values[o] for o in spec.on])
    if why:
        others = ", ".join(f"{o} = {short(values[o])}" for o in spec.on)
        return f"parameter '{name}' = {short(value)} is not allowed with {others}: {why}"
    return None


def injected_names(namespace: dict) -> set[str]:
    """The names papermill injected into a notebook's kernel: the assignments of its injected-parameters
    cell (the executed cell that starts with papermill's '# Parameters' comment), read from IPython's
    input history in `namespace`. Empty outside a papermill run."""
    history = namespace.get("_ih") or namespace.get("In") or []
    for src in reversed(list(history)):
        if isinstance(src, str) and src.lstrip().startswith("# Parameters\n"):
            try:
                tree = ast.parse(src)
            except SyntaxError:
                return set()
            return {t.id for node in tree.body if isinstance(node, ast.Assign)
                    for t in node.targets if isinstance(t, ast.Name)}
    return set()


def validate(values: dict[str, Any], specs: dict[str, Spec]) -> dict[str, Any]:
    """Check every parameter in `values` against `specs`; return the normalised values.

    Raises ParameterError with one line per bad parameter, naming its value and the allowed values. In a
    notebook executed by papermill, a parameter passed to it that it does not have (`-p bogus 1`) is an
    error too, not papermill's warning."""
    unknown = set(values) - set(specs)
    if unknown:
        raise ParameterError(f"no spec for parameter(s) {sorted(unknown)}; add one to the validate() call")
    try:
        caller = sys._getframe(1).f_globals
    except ValueError:
        caller = {}
    passed = injected_names(caller) - set(values)
    if passed:
        raise ParameterError(f"parameter(s) {sorted(passed)} were passed to this notebook, which has no such "
                             f"parameter; its parameters: {', '.join(sorted(values))}. Fix: remove them from the "
                             "target's parameters file or the -p options")
    out, bad = {}, []
    for name, spec in specs.items():
        if name not in values:
            bad.append(f"parameter '{name}' is missing from the parameters cell")
            continue
        others_bad = [o for o in spec.on if o in specs and o in values and problem(o, values[o], specs[o])]
        why = problem(name, values[name], spec, None if others_bad else values)
        if why:
            bad.append(f"{why}. Fix: {_fix_hint(name)}")
        else:
            out[name] = spec.check(values[name])
    if bad:
        raise ParameterError("\n".join(bad))
    return out
