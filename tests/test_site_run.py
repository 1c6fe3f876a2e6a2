"""The published site shows the current book: SITE_RUN names a run from a clean commit, with every chapter its
target runs executed and ok, and the chapter sources unchanged since (helpers.book.publish)."""
import json
import shutil

import pytest

from helpers import repo_root
from helpers.book import gputier, publish
from tierreport import tier_record

ROOT = repo_root()
SITE_RUN = publish.site_run(ROOT)


@pytest.mark.integration
def test_the_published_run_is_current_and_whole():
    assert publish.problems(ROOT / SITE_RUN) == []


@pytest.fixture()
def copy(tmp_path):
    dst = tmp_path / "r"
    dst.mkdir()
    shutil.copy(ROOT / SITE_RUN / "manifest.json", dst / "manifest.json")
    shutil.copy(ROOT / SITE_RUN / gputier.JUNIT, dst / gputier.JUNIT)     # the GPU tier's evidence, read again
    return dst


def _edit(run, fn):
    p = run / "manifest.json"
    m = json.loads(p.read_text())
    fn(m)
    p.write_text(json.dumps(m))


def test_a_run_from_a_modified_tree_is_refused(copy):
    _edit(copy, lambda m: m["versions"].update(book_commit=m["versions"]["book_commit"] + "+dirty"))
    assert any("made from a modified commit" in p for p in publish.problems(copy, check_sources=False))


def test_a_chapter_the_target_ran_but_the_run_lacks_is_refused(copy):
    _edit(copy, lambda m: m.update(chapters=[c for c in m["chapters"] if c["stem"] != "07_decode_step"]))
    assert any("chapter 07_decode_step is in _toc.yml but not in the run" in p
               for p in publish.problems(copy, check_sources=False))


def test_a_skipped_chapter_is_refused_unless_the_target_skips_it(copy):
    _edit(copy, lambda m: [c.update(status="skipped") for c in m["chapters"] if c["stem"] == "06_vm_p2p"])
    assert any("chapter 06_vm_p2p is skipped" in p for p in publish.problems(copy, check_sources=False))


@pytest.mark.integration
def test_stale_chapter_sources_are_refused(copy):
    """A clean commit whose notebooks differ from HEAD's: the root commit of this repository."""
    import subprocess

    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=ROOT, capture_output=True,
                           text=True).stdout.split()[0]
    _edit(copy, lambda m: m["versions"].update(book_commit=first[:7]))
    assert any("chapter sources changed since its commit" in p for p in publish.problems(copy))


def test_a_page_shows_what_an_older_run_lacks_and_leaves_the_rest(tmp_path):
    """Rendering a run made before a value existed: the page marks that value 'not in this run' (and a
    missing glued figure likewise); what the run has stays a glue reference."""
    from helpers.book import staging

    pre = "application/papermill.record/"
    nb = {"cells": [{"cell_type": "code", "source": "", "metadata": {}, "outputs": [
        {"output_type": "display_data", "metadata": {"scrapbook": {"name": "old", "mime_prefix": pre}},
         "data": {pre + "text/plain": "11.0"}}]}]}
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "c.ipynb").write_text(json.dumps(nb))
    (tmp_path / "_glued" / "c").mkdir(parents=True)
    (tmp_path / "_glued" / "c" / "have.png").write_bytes(b"png")
    page = ("A {glue:text}`notebooks/c.ipynb::old:.1f` and {glue:text}`notebooks/c.ipynb::new:.0f`.\n\n"
            "```{figure} _glued/c/have.png\n:name: a\nHere.\n```\n\n```{figure} _glued/c/gone.png\n:name: b\nGone.\n```\n")
    text, missing = staging.cite_only_what_the_run_has(page, tmp_path)
    assert "{glue:text}`notebooks/c.ipynb::old:.1f`" in text and "_glued/c/have.png" in text
    assert missing == ["notebooks/c.ipynb::new", "_glued/c/gone.png"]
    assert text.count(staging.NOT_IN_RUN) == 1 and staging.FIGURE_NOT_IN_RUN in text and "gone.png" not in text
    assert staging.cite_only_what_the_run_has(text, tmp_path)[1] == []


def _root_and_head():
    import subprocess

    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=ROOT, capture_output=True,
                           text=True).stdout.split()[0]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return first, head


@pytest.mark.integration
def test_a_replayed_run_is_judged_chapter_by_chapter(copy):
    """A run presented again by runbook --replay: the chapters the replay executed are judged against the
    replay's commit, the ones it kept as measured against the measuring commit, and a replay from a
    modified tree is refused. (The measuring commit here is the repository's first, whose notebooks all
    differ from HEAD's; the replay's is HEAD.)"""
    first, head = _root_and_head()
    stems = [c["stem"] for c in json.loads((copy / "manifest.json").read_text())["chapters"]]

    def replayed(kept, clean=True):
        def fn(m):
            m["versions"].update(book_commit=first[:7])
            m["gpu_tier"] = tier_record(copy, commit=first[:7])
            m["replayed"] = {"book_commit": head[:7], "clean": clean, "chapters": stems, "kept": kept}
        return fn
    _edit(copy, replayed({}))
    assert publish.problems(copy) == []
    _edit(copy, replayed({"07_decode_step": "measured live: no replay mode"}))
    found = publish.problems(copy)
    assert len(found) == 1 and "notebooks/07_decode_step.ipynb" in found[0] and first[:7] in found[0]
    _edit(copy, replayed({}, clean=False))
    assert any("from a modified tree" in p for p in publish.problems(copy))


@pytest.mark.integration
def test_the_published_run_is_named_in_site_run_only():
    """SITE_RUN is the one place the published run's id is written: tests, docs, scripts and the workflows read
    it from the Makefile or name no run (issue 37); only the run's own folder holds it besides."""
    import subprocess

    rid = SITE_RUN.split("/")[1]
    hits = subprocess.run(["git", "grep", "-l", "-F", rid, "--", ".", f":(exclude){SITE_RUN}"], cwd=ROOT,
                          capture_output=True, text=True).stdout.split()
    assert hits == ["Makefile"], f"{rid} is written in {hits}: read it from SITE_RUN instead"


def test_publish_refuses_the_published_run_with_a_failed_or_missing_tier(copy):
    def failed(m):
        bad = [{"name": "tests/test_fp8.py::test_gpu_fp8_step_runs_in_graphs_and_matches_bf16", "message": "x"}]
        m["gpu_tier"] = gputier.record({"passed": [], "failed": bad, "skipped": []}, m["versions"]["book_commit"],
                                       1, "2026-12-04T12:00:00+00:00", 1.0)
    _edit(copy, failed)
    found = publish.problems(copy, check_sources=False)
    assert any("GPU test tier failed" in p and "test_gpu_fp8_step_runs_in_graphs_and_matches_bf16" in p
               for p in found), found
    _edit(copy, lambda m: m.pop("gpu_tier"))
    assert any("no record of the GPU test tier" in p for p in publish.problems(copy, check_sources=False))
