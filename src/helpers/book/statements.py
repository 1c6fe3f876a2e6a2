"""One quantity, one value, on every page that states it (issue 35): the figures the site states more than once,
read back from the rendered pages as a reader sees them, and every two that disagree.

Each `Statement` is a sentence of one page, found by a pattern whose groups capture the figures it states, each
named by the quantity it is. `collect` reads them from the pages' text; `disagreements` compares every two
figures stated for the same quantity, each at the precision it is printed with (51.2 and 51 agree; 51.2 and 52
do not), and names the pages and sentences. A statement that is not found is a problem too: a reworded
sentence must be registered again, or the check would pass by finding nothing."""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

NUM = r"(-?[\d,]+(?:\.\d+)?)"


@dataclass(frozen=True)
class Statement:
    page: str                  # the page's path under the site's root, without .html
    quantities: tuple          # the quantity each group of `pattern` states
    pattern: str               # a regex over the page's text (whitespace collapsed); {n} stands for a number

    def regex(self) -> re.Pattern:
        return re.compile(self.pattern.replace("{n}", NUM))


INTRO, DIAG, P2P = "intro", "notebooks/07_diagnosis", "notebooks/06_vm_p2p"

STATEMENTS = (
    # bare metal predicted (the band's median) and its band, at one stream and at 64
    Statement(INTRO, ("bm_pt_1", "bm_lo_1", "bm_hi_1"),
              r"predict a bare-metal machine: {n} tokens/s for one stream \(band {n} - {n}"),
    Statement(INTRO, ("bm_pt_64", "bm_lo_64", "bm_hi_64"), r"\) and {n} at 64 \(band {n} - {n} ,"),
    Statement(DIAG, ("bm_pt_1", "bm_lo_1", "bm_hi_1"),
              r"as the median of the band's draws: {n} tokens/s for one stream \(band {n} - {n} \)"),
    Statement(DIAG, ("bm_pt_64", "bm_lo_64", "bm_hi_64"), r"and {n} at concurrency 64 \(band {n} - {n} \)"),
    Statement(DIAG, ("bm_pt_1", "bm_pt_64"), r"predicts {n} and {n} tokens/s, the one bare-metal prediction"),
    # the one-stream step and its split
    Statement(INTRO, ("step_mid_1", "split_experts_1", "split_ar_1", "split_attention_1", "split_rest_1"),
              r"every input at its middle value, its one-stream step of {n} ms is experts {n} %, all-reduces {n} %(?: \([^)]*\))?, the attention core[^%]*? {n} %, "
              r"the rest \(the attention's projections among it\) {n} %"),
    Statement(DIAG, ("step_1", "step_mid_1", "split_experts_1", "split_ar_1", "split_attention_1", "split_rest_1"),
              r"The one-stream step, {n} ms \(the band's median; the shares are of the step at every input's middle "
              r"value, {n} ms\), is experts {n} %, all-reduces {n} %(?: \([^)]*\))?, the attention core[^%]*? {n} % and the rest {n} %"),
    Statement(DIAG, ("step_1",), r"a bare-metal step is {n} ms for one stream"),
    Statement(DIAG, ("step_1",), r"a bare-metal GLM-5 step on these GPUs should take {n} ms for one stream"),
    # the VM's loss and the host path's share of it
    Statement(INTRO, ("loss_1",), r"The VM lost {n} ms per token against bare metal as observed"),
    Statement(DIAG, ("loss_1",), r"of the {n} ms lost per token"),
    Statement(INTRO, ("share_lo_1", "share_hi_1"), (r"the host-memory all-reduce causes \(the cost of a step's \d+ all-reduces above "
                                                 r"bare metal's, over the loss\): {n} % to {n} % for one")),
    Statement(DIAG, ("share_lo_1", "share_hi_1"), r"the VM's host path explains {n} % to {n} % of the"),
    # the original VM's decision rule (explains, cannot explain), stated at both sizes wherever it is stated; page 1
    # states no threshold since issue 44 (another machine's come from its own loss: chapter 08)
    # (the row at 64 takes a decode batch of 64; section 5 and its takeaway also give the achieved batch's: site-read7 S6)
    Statement(DIAG, ("thr_explains_1", "thr_explains_64", "thr_cannot_1", "thr_cannot_64", "cannot_pct"),
              r"all-reduce there of {n} µs or more at 12 KiB and {n} µs at 768 KiB \(a batch of 64; section 5 gives the "
              r"achieved batch's\) means the host path is the loss; {n} µs and {n} µs or less means it explains {n} % or less"),
    Statement(DIAG, ("thr_explains_1", "thr_explains_64", "thr_cannot_1", "thr_cannot_64"),
              r"on the original VM, an 8-GPU all-reduce at {n} µs or more at 12 KiB and {n} µs at 768 KiB means its host "
              r"path is the loss; at {n} µs and {n} µs or less, look elsewhere \(at a batch of 64; section 5 gives the "
              r"achieved batch's\)"),
    Statement(DIAG, ("thr_explains_ach", "thr_cannot_ach"),
              r"at the achieved [\d.]+ in flight the rule reads {n} and {n} µs at 420 KiB"),
    # the H200 pair's all-reduce the P2P chapter answers with (nccl-tests, 16 KiB, P2P on and off)
    Statement(INTRO, ("h200_ar_p2p", "h200_ar_nop2p"), r"{n} µs over NVLink and {n} µs with P2P off"),
    Statement(P2P, ("h200_ar_p2p", "h200_ar_nop2p"),
              r"a 16 KiB all-reduce took {n} µs and {n} µs \(measured in the book's committed study"),
)


def page_text(html_text: str) -> str:
    """A rendered page's readable text: the article body without scripts, styles or code cells' input, tags
    removed and whitespace collapsed to single spaces (as the patterns are written)."""
    m = re.search(r"<main.*?</main>", html_text, re.S)
    t = m.group(0) if m else html_text
    t = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", t, flags=re.S)
    t = re.sub(r'<div class="cell_input.*?</div>\s*</div>', " ", t, flags=re.S)
    t = html.unescape(re.sub(r"<[^>]+>", " ", t))
    return re.sub(r"\s+", " ", t)


def read_site(root: str | Path) -> dict[str, str]:
    """The text of each page the statements name, from a built site (<root>/<page>.html); absent pages omitted."""
    out = {}
    for page in sorted({s.page for s in STATEMENTS}):
        f = Path(root) / f"{page}.html"
        if f.is_file():
            out[page] = page_text(f.read_text(encoding="utf-8", errors="replace"))
    return out


def _number(text: str) -> tuple[float, int]:
    t = text.replace(",", "")
    return float(t), (len(t.split(".")[1]) if "." in t else 0)


def collect(pages: dict[str, str], statements=STATEMENTS) -> tuple[list[dict], list[str]]:
    """Every figure the statements find ({quantity, value, decimals, page, said}), and the statements not found."""
    found, missing = [], []
    for s in statements:
        if s.page not in pages:
            missing.append(f"{s.page}: page not in the site")
            continue
        hits = list(s.regex().finditer(pages[s.page]))
        if not hits:
            missing.append(f"{s.page}: no sentence matches {s.pattern!r} (reworded? register it again)")
        for m in hits:
            for q, g in zip(s.quantities, m.groups()):
                v, dec = _number(g)
                found.append({"quantity": q, "value": v, "decimals": dec, "page": s.page, "said": m.group(0)})
    return found, missing


def disagreements(found: list[dict]) -> list[str]:
    """Every two figures of one quantity that differ by more than the coarser one's printed precision allows."""
    out = []
    by_q: dict[str, list[dict]] = {}
    for f in found:
        by_q.setdefault(f["quantity"], []).append(f)
    for q, fs in by_q.items():
        for i, a in enumerate(fs):
            for b in fs[i + 1:]:
                half = 0.5 * 10 ** -min(a["decimals"], b["decimals"])
                if abs(a["value"] - b["value"]) > half + 1e-9:
                    out.append(f"{q}: {a['page']} says {a['value']:g} ('{a['said'][:80]}'), {b['page']} says "
                               f"{b['value']:g} ('{b['said'][:80]}')")
    return out


def problems(site_root: str | Path) -> list[str]:
    """What the built site at `site_root` states inconsistently, and the statements it no longer makes."""
    found, missing = collect(read_site(site_root))
    return disagreements(found) + [f"not found: {m}" for m in missing]
