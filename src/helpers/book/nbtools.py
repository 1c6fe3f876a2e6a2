"""Source-notebook hygiene: strip outputs, and check the rules every chapter follows.

    python -m helpers.book.nbtools strip notebooks/*.ipynb
    python -m helpers.book.nbtools check notebooks/*.ipynb
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def strip(path: Path) -> bool:
    """Remove outputs and execution counts; return True if the file changed."""
    text = Path(path).read_text()
    nb = json.loads(text)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        cell.get("metadata", {}).pop("execution", None)
        cell.get("metadata", {}).pop("papermill", None)
    nb.get("metadata", {}).pop("papermill", None)
    new = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if new != text:
        Path(path).write_text(new)
        return True
    return False


def problems(path: Path) -> list[str]:
    """The rules a source chapter breaks (empty list: none)."""
    from papermill.translators import PythonTranslator

    nb = json.loads(Path(path).read_text())
    out = []
    if nb.get("metadata", {}).get("kernelspec", {}).get("language") != "python":
        out.append("no python kernelspec in the notebook metadata (papermill needs its language)")
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    if any(c.get("outputs") for c in code):
        out.append("has outputs (source notebooks are committed without them: make strip)")
    tagged = [i for i, c in enumerate(nb["cells"]) if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        out.append(f"{len(tagged)} cells tagged 'parameters' (exactly one is required)")
        return out
    cell = nb["cells"][tagged[0]]
    src = "".join(cell["source"])
    parsed = {p.name for p in PythonTranslator.inspect({"source": src})}
    assigned = {line.split("=", 1)[0].strip() for line in src.splitlines()
                if "=" in line and not line.lstrip().startswith("#")}
    if parsed != assigned:
        out.append(f"papermill cannot parse parameter(s) {sorted(assigned - parsed)} (no '=' in comments)")
    for line in src.splitlines():
        if "=" in line and not line.lstrip().startswith("#") and "#" not in line:
            out.append(f"parameter line without a comment of allowed values: {line.strip()!r}")
    nxt = nb["cells"][tagged[0] + 1:]
    nxt_code = next((c for c in nxt if c["cell_type"] == "code"), None)
    if nxt_code is None or "validate(" not in "".join(nxt_code["source"]):
        out.append("the cell after the parameters cell does not call params.validate(...)")
        return out
    from helpers.book import precheck

    try:   # the runbook checks a run's values with this call before the run starts
        checks = precheck.chapter_checks(path)
    except precheck.PrecheckError as e:
        out.append(str(e))
        return out
    if checks.specs is None:
        out.append(f"{path.stem} has no chapter module: add it to helpers.chapters.MODULES with its PARAMS")
        return out
    unchecked = sorted(set(checks.defaults) - set(checks.specs))
    if unchecked:
        out.append(f"parameter(s) {unchecked} are not checked by the params.validate(...) call")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m helpers.book.nbtools", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["strip", "check"])
    ap.add_argument("paths", nargs="+", type=Path)
    args = ap.parse_args(argv)
    bad = 0
    for p in args.paths:
        if args.command == "strip":
            if strip(p):
                print(f"stripped {p}")
        else:
            for msg in problems(p):
                print(f"{p}: {msg}")
                bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
