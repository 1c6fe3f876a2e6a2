"""A throw-away book for the runbook's tests: real chapters (a parameters cell, a validation cell and a
body that globs `answer`), the repository's data and _config.yml, a status appendix and a quick target."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from helpers import repo_root


def chapter(path: Path, body: str, title: str) -> None:
    """A notebook chapter at `path` whose prose cites the glued `answer` and whose last cell runs `body`
    (with `out`, the chapter's run folder, and `glue`, `results`, `pd` in scope)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    p = nbformat.v4.new_code_cell('mode = "auto"  # allowed: "recorded", "auto"\nrun_dir = ""  # run folder')
    p.metadata["tags"] = ["parameters"]
    nb.cells = [
        nbformat.v4.new_markdown_cell(f"# {title}\n\nValue: {{glue:text}}`answer:.1f`"),
        p,
        nbformat.v4.new_code_cell(
            "from helpers.core import layout, params, results\nfrom helpers.core.glue import glue\nimport pandas as pd\n"
            "P = params.validate({'mode': mode, 'run_dir': run_dir}, "
            "{'mode': params.choice('recorded', 'auto'), 'run_dir': params.string()})\n"
            f"out = layout.Run(run_dir, '{path.stem}').folder\n" + body),
    ]
    nbformat.write(nb, path)


def book(root: Path, chapters: dict[str, tuple[str, str]]) -> Path:
    """A book at `root` with `chapters` (notebook stem: (body, title)) in that order, then the status
    appendix, and the target `quick` (mode auto)."""
    (root / "notebooks").mkdir(parents=True)
    (root / "targets").mkdir()
    shutil.copytree(repo_root() / "data", root / "data")
    shutil.copy(repo_root() / "_config.yml", root / "_config.yml")
    (root / "intro.md").write_text("# Mini\n\nA test book.\n")
    (root / "appendix").mkdir()
    (root / "appendix" / "status.md").write_text("# Run status\n\nplaceholder\n")
    (root / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n"
                                   + "".join(f"  - file: notebooks/{stem}\n" for stem in chapters)
                                   + "  - file: appendix/status\n")
    for stem, (body, title) in chapters.items():
        chapter(root / "notebooks" / f"{stem}.ipynb", body, title)
    (root / "targets" / "quick.yaml").write_text("description: a quick target\nparameters: {mode: auto}\n")
    return root


def start_runbook(book: Path, tag: str, *args: str) -> subprocess.Popen:
    """The runbook's command line as a real process on the throw-away `book` (BOOK_ROOT), tagged with `tag`
    (BOOK_TEST_TAG, for tests/proctags.py), its output piped."""
    env = {**os.environ, "BOOK_ROOT": str(book), "BOOK_TEST_TAG": tag}
    return subprocess.Popen([sys.executable, "-m", "helpers.book.runbook", *args], env=env, cwd=book,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_rows(path: Path, n: int, within_s: float = 120) -> None:
    """Wait until the rows file `path` holds `n` whole rows; AssertionError after `within_s`."""
    from helpers.core import results

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if len(results.read_rows(path)) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never had {n} rows")
