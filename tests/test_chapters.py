"""Each chapter module (helpers.chapters) against its notebook, for every notebook whose module exists:
the notebook validates its parameters against the module's PARAMS (the spec the runbook prechecks), and
every key its Markdown cites is named in code, as a field of one of the module's dataclasses of glued
values or as a literal glue("key", ...) in the notebook, never as a dictionary key glued in a loop."""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import importlib
import inspect
import pkgutil
import json
import re

import pytest

from helpers import chapters, repo_root
from helpers.book import precheck
from helpers.core import params

ROOT = repo_root()
#: the notebooks whose chapter module exists (the others still hold their specs and values inline)
STEMS = [stem for stem, name in chapters.MODULES.items()
         if importlib.util.find_spec(f"helpers.chapters.{name}") is not None]
GLUE_REF = re.compile(r"\{glue(?::text|:md|:figure|:)?\}`([^`]+)`")
GLUE_FIGURE = re.compile(r"```\{glue:figure\}\s+(\S+)")
OTHER_PAGE = re.compile(r"notebooks/(\w+)\.ipynb::(\w+)")


def _notebook(stem: str) -> dict:
    return json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())


def _source(cell) -> str:
    return "".join(cell["source"])


def _python(src: str) -> str:
    """A cell's source with IPython lines (%magic, !shell) blanked, so it parses as Python."""
    return "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines())


def _code(stem: str) -> list[ast.Module]:
    """Every code cell of the notebook, parsed (IPython lines blanked)."""
    out = []
    for c in _notebook(stem)["cells"]:
        if c["cell_type"] == "code":
            out.append(ast.parse(_python(_source(c))))
    return out


def _glue_calls(stem: str) -> list[ast.Call]:
    return [n for tree in _code(stem) for n in ast.walk(tree) if isinstance(n, ast.Call)
            and ((isinstance(n.func, ast.Name) and n.func.id == "glue")
                 or (isinstance(n.func, ast.Attribute) and n.func.attr == "glue"))]


def _cited(stem: str) -> set[str]:
    """The keys of this page its Markdown cites ({glue}, {glue:text}, {glue:figure})."""
    md = "\n".join(_source(c) for c in _notebook(stem)["cells"] if c["cell_type"] == "markdown")
    refs = {r.split(":")[0] for r in GLUE_REF.findall(md) if "::" not in r}
    return refs | set(GLUE_FIGURE.findall(md))


def _named_in_code(stem: str) -> set[str]:
    """The keys a reader finds in code: the fields of the chapter module's dataclasses and the literal keys
    of the notebook's glue() calls."""
    mod = chapters.module(stem)
    mods = [mod]
    if hasattr(mod, "__path__"):   # a chapter that is a package: its submodules' dataclasses count too
        mods += [importlib.import_module(m.name) for m in pkgutil.iter_modules(mod.__path__, mod.__name__ + ".")]
    fields = {f.name for m in mods for obj in vars(m).values()
              if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and obj.__module__ == m.__name__
              for f in dataclasses.fields(obj)}
    literal = {c.args[0].value for c in _glue_calls(stem)
               if c.args and isinstance(c.args[0], ast.Constant) and isinstance(c.args[0].value, str)}
    return fields | literal


def _validation_cell(stem: str) -> tuple[dict, ast.Module]:
    """The parameters cell's values and the parsed cell after it."""
    cells = _notebook(stem)["cells"]
    i = next(i for i, c in enumerate(cells) if "parameters" in c.get("metadata", {}).get("tags", []))
    defaults: dict = {}
    exec(_source(cells[i]), {}, defaults)  # literals only
    nxt = next(c for c in cells[i + 1:] if c["cell_type"] == "code")
    return defaults, ast.parse(_python(_source(nxt)))


@pytest.mark.parametrize("stem", STEMS)
def test_the_notebook_validates_against_its_chapter_params(stem):
    mod = chapters.module(stem)
    assert mod.PARAMS and all(isinstance(s, params.Spec) for s in mod.PARAMS.values())
    defaults, cell = _validation_cell(stem)
    aliases = {a.asname or a.name for n in ast.walk(cell) if isinstance(n, ast.ImportFrom)
               and n.module == "helpers.chapters" for a in n.names if a.name == chapters.MODULES[stem]}
    assert aliases, f"{stem}: the validation cell does not import helpers.chapters.{chapters.MODULES[stem]}"
    calls = [n for n in ast.walk(cell) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "validate"]
    assert len(calls) == 1, f"{stem}: the validation cell has {len(calls)} validate() calls, not one"
    values, specs = calls[0].args
    assert (isinstance(specs, ast.Attribute) and specs.attr == "PARAMS" and isinstance(specs.value, ast.Name)
            and specs.value.id in aliases), f"{stem}: validate() is not given the chapter module's PARAMS"
    assert isinstance(values, ast.Dict) and {k.value for k in values.keys} == set(mod.PARAMS) == set(defaults), (
        f"{stem}: the parameters cell, the values validated and PARAMS name different parameters")
    # and the runbook prechecks a run with the same specs
    assert precheck.chapter_checks(ROOT / "notebooks" / f"{stem}.ipynb").specs == mod.PARAMS


@pytest.mark.parametrize("stem", STEMS)
def test_every_key_the_prose_cites_is_named_in_code(stem):
    cited = _cited(stem)
    missing = sorted(cited - _named_in_code(stem))
    assert cited and not missing, (f"{stem} cites {missing}, which are neither fields of a dataclass of "
                                   f"helpers.chapters.{chapters.MODULES[stem]} nor glued by a literal glue() call")


@pytest.mark.parametrize("stem", STEMS)
def test_every_glue_call_names_its_key(stem):
    """No `for key, value in facts.items(): glue(key, value)`: a dataclass and glue_all name them instead."""
    loose = [ast.unparse(c) for c in _glue_calls(stem)
             if not (c.args and isinstance(c.args[0], ast.Constant) and isinstance(c.args[0].value, str))]
    assert not loose, f"{stem} glues keys no line names: {loose}; glue_all a dataclass of the chapter module"


def test_keys_other_pages_cite_are_named_in_their_chapters_code():
    pages = {"intro.md": (ROOT / "intro.md").read_text()}
    pages.update({p.name: "\n".join(_source(c) for c in json.loads(p.read_text())["cells"]
                                    if c["cell_type"] == "markdown")
                  for p in sorted((ROOT / "notebooks").glob("*.ipynb"))})
    missing, checked = [], 0
    for page, text in pages.items():
        for stem, key in OTHER_PAGE.findall(text):
            if stem in STEMS:
                checked += 1
                if key not in _named_in_code(stem):
                    missing.append(f"{page} cites {stem}::{key}")
    assert not missing, missing
    if "90_provenance" in STEMS:
        assert checked, "intro.md cites the provenance page's figures; this test found none"
