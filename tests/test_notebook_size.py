"""The notebooks stay thin (issue 37, item 6): at most MAX_TOTAL lines of code across notebooks/*.ipynb and no
code cell over MAX_CELL lines, counting every line of a code cell's source, blank ones included. Logic goes
into the chapter modules (helpers.chapters: one function per section returning its values, tables and
figure data); a notebook keeps its parameters, the calls, the glue and the display. Read from the .ipynb
JSON; nothing executes."""
from __future__ import annotations

import json

from helpers import repo_root

ROOT = repo_root()
MAX_TOTAL = 700
MAX_CELL = 45


def _lines(cell: dict) -> int:
    src = cell.get("source", "")
    return len(("".join(src) if isinstance(src, list) else src).splitlines())


def size_problems(notebooks: dict[str, dict], max_total: int = MAX_TOTAL, max_cell: int = MAX_CELL) -> list[str]:
    """What breaks the size rule in `notebooks` (name -> the notebook's JSON): each code cell over `max_cell`
    lines, named by notebook, cell number (0-based, counting every cell) and its first line, and a total over
    `max_total` with each notebook's share."""
    out, per = [], {}
    for name, nb in sorted(notebooks.items()):
        per[name] = 0
        for i, cell in enumerate(nb.get("cells", [])):
            if cell.get("cell_type") != "code":
                continue
            n = _lines(cell)
            per[name] += n
            if n > max_cell:
                first = "".join(cell["source"]).splitlines()[0][:60]
                out.append(f"{name}: code cell {i} ({first!r}) has {n} lines, over {max_cell}: move its logic into "
                           "the chapter module (helpers.chapters), one function per section")
    total = sum(per.values())
    if total > max_total:
        shares = ", ".join(f"{k} {v}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]))
        out.append(f"the notebooks hold {total} lines of code, over {max_total} ({shares})")
    return out


def _committed() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))}


def test_the_notebooks_are_thin():
    notebooks = _committed()
    assert len(notebooks) >= 9, f"found only {sorted(notebooks)} under notebooks/"
    problems = size_problems(notebooks)
    assert not problems, "\n".join(problems)


def _code(lines: int) -> dict:
    return {"cell_type": "code", "source": [f"x{k} = {k}\n" for k in range(lines - 1)] + ["y = 0"]}


def test_a_long_cell_is_named_by_notebook_and_cell():
    nb = {"cells": [{"cell_type": "markdown", "source": ["# t"]}, _code(MAX_CELL), _code(MAX_CELL + 1)]}
    problems = size_problems({"08_new.ipynb": nb})
    assert len(problems) == 1 and problems[0].startswith("08_new.ipynb: code cell 2 ('x0 = 0') has 46 lines")


def test_blank_lines_count_and_a_total_over_the_limit_is_refused():
    blank = {"cell_type": "code", "source": ["\n"] * 29 + ["x = 1"]}
    assert _lines(blank) == 30
    notebooks = {f"{k:02d}.ipynb": {"cells": [blank] * 6} for k in range(4)}       # 4 x 6 x 30 = 720 lines
    problems = size_problems(notebooks)
    assert problems == ["the notebooks hold 720 lines of code, over 700 "
                        "(00.ipynb 180, 01.ipynb 180, 02.ipynb 180, 03.ipynb 180)"]
    assert size_problems(notebooks, max_total=720) == []


def test_every_cell_has_an_id():
    """nbformat 4.5 gives every cell an id; a cell without one (07_diagnosis's held-out cell, added by hand)
    made nbformat print a warning on every runbook call before the runbook's own one-line refusal."""
    for nb in sorted((repo_root() / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        missing = [i for i, c in enumerate(cells) if not c.get("id")]
        assert not missing, f"{nb.name}: cells {missing} have no id (open and save it in Jupyter, or give each a short unique \"id\")"
