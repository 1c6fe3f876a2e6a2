"""Shared logic of the GLM-5 PCIe investigation book.

One module per concern: `recorded` loads the investigation's figures from data/, `params` validates
notebook parameters, `results` stores a run's tables, `plotting` draws every figure, `runbook`
executes the chapters and builds the site.
"""
from pathlib import Path

__version__ = "0.1.0"


def repo_root() -> Path:
    """The repository root (the folder holding _toc.yml): $BOOK_ROOT if set, else found from this
    file's location or the working directory."""
    import os

    env = os.environ.get("BOOK_ROOT")
    if env:
        root = Path(env).resolve()
        if not (root / "_toc.yml").exists():
            raise FileNotFoundError(f"BOOK_ROOT={env} has no _toc.yml; point it at the book's checkout")
        return root
    for start in (Path(__file__).resolve(), Path.cwd().resolve()):
        for p in (start, *start.parents):
            if (p / "_toc.yml").exists() and (p / "data").is_dir():
                return p
    raise FileNotFoundError(
        "cannot find the book's repository root (a folder with _toc.yml and data/); "
        "install the package with `pip install -e .` from a checkout, or run from inside it"
    )
