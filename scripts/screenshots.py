"""The screenshots of issue 24's acceptance: the pages of the reader review's twelve defects, at 1280 and at
390 px, as docs/screenshots/README.md lists them.

    python scripts/screenshots.py _build/html docs/screenshots/before   # made from runs/h200-20261201f, since retired
    python scripts/screenshots.py _build/html docs/screenshots/after    # the same, after the new run

Per page of PAGES, its first two screens (<page>_1280.png, <page>_390.png); per (page, text) of FINDS, one
screen from just above the first place the page shows that text (<page>_<width>_<text>.png). A text the
page no longer shows (the defect is gone, or folded away) gives no shot, and the script says so: the
after set then has only the page's first screens to compare. Needs headless Chromium (`make browser`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: the pages the review's twelve defects are on (its "Top 12 defects" and its screens table)
PAGES = ["intro", "notebooks/01_environment", "notebooks/02_nan_crash", "notebooks/03_baselines_tuning",
         "notebooks/05_expert_parallelism", "notebooks/06_vm_p2p", "notebooks/07_decode_step",
         "notebooks/07_diagnosis", "appendix/rerun", "appendix/status"]

#: (page, text it shows, the review's defect number): where a defect sits below the first screens
FINDS = [
    ("notebooks/01_environment", "recorded: original VM: reason", 5),
    ("notebooks/01_environment", "gpu_names", 7),
    ("notebooks/02_nan_crash", "flashmla_sparse", 6),
    ("notebooks/02_nan_crash", "was removed in sglang", 8),
    ("notebooks/02_nan_crash", "(expected 8)", 7),
    ("notebooks/03_baselines_tuning", "scaling (derived)", 5),
    ("notebooks/03_baselines_tuning", "chart of output throughput", 10),
    ("notebooks/05_expert_parallelism", "kv_tokens_per_gpu", 5),
    ("notebooks/06_vm_p2p", "NaN in recorded mode", 7),
    ("notebooks/07_decode_step", "[1/16] batch 1", 7),
    ("notebooks/07_decode_step", "reproduces the unsharded logits", 4),
    ("notebooks/07_diagnosis", "used as the all-reduce itself", 4),
    ("notebooks/07_diagnosis", "Each remedy is priced by what it changes", 3),
    ("appendix/status", "a run continued with", 8),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("site", help="the built site (make site: _build/html)")
    p.add_argument("out", help="the folder the PNGs go into")
    p.add_argument("--screens", type=float, default=2, help="screens per page from the top (default 2)")
    args = p.parse_args(argv)
    from helpers.book import shots

    site, out = Path(args.site), Path(args.out)
    try:
        written = shots.take(site, out, PAGES, screens=args.screens, echo=print)
        for page, text, _ in FINDS:
            written += shots.take(site, out, [page], screens=1, find=text, echo=print)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    size = sum(w.stat().st_size for w in written)
    print(f"{len(written)} screenshots in {out} ({size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
