"""The repository's own promises: one dependency list, two commands, CI runs the tests."""
import re
import tomllib
from pathlib import Path

import pytest
import yaml

import committed

from helpers import repo_root

ROOT = repo_root()


def _norm(req: str) -> str:
    return re.sub(r"\s+", "", req).lower()


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[;\s]", req.strip(), maxsplit=1)[0].lower()


def _cpu_pin() -> str:
    lines = [ln.split("#")[0].strip() for ln in (ROOT / "constraints" / "cpu.txt").read_text().splitlines()]
    return next(_norm(ln) for ln in lines if _name(ln) == "torch")


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    """environment.yml is the isolated-cpu environment: the package, its extras run, site and test, with
    torch pinned as constraints/cpu.txt pins it."""
    project = _project()
    extras = project["optional-dependencies"]
    expected = [_norm(r) for r in project["dependencies"] + extras["run"] + extras["site"] + extras["test"]]
    expected = [_cpu_pin() if _name(r) == "torch" else r for r in expected]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert sorted(map(_norm, pip)) == sorted(expected)


def test_torch_range_admits_the_builds_the_book_ran_on_and_the_cpu_pin_lives_in_a_constraints_file():
    from packaging.specifiers import SpecifierSet

    run = _project()["optional-dependencies"]["run"]
    torch = next(r for r in run if _name(r) == "torch")
    spec = SpecifierSet(torch[len("torch"):])
    for v in ("2.11.0", "2.11.0+cu130", "2.13.0", "2.13.0+cpu", "2.14.1"):  # H200, CPU machines, sglang 0.5.23
        assert spec.contains(v), f"pyproject's {torch!r} must admit torch {v}"
    assert "==" not in torch, "the CPU pin belongs in constraints/cpu.txt, not in pyproject.toml"
    assert _cpu_pin() == "torch==2.13.0"
    assert spec.contains(_cpu_pin().split("==")[1])
    assert "jupyter-book<2" in map(_norm, _project()["optional-dependencies"]["site"])


def test_executing_needs_no_book_toolchain_and_the_package_needs_neither():
    project = _project()
    extras = project["optional-dependencies"]
    assert {"run", "site", "test"} <= set(extras)
    base = {_name(r) for r in project["dependencies"]}
    run = {_name(r) for r in extras["run"]}
    for tool in ("jupyter-book", "sphinx", "myst-nb", "pytest"):
        assert tool not in run | base, f"{tool} must not be needed to execute the chapters"
    assert {"papermill", "ipykernel", "torch"} <= run and not {"papermill", "torch"} & base
    assert {_name(r) for r in extras["site"]} == {"jupyter-book", "django-static-mathjax"}  # + offline MathJax
    assert {"pytest", "pytest-timeout"} <= {_name(r) for r in extras["test"]}


def test_the_makefile_installs_each_use_its_extras_and_pins_cpu_torch_only_where_no_driver_answers():
    make = (ROOT / "Makefile").read_text()
    assert "book-env.sh run,site,test" in make and "book-env.sh run\n" in make and "book-env.sh site\n" in make
    assert re.search(r"^run: install-run$", make, re.M) and re.search(r"^render: install-site$", make, re.M)
    script = (ROOT / "scripts" / "book-env.sh").read_text()
    # the constraints file is passed for the isolated-cpu kind only; WHEELS means no registry
    assert re.search(r"isolated-cpu\) cons=\(-c constraints/cpu.txt\)", script)
    assert "--no-index --find-links" in script
    assert "torch==2.13.0" not in make + script


def test_readme_shows_the_two_commands_and_ci_runs_them_in_its_order():
    """The README's two commands, `make book` then `make test`, are what CI runs, in that order, on the
    same checkout (the browser install before them), each step timed."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Two commands.*?```bash\n(.*?)```", readme, re.S).group(1)
    assert [ln.split("#")[0].strip() for ln in block.splitlines()] == ["make book", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    steps = re.findall(r"^step \"[^\"]+\" (make \w+)", ci, re.M)
    assert steps == ["make browser", "make book", "make test"], steps
    assert re.search(r"^step\(\) \{", ci, re.M) and "date +%s" in ci
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
    """Every target plans here, or, one whose `requires` this machine does not meet, is refused for that
    alone (after every parameter was checked against the chapters; see test_targets.py)."""
    from helpers.book import runbook

    names = runbook.known_targets(ROOT)
    assert {"recorded", "auto", "sglang-8gpu"} <= set(names)
    for n in names:
        t = runbook.load_target(n, ROOT)
        try:
            runbook.plan(t, ROOT)  # every parameter is declared by some chapter
        except runbook.RunbookError as exc:
            assert t.requires and "cannot run here" in str(exc), exc


@pytest.mark.integration
def test_the_published_site_is_named_and_built_by_the_workflow():
    """`make site` renders SITE_RUN, a committed run the README names; the Pages workflow runs it, and
    the site extra carries what bundles MathJax."""
    make = (ROOT / "Makefile").read_text()
    site_run = re.search(r"^SITE_RUN\s*\?=\s*(runs/\S+)", make, re.M).group(1)
    assert site_run.split("/")[1] in committed.runs(ROOT), f"SITE_RUN {site_run} is not a run git tracks"
    readme = (ROOT / "README.md").read_text()
    assert "SITE_RUN" in readme and site_run.split("/")[1] not in readme, \
        "the README says where the published run is named (SITE_RUN), and does not write its id again"
    assert re.search(r"^site: install-site$", make, re.M)
    workflow = (ROOT / ".github" / "workflows" / "pages.yml").read_text()
    assert "make site" in workflow and "path: _build/html" in workflow
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(_norm(d).startswith("django-static-mathjax") for d in extras["site"])
