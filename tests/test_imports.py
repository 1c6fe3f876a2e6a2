"""The package's import graph: a base nothing imports back into, no import running up the layers, no cycle.

Every import counts, at module level or inside a function (an import inside a function is still a
dependency; hiding it there only delays the cycle). Layers, lowest first; a module may import its own
subpackage and any lower layer, nothing else:

    core  <  machine  <  interconnect  <  model, serving  <  chapters  <  book

`helpers` itself (repo_root) is below everything.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import helpers

SRC = Path(helpers.__file__).resolve().parent
LAYERS = (("core",), ("machine",), ("interconnect",), ("model", "serving"), ("chapters",), ("book",))
RANK = {sub: i for i, subs in enumerate(LAYERS) for sub in subs}


def _modules() -> dict[str, Path]:
    out = {}
    for p in SRC.rglob("*.py"):
        parts = ["helpers", *p.relative_to(SRC).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the helpers modules it imports (anywhere in its body)."""
    mods = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                if t and t != m and t.startswith("helpers"):
                    edges[m].add(t)
    return edges


def _sub(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_subpackage_has_a_layer():
    subs = {_sub(m) for m in _modules()} - {None}
    assert subs <= set(RANK), f"subpackages without a layer in this test's LAYERS: {sorted(subs - set(RANK))}"


def test_no_import_runs_up_the_layers():
    up = []
    for a, targets in import_graph().items():
        for b in targets:
            sa, sb = _sub(a), _sub(b)
            if sa and sb and sa != sb and RANK[sb] >= RANK[sa]:
                up.append(f"{a} imports {b} ({sb} is not below {sa})")
    assert not up, "imports that run up or across the layers:\n" + "\n".join(sorted(up))


def test_no_cycle_between_modules():
    graph = import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    assert not cycles, "modules that import each other (counting imports inside functions):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)

