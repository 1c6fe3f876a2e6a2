"""The decision rule's conclusion, chosen from the scenarios' evidence against the thresholds, page 1's
status line for it, and the weight-bytes ceiling of a decode step."""
from __future__ import annotations

import pandas as pd

from helpers.model import arith as ma
from helpers.model import budget as bd
from helpers.model import kernels as kt
from helpers.model import measured as mb
from helpers.model.verdict.ranges import CANNOT, EXPLAINS, VerdictInputError

# -------------------------------------------------------------------------------------------- conclusion
CONCLUSIONS = {
    "explains": ("The all-reduce measured on a VM ({how}) costs at least what the host path needs to explain "
                 "{pct_hi:.0f} % of the lost time at both ends: the seeds' claim holds; restoring P2P is the remedy."),
    "cannot": ("The all-reduce measured on a VM ({how}) costs too little for the host path to explain more than "
               "{pct_lo:.0f} % of the lost time at both ends: the seeds' claim fails, and the loss lies elsewhere "
               "(the named alternatives)."),
    "partly": ("The all-reduce measured on a VM ({how}) puts the host path's share of the lost time at "
               "{share_1:.0f} % for one stream and {share_64:.0f} % at concurrency 64: a real part of the loss, "
               "not all of it."),
    "unsettled": ("Unsettled: the admissible scenarios put the host path's share of the lost time at "
                  "{range_1} for one stream and {range_64} at concurrency 64{basis_64}, across the {explain_lo:.0f} % and "
                  "{explain_hi:.0f} % marks; an 8-rank all-reduce timed on that VM, set against the rule's two "
                  "thresholds, decides it."),
    "settled_low": ("Every admissible scenario puts the host path's share of the lost time at {hi_1:.0f} % or "
                    "less for one stream and {hi_64:.0f} % or less at concurrency 64{basis_64}: on this evidence the seeds' "
                    "claim fails."),
    "settled_high": ("Every admissible scenario puts the host path's share of the lost time at {lo_1:.0f} % or "
                     "more for one stream and {lo_64:.0f} % or more at concurrency 64{basis_64}: on this evidence the seeds' "
                     "claim holds."),
}


def decide(evidence: pd.DataFrame, thresholds: pd.DataFrame,
           envelope: dict[int, tuple[float, float]] | None = None,
           basis: dict[int, str] | None = None) -> tuple[str, dict]:
    """The chapter's conclusion, chosen from data: a measured scenario (kind 'measured') decides where
    there is one; otherwise the envelope of the admissible derived scenarios, against EXPLAINS and CANNOT.
    `envelope` (Verdict.share_envelope: per end, the lowest and highest share) is the range the rest of the
    site states; without it, the evidence's shares at the rule's message sizes. `basis`: per end, what the envelope's
    bands draw (at 64 the decode batch too, site-read6 R1), said beside that end's range."""
    if not len(evidence):
        raise VerdictInputError("no host-path evidence to decide from")
    th = {int(t.concurrency): t for t in thresholds.itertuples()}
    vals = {"explain_hi": 100 * EXPLAINS, "explain_lo": 100 * CANNOT,
            "basis_64": f" ({basis[64]})" if envelope and basis and basis.get(64) else ""}
    for c in (1, 64):
        vals.update({f"t80_{c}": th[c].explains_80_us, f"t25_{c}": th[c].explains_25_us,
                     f"kib_{c}": th[c].message_bytes / 1024})
    measured = evidence[evidence["kind"] == "measured"]
    if len(measured):
        key = measured["scenario_key"].iloc[0]
        mrows = measured[measured["scenario_key"] == key]
        sh = {int(r.concurrency): r.share_mid for r in mrows.itertuples()}
        vals.update({"how": mrows["scenario"].iloc[0], "share_1": 100 * sh[1], "share_64": 100 * sh[64],
                     "pct_hi": 100 * EXPLAINS, "pct_lo": 100 * CANNOT})
        if min(sh.values()) >= EXPLAINS:
            return "explains", vals
        if max(sh.values()) <= CANNOT:
            return "cannot", vals
        return "partly", vals
    admitted = evidence[evidence["admissible"]] if "admissible" in evidence.columns else evidence
    if not len(admitted):
        raise VerdictInputError("every host-path scenario is faster than bare metal's NCCL over P2P: none may "
                                "set a bound; the VM cannot be judged from models")
    for c in (1, 64):
        e = admitted[admitted["concurrency"] == c]
        # as computed: below 0 % the model prices the host path faster than bare metal, above 100 % it
        # over-predicts the loss (share_words says so)
        lo, hi = envelope[c] if envelope else (float(e["share_low"].min()), float(e["share_high"].max()))
        vals[f"lo_{c}"], vals[f"hi_{c}"] = 100 * lo, 100 * hi
    for c in (1, 64):
        vals[f"range_{c}"] = share_words(vals[f"lo_{c}"], vals[f"hi_{c}"])
    if vals["hi_1"] <= 100 * CANNOT and vals["hi_64"] <= 100 * CANNOT:
        return "settled_low", vals
    if vals["lo_1"] >= 100 * EXPLAINS and vals["lo_64"] >= 100 * EXPLAINS:
        return "settled_high", vals
    return "unsettled", vals


#: two values within this fraction of each other read "about the same as" (relation_words)
SAME_WITHIN = 0.10


def relation_words(a: float, b: float, same_within: float = SAME_WITHIN) -> str:
    """How `a` relates to `b`, chosen from the numbers by one rule: within `same_within` of b (relative)
    'about the same as', else 'N % below' or 'N % above'."""
    rel = (a - b) / b
    if abs(rel) <= same_within:
        return "about the same as"
    return f"{100 * abs(rel):.0f} % {'below' if rel < 0 else 'above'}"


def share_words(lo_pct: float, hi_pct: float) -> str:
    """A range of shares of the lost time in words, as computed: '4 % to 49 %'; an end above 100 % says the
    model over-predicts the loss, an end below 0 % that it prices the host path below bare metal's."""
    text = f"{lo_pct:.0f} % to {hi_pct:.0f} %"
    notes = []
    if lo_pct < 0:
        notes.append("below 0 %: a model prices the host path below bare metal's collectives")
    if hi_pct > 100:
        notes.append("above 100 %: a model over-predicts the loss")
    return text + (f" ({'; '.join(notes)})" if notes else "")


#: the one-line status page 1 gives, by the decision rule's case
STATUS = {
    "unsettled": "No all-reduce was ever timed on that VM, so the question stays open.",
    "settled_low": "Every model with evidence prices it below the 25 % mark: the seeds' claim fails on this evidence.",
    "settled_high": "Every model with evidence prices it above the 80 % mark: the seeds' claim holds on this evidence.",
    "explains": "An all-reduce measured on a VM settles it: the host path is the loss.",
    "cannot": "An all-reduce measured on a VM settles it: the host path is not the loss.",
    "partly": "An all-reduce measured on a VM puts it between the 25 % and 80 % marks: part of the loss.",
}


def conclusion(evidence: pd.DataFrame, thresholds: pd.DataFrame,
               envelope: dict[int, tuple[float, float]] | None = None,
               basis: dict[int, str] | None = None) -> tuple[str, str]:
    """(case, sentence) of the decision rule."""
    case, vals = decide(evidence, thresholds, envelope, basis)
    return case, CONCLUSIONS[case].format(**vals)


# -------------------------------------------------------------------------------------------- ceilings
def ceiling(m: ma.ModelConfig, batch: int, dense: bool = False) -> dict:
    """The weight-bytes floor of one decode step per GPU at TP8 (derived): every byte one rank must read
    at the checkpoint's precisions (weights of the active experts at this batch, and the KV cache), over
    the recorded GPU's datasheet bandwidth; and the tokens/s it allows. `dense`: as a deployment that runs
    GLM-5's attention densely reads them (the bare-metal reference on SM120): without the indexer's weights
    and keys, every cached entry read by attention."""
    if dense:
        import dataclasses
        m = dataclasses.replace(m, index_n_heads=0)
    base = bd.baseline_scenario(m)
    bytes_ = float(bd.step_terms(m, base, batch)["bytes_per_gpu"])
    bw = mb.gpu_bandwidth(kt.RTX).value
    us = bytes_ / (bw * 1e3)
    return {"batch": batch, "bytes_per_gpu_GB": bytes_ / 1e9, "floor_ms": us / 1e3, "ceiling_tok_s": batch * 1e6 / us,
            "bandwidth_GBps": bw}
