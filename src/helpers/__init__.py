"""Shared logic of the GLM-5 PCIe investigation book.

Laid out by concern, one subpackage each:
- `helpers.core`: the base (where a run's results live, parameters, glue, tables, figures, recorded data,
  bounded processes), which imports nothing above it;
- `helpers.chapters`: one module per notebook, what each chapter presents;
- `helpers.book`: the top: the runbook (executes chapters, records a run, builds the site), staging, the
  browser check;
- `helpers.machine`: the environment probe and its verdicts, the GPU monitor, CUDA libraries;
- `helpers.interconnect`: copy and collective harnesses, the NCCL binding, fits, fidelity checks;
- `helpers.model`: model arithmetic and the decode-step budget;
- `helpers.serving`: real inference servers, the load generator, sweeps and their reports.
"""
from functools import lru_cache
from pathlib import Path

__version__ = "0.1.0"


def repo_root() -> Path:
    """The repository root (the folder holding _toc.yml): $BOOK_ROOT if set, else found from this
    file's location or the working directory. Looked up once per ($BOOK_ROOT, working directory): a runbook
    call asks for it thousands of times (the bad-inputs test: 9,354 calls, 4.6 s)."""
    import os

    return _find_root(os.environ.get("BOOK_ROOT") or "", os.getcwd())


@lru_cache(maxsize=64)
def _find_root(env: str, cwd: str) -> Path:
    if env:
        root = Path(env).resolve()
        if not (root / "_toc.yml").exists():
            raise FileNotFoundError(f"BOOK_ROOT={env} has no _toc.yml; point it at the book's checkout")
        return root
    for start in (Path(__file__).resolve(), Path(cwd).resolve()):
        for p in (start, *start.parents):
            if (p / "_toc.yml").exists() and (p / "data").is_dir():
                return p
    raise FileNotFoundError(
        "cannot find the book's repository root (a folder with _toc.yml and data/); "
        "install the package with `pip install -e .` from a checkout, or run from inside it"
    )
