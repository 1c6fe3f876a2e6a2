"""Register the predictor's bands for every held-out observation, before any comparison.

Reads data/reference/holdouts.csv (the configurations: system, deployment, checkpoint, concurrency, context; the
observed figure is not read) and writes data/reference/holdout_bands.csv: per holdout the point (the draws'
median), the 5-95 % band and the draws' quantiles every 5 % (so an observation's percentile can be read from the
registered distribution without running the predictor again), in the holdout's own unit (aggregate tokens/s, or
per stream). The file is committed before any code compares it with an observation; its `registered` column
names that commit once it is known (the commit after it fills it in).

    .venv/bin/python benchmarks/register_holdouts.py [--out data/reference/holdout_bands.csv]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from helpers.core import recorded
from helpers.model.verdict import predictor as pr

QUANTILES = tuple(range(0, 101, 5))


def bands(holdouts: pd.DataFrame, predictor_commit: str) -> pd.DataFrame:
    rows = []
    for h in holdouts.drop(columns=["observed"]).itertuples(index=False):
        s = pr.deployment_settings(h.deployment)
        s = pr.EngineSettings(**{**pr.as_dict(s), "checkpoint": h.checkpoint})
        p = pr.predict(h.model, h.system, 8, int(h.concurrency), int(h.context), s)
        per = "stream" if str(h.metric).startswith("per-stream") else "aggregate"
        scale = 1.0 / h.concurrency if per == "stream" else 1.0
        q = np.percentile(p.draws * scale, QUANTILES)
        rows.append({"key": h.key, "system": p.system, "deployment": h.deployment, "concurrency": int(h.concurrency),
                     "context": int(h.context), "per": per, "point": p.tok_s * scale, "band_low": p.band[0] * scale,
                     "band_high": p.band[1] * scale, "quantiles": ";".join(f"{v:.4g}" for v in q),
                     "predictor": f"helpers.model.verdict.predictor at {predictor_commit}",
                     "registered": "by the commit that added this file (git log); filled in by the next",
                     "source": "aiconfigurator-core-0.12.0"})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("data/reference/holdout_bands.csv"))
    a = ap.parse_args(argv)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "src"], capture_output=True, text=True).stdout.strip()
    commit = f"{head}{' + uncommitted changes under src/' if dirty else ''}"
    out = bands(recorded.load("reference/holdouts.csv"), commit)
    out.to_csv(a.out, index=False, float_format="%.6g")
    print(f"{a.out}: {len(out)} bands", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
