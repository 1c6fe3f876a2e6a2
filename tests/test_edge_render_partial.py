"""A run without some chapters renders in strict mode (issue 36, item 6): a page citing a chapter the run does
not have shows "not in this run" for every form of cross-page glue reference, `{glue:}` included. On 8874c48 the
`{glue:}` form (intro.md cites 90_provenance so) escaped the replacement and the strict build failed for every
`--chapters` run and for rendering an interrupted run. Checked with a real runbook and build on a small book,
and by staging the book's own pages from a copy of a committed run that lacks 90_provenance and 07_diagnosis."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import minibook
from helpers import repo_root
from helpers.book import staging

ROOT = repo_root()
ANY_CROSS_GLUE = re.compile(r"\{glue[^}]*\}`([^`]+?\.ipynb)::")
OK = "glue('answer', 42.0, display=False)\n"


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_chapters_run_renders_strictly_with_every_glue_form_of_a_missing_chapter(tmp_path):
    book = minibook.book(tmp_path / "book", {"01_first": (OK, "First"), "02_second": (OK, "Second")})
    (book / "intro.md").write_text(
        "# Mini\n\nFirst {glue:text}`notebooks/01_first.ipynb::answer:.1f`; second as text "
        "{glue:text}`notebooks/02_second.ipynb::answer:.1f`, plain {glue:}`notebooks/02_second.ipynb::answer` "
        "and {glue}`notebooks/02_second.ipynb::answer`.\n")
    r = subprocess.run([sys.executable, "-m", "helpers.book.runbook", "--target", "quick", "--run-id", "r",
                        "--chapters", "01_first"], cwd=book, env={**os.environ, "BOOK_ROOT": str(book)},
                       capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    intro = (book / "_build" / "html" / "intro.html").read_text()
    assert "42.0" in intro and intro.count("not in this run") == 3, intro


def test_the_books_pages_staged_from_a_run_without_provenance_cite_nothing_the_run_lacks(tmp_path):
    src = ROOT / "runs" / "h200-20261202f"
    run = tmp_path / "run"
    shutil.copytree(src, run, ignore=shutil.ignore_patterns("results"))
    m = json.loads((run / "manifest.json").read_text())
    keep = {"01_environment", "06_vm_p2p"}
    for c in m["chapters"]:
        if c["stem"] not in keep:
            c.update(status="skipped", error={"ename": "Skipped", "evalue": "not part of this run"})
            (run / "notebooks" / f"{c['stem']}.ipynb").unlink(missing_ok=True)
    (run / "manifest.json").write_text(json.dumps(m))
    stage = staging.stage(run, ROOT, tmp_path / "stage")
    left = []
    for md in stage.rglob("*.md"):
        for nb in ANY_CROSS_GLUE.findall(md.read_text()):
            if not (stage / nb).exists():
                left.append(f"{md.relative_to(stage)} cites {nb}")
    assert not left, left
    assert staging.NOT_IN_RUN in (stage / "intro.md").read_text()
