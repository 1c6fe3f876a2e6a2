"""Every chapter: source hygiene, no typed seed figures, bad parameters refused, and execution with
papermill under the `recorded` and `auto` targets followed by a strict book build."""
import json
import re

import pytest

from helpers.book import nbtools, runbook
from helpers import repo_root

ROOT = repo_root()
CHAPTERS = runbook.chapters(ROOT)
STEMS = [runbook.stem(d) for d in CHAPTERS]

# Figures from the seeds that must come from data/, never be typed (same list as the stop hook).
SEED_LITERALS = ["13.7", "210.9", "484.8", "32.59", "166.48", "19.67", "9.49", "3.47", "11.10", "1033", "0.90"]
LITERAL = re.compile(r"(?<![\d.])(" + "|".join(re.escape(s) for s in SEED_LITERALS) + r")(?![\d])")


@pytest.mark.parametrize("doc", CHAPTERS, ids=STEMS)
def test_source_notebook_hygiene(doc):
    assert nbtools.problems(ROOT / f"{doc}.ipynb") == []


@pytest.mark.parametrize("doc", CHAPTERS, ids=STEMS)
def test_no_seed_figure_typed_into_a_notebook(doc):
    nb = json.loads((ROOT / f"{doc}.ipynb").read_text())
    for cell in nb["cells"]:
        m = LITERAL.search("".join(cell["source"]))
        assert not m, f"{doc}: typed figure {m.group(1)} in a {cell['cell_type']} cell; load it from data/"


def test_no_seed_figure_typed_into_src():
    for py in (ROOT / "src").rglob("*.py"):
        for i, line in enumerate(py.read_text().splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            m = LITERAL.search(line)
            assert not m, f"{py}:{i}: typed figure {m.group(1)}"


@pytest.fixture(scope="session")
def one_kernel():
    """A kernel manager whose one kernel every chapter's bad-parameter execution below shares (papermill starts
    it at the first execution and leaves it running: nbclient keeps a kernel it was handed), shut down at the
    end of the session: each chapter's own kernel was about 2 s of CPU (4 where the chapter imports torch), and
    what these tests check is the chapter's first cells, which assign every name they read. Session-scoped, so
    that it is never torn down inside a unit-tier test (tests/conftest.py's guard) and the module's tests still
    spread across workers (one kernel per worker that runs one of them)."""
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="python3")
    yield km
    if km.has_kernel:
        km.shutdown_kernel(now=True)


@pytest.mark.slow
@pytest.mark.parametrize("doc", CHAPTERS, ids=STEMS)
def test_bad_parameter_fails_at_once_naming_it(doc, tmp_path, one_kernel):
    import papermill
    from papermill.exceptions import PapermillExecutionError

    with pytest.raises(PapermillExecutionError) as ei:
        papermill.execute_notebook(str(ROOT / f"{doc}.ipynb"), str(tmp_path / "out.ipynb"),
                                   parameters={"mode": "bogus", "run_dir": str(tmp_path)},
                                   progress_bar=False, kernel_name="python3", cwd=str(ROOT), km=one_kernel)
    assert ei.value.ename == "ParameterError"
    assert "parameter 'mode' = 'bogus'" in ei.value.evalue and "recorded" in ei.value.evalue


# recorded_run and auto_run: one execution of the whole book per target, shared with the other chapter
# tests (tests/conftest.py)


def _check(run, stem):
    proc, manifest, _ = run
    rec = next(c for c in manifest["chapters"] if c["stem"] == stem)
    err = rec.get("error") or {}
    assert rec["status"] == "ok", f"{stem}: {err.get('ename')}: {err.get('evalue')}\n{err.get('traceback', '')[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_chapter_executes_under_recorded(recorded_run, stem):
    _check(recorded_run, stem)


@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_chapter_executes_under_auto(auto_run, stem):
    _check(auto_run, stem)


@pytest.mark.slow
def test_auto_run_builds_strictly_with_a_status_page(auto_run):
    proc, manifest, run = auto_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    html = run.parent / "_build" / "html"   # the fixture's own build folder, not the reader's _build/
    assert (html / "index.html").exists() and f"{html / 'index.html'}" in proc.stdout
    status = (html / "appendix" / "status.html").read_text()
    assert manifest["run_id"] in status
    for stem in STEMS:
        assert (html / "notebooks" / f"{stem}.html").exists()
    # one progress line per chapter, with its time
    lines = [l for l in proc.stdout.splitlines() if re.match(r"\[\s*\d+/\d+\]", l)]
    assert len(lines) == len(STEMS) and all(re.search(r"\d+\.\d s", l) for l in lines)
