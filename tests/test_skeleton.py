"""Every chapter notebook in `_toc.yml` has the one chapter skeleton of docs/STYLE.md (*A chapter page*):
a `#` title opening the page with its Answer box, Prerequisites and cost (not on the provenance page, which
measures nothing and builds on no chapter), one `parameters` cell before the sections, `##` sections numbered
1, 2, ... in order (a short Overview may precede them), and the closing headings: What's next, a Summary
before it, or for the book's last chapter its Summary."""
import json
import re

import pytest

from helpers import repo_root
from helpers.book import runbook

ROOT = repo_root()
CHAPTERS = [d for d in runbook.toc_entries(ROOT) if (ROOT / f"{d}.ipynb").exists()]
NO_PREREQUISITES = {"notebooks/90_provenance"}          # docs/STYLE.md, item 2
CLOSING = ("## What's next", "## Summary and what's next", "## Summary")


def skeleton_problems(nb: dict, last: bool, prerequisites: bool) -> list[str]:
    """What in a notebook's headings and cells departs from docs/STYLE.md's chapter skeleton."""
    heads, params_at, out = [], [], []
    for i, c in enumerate(nb["cells"]):
        src = "".join(c["source"])
        if c["cell_type"] == "code":
            if "parameters" in c.get("metadata", {}).get("tags", []):
                params_at.append(len(heads))
            continue
        heads += [ln.strip() for ln in src.splitlines() if re.match(r"#{1,6} ", ln)]
        if i == 0 and "{admonition} Answer" not in src:
            out.append("the first cell has no Answer box (:::{admonition} Answer)")
        if "Prerequisites and cost" in src and not params_at:
            heads.append("[prerequisites]")
    if not heads or not heads[0].startswith("# "):
        out.append("the page does not open with a `#` title")
    if [h for h in heads[1:] if h.startswith("# ")]:
        out.append("more than one `#` title")
    if prerequisites and "[prerequisites]" not in heads:
        out.append("no Prerequisites and cost before the parameters cell")
    if len(params_at) != 1:
        out.append(f"{len(params_at)} cells tagged `parameters`, not one")
    sections = [h for h in heads if h.startswith("## ")]
    numbered = [h for h in sections if re.match(r"## \d+\. ", h)]
    if [int(re.match(r"## (\d+)\.", h).group(1)) for h in numbered] != list(range(1, len(numbered) + 1)):
        out.append(f"sections not numbered 1, 2, ... in order: {numbered}")
    if params_at and numbered and params_at[0] > heads.index(numbered[0]):
        out.append("the parameters cell comes after the first section")
    rest = [h for h in sections if h not in numbered]
    opening = [h for h in rest if sections.index(h) < sections.index(numbered[0])] if numbered else []
    closing = [h for h in rest if h not in opening]
    if [h for h in opening if h != "## Overview"]:
        out.append(f"headings before the first section other than Overview: {opening}")
    if [h for h in closing if h not in CLOSING] or not closing:
        out.append(f"closing headings not from {CLOSING}: {closing}")
    elif closing[-1] == "## Summary" and not last:
        out.append("ends with Summary, which only the book's last chapter may do; add What's next")
    if numbered and closing and sections.index(closing[0]) < sections.index(numbered[-1]):
        out.append("a closing heading comes before the last numbered section")
    return out


@pytest.mark.parametrize("doc", CHAPTERS)
def test_every_chapter_has_the_style_guides_skeleton(doc):
    nb = json.loads((ROOT / f"{doc}.ipynb").read_text())
    problems = skeleton_problems(nb, last=doc == CHAPTERS[-1], prerequisites=doc not in NO_PREREQUISITES)
    assert not problems, f"{doc}.ipynb departs from docs/STYLE.md's chapter skeleton: {problems}"


def test_the_check_finds_a_departure():
    nb = json.loads((ROOT / f"{CHAPTERS[0]}.ipynb").read_text())
    for c in nb["cells"]:
        if c["cell_type"] == "markdown":
            c["source"] = "".join(c["source"]).replace("## 2. ", "## 3. ").replace("## What's next", "## Outlook")
    problems = skeleton_problems(nb, last=False, prerequisites=True)
    assert any("numbered" in p for p in problems) and any("closing" in p for p in problems), problems
