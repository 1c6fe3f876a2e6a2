"""The package's import graph: a base nothing imports back into, no import running up the layers, no cycle,
no module reaching into another module's private names.

Every import counts, at module level or inside a function (an import inside a function is still a
dependency; hiding it there only delays the cycle). Importing `a.b.c` runs the `__init__` of each package on
the way (`a`, `a.b`) that the importer is not itself inside, so the graph has an edge to each of those
packages too: a cycle hidden behind a package's `__init__` is still a cycle. Layers, lowest first; a module
may import its own subpackage and any lower layer, nothing else:

    core  <  machine  <  interconnect  <  model, serving  <  chapters  <  book

`helpers` itself (repo_root) is below everything.

Private names: a name starting with `_` (not a dunder) stays inside its module; a module whose own name
starts with `_` (`chapters/_serving.py`) is private to its package and may be imported by its siblings.
Where a name is shared between modules it is public.
"""
from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

import helpers

SRC = Path(helpers.__file__).resolve().parent
LAYERS = (("core",), ("machine",), ("interconnect",), ("model", "serving"), ("chapters",), ("book",))
RANK = {sub: i for i, subs in enumerate(LAYERS) for sub in subs}


def _modules(root: Path = SRC) -> dict[str, Path]:
    out = {}
    for p in root.rglob("*.py"):
        parts = [root.name, *p.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(m: str, p: Path, mods: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(imported module, imported names) for each import in module `m`, from `p`'s syntax tree."""
    return _parsed_imports(m, p.name == "__init__.py", p.read_text(), str(p))


@functools.lru_cache(maxsize=None)
def _parsed_imports(m: str, is_package: bool, text: str, where: str) -> list[tuple[str, list[str]]]:
    """Parsed once per module text: the three tests below read the same files."""
    pkg = m if is_package else m.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(text, where)):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out.append((base, [a.name for a in node.names]))
    return out


def _resolve(t: str, mods: dict[str, Path]) -> str:
    while t and t not in mods:
        t = t.rsplit(".", 1)[0] if "." in t else ""
    return t


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """module -> the package's modules it imports (anywhere in its body), and the packages whose `__init__`
    that import runs (those the importer is not inside)."""
    mods = _modules(root)
    edges: dict[str, set[str]] = defaultdict(set)
    for m, p in mods.items():
        inside = {m, *_ancestors(m)}
        for base, names in _imports(m, p, mods):
            for t in [f"{base}.{n}" for n in names] + [base]:
                t = _resolve(t, mods)
                if not t or not t.startswith(root.name):
                    continue
                edges[m].update(x for x in [*_ancestors(t), t] if x in mods and x not in inside)
    return edges


def private_imports(root: Path = SRC) -> list[str]:
    """`from X import _name` where `_name` is a private name of another module (a private module imported by
    a sibling in its own package is allowed)."""
    mods = _modules(root)
    out = []
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for base, names in _imports(m, p, mods):
            owner = _resolve(base, mods)
            if not owner or owner == m or not base.startswith(root.name):
                continue
            for n in names:
                if not n.startswith("_") or n.startswith("__"):
                    continue
                if f"{base}.{n}" in mods and base == pkg:
                    continue                                  # a sibling of the private module
                out.append(f"{m} imports {n} from {base}")
    return sorted(out)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

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
                found.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


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
    found = cycles(import_graph())
    assert not found, ("modules that import each other (counting imports inside functions and the package "
                       "__init__ an import runs):\n" + "\n".join(" <-> ".join(c) for c in found))


def test_no_module_imports_another_modules_private_name():
    found = private_imports()
    assert not found, ("imports of another module's _private name (make the name public where it is shared, "
                       "or move it):\n" + "\n".join(found))


def _package(tmp: Path, files: dict[str, str]) -> Path:
    root = tmp / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_cycle_behind_a_package_init_is_found(tmp_path):
    """step <-> steptime as it was: steptime imports step.build, which runs step/__init__, which imports
    step.checks, whose function imports steptime. No two files import each other directly."""
    root = _package(tmp_path, {
        "step/__init__.py": "from .checks import check\n",
        "step/build.py": "def build():\n    pass\n",
        "step/checks.py": "def check():\n    from .. import steptime\n",
        "steptime.py": "from .step.build import build\n",
    })
    assert cycles(import_graph(root)) == [["pkg.step", "pkg.step.checks", "pkg.steptime"]]
    (root / "step/checks.py").write_text("def check():\n    pass\n")
    assert cycles(import_graph(root)) == []


def test_a_private_import_across_modules_is_found(tmp_path):
    root = _package(tmp_path, {
        "a.py": "def _now():\n    pass\n",
        "b.py": "from .a import _now\n",
        "c.py": "from pkg.a import _now as now\n",
        "sub/__init__.py": "from ._impl import x\n",
        "sub/_impl.py": "x = 1\n",
        "sub/user.py": "from pkg.sub import _impl\n",
        "other.py": "from pkg.sub import _impl\n",
        "d.py": "def _own():\n    pass\n__all__ = ['__version__']\nfrom .a import __doc__\n",
    })
    assert private_imports(root) == ["pkg.b imports _now from pkg.a", "pkg.c imports _now from pkg.a",
                                     "pkg.other imports _impl from pkg.sub"]
