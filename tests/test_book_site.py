"""The published site as a reader meets it: self-contained, offline, checked in a real browser.

The browser test needs Debian's Chromium (`make browser` installs it); without it, it is skipped and
says so."""
import re

import pytest

import committed
from helpers import repo_root
from helpers.book import browser, runbook, site

ROOT = repo_root()
#: the run the published site shows (Makefile: SITE_RUN)
SITE_RUN = re.search(r"^SITE_RUN\s*\?=\s*runs/(\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
#: its module fixture is the session's one build of SITE_RUN (tests/conftest.py, committed_site), so its tests
#: may run in different workers under `make test` (pytest-xdist)
SPREAD_ACROSS_WORKERS = True


@pytest.fixture(scope="module")
def built(committed_site):
    """SITE_RUN built strictly, once per session (tests/conftest.py: committed_site; test_committed_runs.py reads it too)."""
    return committed_site(SITE_RUN)


def test_mathjax_ships_from_the_package():
    es5 = site.mathjax_source()
    assert (es5 / "tex-mml-chtml.js").exists()


@pytest.mark.slow
def test_no_page_loads_anything_from_the_network(built):
    assert (built / "_static" / site.ENTRY).exists()
    assert (built / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2" / "MathJax_Main-Regular.woff").exists()
    assert (built / "_static" / "custom.css").exists()
    for page in browser.pages(built):
        text = page.read_text()
        loads = re.findall(r'<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)="((?:https?:)?//[^"]+)"', text)
        assert not loads, f"{page.relative_to(built)} loads {loads[:3]} from the network"
        assert "THEBE_JS_URL" not in text
    for css in (built / "_static").rglob("*.css"):
        assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", css.read_text(errors="replace")), css


@pytest.mark.slow
def test_nothing_of_the_machines_is_on_the_pages(built):
    for page in browser.pages(built):
        text = page.read_text()
        assert not browser.ABS_PATH.search(re.sub(r"<[^>]+>", " ", text)), page
        assert "run_dir = &quot;/" not in text and 'run_dir = "/' not in text
        assert not browser.PROGRESS.search(text), page
    status = (built / "appendix" / "status.html").read_text()
    assert "hostname" not in status
    chapter = (built / "notebooks" / "06_vm_p2p.html").read_text()
    assert "Parameters of this run" in chapter and f"runs/{SITE_RUN}" in chapter


@pytest.mark.slow
def test_every_page_in_a_real_browser(built):
    if not browser.find_chromium():
        pytest.skip(browser.INSTALL_HINT)
    report = browser.check_site(built, echo=lambda *a: None)
    problems = [f"{p['page']}: {e}" for p in report["per_page"] for e in p["errors"]]
    problems += [f"site: {report['length']['error']}"] if report["length"]["error"] else []
    print(browser.summary_line(report))
    # the length at both widths, per page (issue 24's budget: pagecheck.PAGE_BUDGET and SITE_BUDGET)
    assert all(p["screens_desktop"] > 0 and p["screens_phone"] > 0 for p in report["per_page"])
    assert not problems, "\n".join(problems[:40])
    assert report["pages"] >= len(runbook.toc_entries(ROOT))
    assert report["math"] > 0 and report["images"] > 0 and report["links_checked"] > 50
    shots = built.parent / "screenshots"
    assert len(list(shots.glob("*.png"))) == report["pages"] and (shots / "report.json").exists()


OTHER_RUNS, NO_GIT = committed.runs_or_reason(ROOT)


@pytest.mark.slow
@pytest.mark.parametrize("run_id", [r for r in OTHER_RUNS if r != SITE_RUN])
def test_every_other_committed_run_passes_the_browser_check(run_id, committed_site):
    """Issue 24: the browser check passes on every committed run, not only the published one (which
    test_every_page_in_a_real_browser checks): a run made by an older book is presented again by
    `runbook --replay` or retired from the tree (runs/README.md)."""
    if NO_GIT:
        pytest.fail(NO_GIT)
    if not browser.find_chromium():
        pytest.skip(browser.INSTALL_HINT)
    html = committed_site(run_id)   # built strictly once per session, shared with test_committed_runs.py
    # these runs' tables were executed before the tables helper wrote missing values as n/a (issue 35): their
    # blank cells are as executed and pass here; the published run (above) is held to n/a, and nan/None fail
    report = browser.check_site(html, echo=lambda *a: None, blank_cells=False)
    problems = [f"{p['page']}: {e}" for p in report["per_page"] for e in p["errors"]]
    problems += [f"site: {report['length']['error']}"] if report["length"]["error"] else []
    print(run_id, browser.summary_line(report))
    assert not problems, "\n".join(problems[:40])


def test_a_glued_sentence_is_not_a_wall_of_bold():
    """myst-nb sets every glued value in bold; a glued sentence gets the class that sets it in the text's
    weight, a glued figure keeps its bold (reader review, defect 9)."""
    from docutils import nodes

    tree = nodes.paragraph()
    short = nodes.inline("50.1", "50.1", classes=["pasted-text"])
    long = nodes.inline("x" * (site.SENTENCE_CHARS + 1), "x" * (site.SENTENCE_CHARS + 1), classes=["pasted-text"])
    other = nodes.inline("y" * 80, "y" * 80, classes=["something"])
    tree += [short, long, other]
    site._unbold_sentences(None, tree, "page")
    assert "pasted-sentence" in long["classes"] and "pasted-sentence" not in short["classes"]
    assert "pasted-sentence" not in other["classes"]
    css = (repo_root() / "_static" / "custom.css").read_text()
    assert re.search(r"span\.pasted-text\.pasted-sentence\s*\{\s*font-weight:\s*inherit", css)
