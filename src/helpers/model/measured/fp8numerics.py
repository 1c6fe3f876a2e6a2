"""The FP8 accuracy check of the scaled-down model (helpers.model.step.fp8_check and fp8_product_errors),
computed once on a CPU and committed as a study, so that a CPU run of the book presents it instead of
computing it again (nine decode steps and their FP8 conversions: the slowest cell of the `auto` target on
the 2-core machine, issue 37).

The check is computed, not measured: the same model file, batch, context and seed give the same table on
the same torch and CPU (another CPU or torch moves the last digits). A run whose parameters differ from
the study's, or a GPU run, computes it itself (`select`). To compute the study again:

    python -m helpers.model.measured.fp8numerics --out data/measured/<id>

and register the folder in data/sources.yaml (role `fp8-numerics-cpu`).
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from helpers.core import recorded

ROLE = "fp8-numerics-cpu"
#: the study's two tables (the names the chapter saves them under too)
CHECK_FILE, PRODUCTS_FILE, META_FILE = "fp8_check.csv", "fp8_products.csv", "meta.json"


@dataclass(frozen=True)
class Fp8Numerics:
    """The FP8 check's two tables and where they come from, in words for the page."""

    check: pd.DataFrame
    products: pd.DataFrame
    where: str
    cpu_products: str


def _study_meta(folder: Path) -> dict:
    return json.loads((folder / META_FILE).read_text())


def recorded_numerics(model_key: str, batch: int, context: int, seed: int = 0) -> Fp8Numerics | None:
    """The committed study's tables where it was computed for this model, batch, context and seed, else None."""
    s = recorded.study(ROLE)
    meta = _study_meta(s.path)
    if (meta["model"], meta["batch"], meta["context"], meta["seed"]) != (model_key, batch, context, seed):
        return None
    where = (f"recorded: study {s.id}, computed once on {s.entry['machine']} at commit {s.entry['commit'][:7]} "
             f"({s.entry['command']} computes it again)")
    check, products = (pd.read_csv(s.path / f).drop(columns="source") for f in (CHECK_FILE, PRODUCTS_FILE))
    return Fp8Numerics(check, products, where, meta["cpu_products"])


def compute(model_key: str, batch: int, context: int, seed: int = 0) -> Fp8Numerics:
    """The check computed here and now (on this machine's CPU, whatever the run's device)."""
    from helpers.model import step  # torch: only where the check is computed

    return Fp8Numerics(step.fp8_check(model_key, batch, context, seed), step.fp8_product_errors(model_key),
                       "computed in this run on this machine's CPU", step.fp8.cpu_products())


def select(gpu: bool, model_key: str, batch: int, context: int, seed: int = 0) -> Fp8Numerics:
    """A GPU run computes the check (as it always did); a CPU run presents the committed study where its
    parameters match, and computes the check where they do not."""
    found = None if gpu else recorded_numerics(model_key, batch, context, seed)
    return found if found is not None else compute(model_key, batch, context, seed)


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=recorded.data_dir())
    return out.stdout.strip() or "unknown"


def write(out: Path, model_key: str, batch: int, context: int, seed: int = 0) -> dict:
    """Compute the check and write the study's files into `out`: the two tables (with a `source` column, the
    folder's name), meta.json and COMMIT."""
    import torch

    num = compute(model_key, batch, context, seed)
    out.mkdir(parents=True, exist_ok=True)
    num.check.assign(source=out.name).to_csv(out / CHECK_FILE, index=False)   # the study's id, as data/ rows name it
    num.products.assign(source=out.name).to_csv(out / PRODUCTS_FILE, index=False)
    meta = {"model": model_key, "batch": batch, "context": context, "seed": seed, "cpu_products": num.cpu_products,
            "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
            "threads": torch.get_num_threads()}
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    (out / "COMMIT").write_text(_commit() + "\n")
    return meta


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Compute the FP8 check of the scaled-down model on this CPU and "
                                             "write it as a study folder.")
    ap.add_argument("--out", required=True, type=Path, help="the study folder, data/measured/<id>")
    ap.add_argument("--model", default="glm5-mini", help="a model file stem under data/models/")
    ap.add_argument("--batch", type=int, default=8, help="the chapter's max(cpu_batches)")
    ap.add_argument("--context", type=int, default=96, help="the chapter's max(cpu_contexts)")
    args = ap.parse_args(argv)
    print(json.dumps(write(args.out, args.model, args.batch, args.context), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
