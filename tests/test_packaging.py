"""The repository's own promises: one dependency list, two commands, CI runs the tests."""
import re
import tomllib
from pathlib import Path

import yaml

from helpers import repo_root

ROOT = repo_root()


def _norm(req: str) -> str:
    return re.sub(r"\s+", "", req).lower()


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert sorted(map(_norm, project)) == sorted(map(_norm, pip))


def test_torch_is_pinned_to_the_local_cpu_build():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "torch==2.13.0" in map(_norm, project)
    assert "jupyter-book<2" in map(_norm, project)


def test_readme_shows_the_two_commands_and_ci_runs_the_tests():
    readme = (ROOT / "README.md").read_text()
    assert "make book" in readme and "make test" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^book:", make, re.M) and re.search(r"^test:", make, re.M)


def test_every_toc_entry_exists_and_every_notebook_is_in_the_toc():
    from helpers.book import runbook

    docs = runbook.toc_entries(ROOT)
    for d in docs:
        assert (ROOT / f"{d}.md").exists() or (ROOT / f"{d}.ipynb").exists(), f"_toc.yml names missing {d}"
    in_toc = set(docs)
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        assert f"notebooks/{nb.stem}" in in_toc, f"{nb} is not in _toc.yml"


def test_targets_load():
    from helpers.book import runbook

    names = runbook.known_targets(ROOT)
    assert {"recorded", "auto"} <= set(names)
    for n in names:
        t = runbook.load_target(n, ROOT)
        runbook.plan(t, ROOT)  # every parameter is declared by some chapter
