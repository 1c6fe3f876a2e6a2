"""The diagnosis chapter's sections on the verdict (3 to 7 and 9): bare metal's band, the VM predicted scenario by
scenario, the attribution of its loss, the decision rule, the ceilings and the remedies
(helpers.model.verdict computes them; these pick the rows and say them)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from helpers.chapters.diagnosis.budget_sections import fits_on_gpus
from helpers.chapters.diagnosis.build import BARE, ENDS, VM, Diagnosis, Part
from helpers.chapters.diagnosis.curve_words import SOURCE_WORDS, table_points_words, tuned_curve_words
from helpers.core import recorded
from helpers.core.pick import PickError as FindingError, one, rows
from helpers.model import budget as bd
from helpers.model import kernels as kt
from helpers.model import placement as pl
from helpers.model import verdict as vd

# ------------------------------------------------------------------------------------------ 6. bands
FIRST_BAND_TEXT = {
    (False, True): ("As first registered, the band at 64 did not contain the observation; the ranges were widened "
                    "after that comparison, toward it. Read the band at 64 as fitted to the observation, not as "
                    "a prediction."),
    (True, True): "The band at 64 contained the observation before any range changed as well.",
    (False, False): ("Neither the band as first registered nor today's contains the observation at 64. That is a "
                     "finding, not a range to widen until it fits."),
    (True, False): "The band at 64 contained the observation as first registered, and no longer does.",
}
def where_in_band(pctile: float, inside: bool, c: int, band: tuple[float, float] | None = None,
                  observed: float | None = None, at_mid: float | None = None) -> str:
    """Where an observation sits against its band, in words chosen from its percentile among the draws (to one
    decimal, as the band table shows it: 0.2 is not 0). Outside the band, with the band (low, high), the
    observation and the prediction at every input's middle value (`at_mid`): where that prediction lies
    beyond the band on the observation's side, the ranges lean away from the observation and the words say so
    (the band misses it, not the middle values alone); otherwise the observation is beyond what the inputs in
    hand explain."""
    p = f"{round(pctile, 1):g}"
    if inside:
        return f"inside it, at percentile {p} of the draws"
    above = pctile >= 50
    side, speed = ("above", "faster") if above else ("below", "slower")
    head = f"{side} it, at percentile {p} of the draws"
    if band is None or observed is None or at_mid is None:
        return head
    d = 1 if c == 1 else 0
    edge = band[1] if above else band[0]
    if (at_mid > edge) if above else (at_mid < edge):
        gap = 100 * (at_mid - observed) / observed
        # the subject is named: this band's draws against its own middle-value prediction, at this point (the
        # held-out calibration's lean is another subject: calibration_section.lean_words)
        where = "one stream" if c == 1 else f"concurrency {c}"
        tail = f"at {where} this band's draws lean {'slow' if above else 'fast'} against its own middle-value prediction"
        if abs(at_mid - observed) >= abs(edge - observed):
            tail += " and the middle values overshoot"
        return (f"{head}; the prediction at every input's middle value, {at_mid:.{d}f}, lies {side} the band too, "
                f"{abs(gap):.1f} % {'below' if gap < 0 else 'above'} the observation: {tail}")
    return (f"{head} and {side} the prediction at every input's middle value ({at_mid:.{d}f}): bare metal at "
            f"{c} is {speed} than the inputs in hand explain")


def mid_against_budget(v) -> str:
    """How the middle values differ from section 2's single-value budget (aiconfigurator's NCCL table for the
    all-reduces, the shared expert wholly hidden), read from bare metal's input ranges; "section 2's inputs" where none differs."""
    words = []
    u = v.inputs.get("collective_curve", BARE).mid
    if u < 1:
        words.append("the all-reduces from the community's curves (section 5: which run at which size)" if u == 0 else
                     f"the all-reduces {u:.0%} of the way from the community's curves (section 5: which run at which "
                     "size) to aiconfigurator's table")
    h = v.inputs.get("shared_hidden", BARE).mid
    if h < 1:
        words.append(f"{100 * h:.0f} % of the shared expert hidden")
    return " and ".join(words) if words else "section 2's inputs"


def band_history(n_changed: int, first: dict) -> str:
    """The clause page 1 and the summary give the band's history: how many ranges changed after a comparison,
    and the band as first registered at each end (`first`: concurrency -> (low, high, inside))."""
    if not n_changed:
        return "no range changed after a comparison"
    ends = "; ".join(f"{lo:.{1 if c == 1 else 0}f}-{hi:.{1 if c == 1 else 0}f} at {'one stream' if c == 1 else c}, "
                     f"the observation {'inside' if inside else 'outside'} it" for c, (lo, hi, inside) in first.items())
    return (f"{n_changed} input range{'s' if n_changed != 1 else ''} changed after a comparison, each shown with its "
            f"first value and reason; as first registered the band was {ends}")


#: what the shared expert's hidden fraction is (helpers.model.verdict.overlap_fractions), in the page's words
HIDDEN_DEF = ("the time the second stream saved on the whole step, over the shared expert's own operations (its "
              "gate_up, activation and down, and their FP8 quantization, timed under CUDA graphs), not over the "
              "decode-step chapter's shared/dense MLP component, which adds the three dense layers' MLP that nothing "
              "overlaps")


def eager_launch_note(d: Diagnosis) -> dict:
    """Why the eager launch cost stays the book's assumption while the graph floor is the decode-step measurement's:
    the assumed figure, what that measurement timed eagerly (measured, on its own GPU and host) and the sentence."""
    assumed = float(vd.collectives.EAGER_FLOOR_US())
    meas = d.meas.meta.get("eager_us_per_kernel")
    dev = d.meas.device
    seen = (f"the decode-step measurement timed {float(meas):.1f} µs a kernel eagerly on {dev} (measured, another GPU "
            f"and host), shown here, not put in" if meas else
            "the decode-step measurement timed no eager launch")
    return {"eager_assumed_us": assumed, "eager_meas_us": float(meas) if meas else float("nan"),
            # the cost per kernel was never refitted; the input eager_launch (the share of it a step pays) was added
            # after the bare-metal comparison, as the changed ranges say (site-read12 X1)
            "eager_text": (f"The eager launch cost stays the book's assumed {assumed:.0f} µs a kernel: a CPU cost of "
                           f"the recorded host, which no one measured, never refitted; {seen}. The share of it a step "
                           f"pays (input eager_launch, added after the bare-metal comparison: the changed ranges) "
                           f"applies only to a batch above the CUDA-graph cap, and its middle value pays none of it. The graph floor is the decode-step measurement's because "
                           f"no figure for the recorded GPU exists (section 2).")}


BAND_COLUMNS = ["concurrency", "observed_tok_s", "predicted_tok_s", "band_low_tok_s", "band_high_tok_s",
                "observed_percentile", "mid_inputs_tok_s", "rel_err", "inside_band"]


def _band_rows(t: pd.DataFrame, panel_of, label_of, kind: str = "model") -> pd.DataFrame:
    obs_kind = lambda r: "reference" if r.system == BARE else "recorded"  # noqa: E731
    obs_label = lambda r: f"observed: {r.system}" if r.system == BARE else f"observed: {r.system} (recorded)"  # noqa: E731
    return pd.DataFrame([{"panel": panel_of(r), "label": label_of(r), "kind": kind, "band_low": r.band_low_tok_s,
                          "predicted": r.predicted_tok_s, "band_high": r.band_high_tok_s,
                          "observed": r.observed_tok_s, "observed_kind": obs_kind(r), "observed_label": obs_label(r)}
                         for r in t.itertuples()])


def bare_metal_band(d: Diagnosis) -> Part:
    """Bare metal from the kernel tables and the stated input ranges, with its 5-95 % band, against the reference at 1 and 64;
    the uncertain inputs (each with its range and reason)."""
    v = d.verdict
    t = v.bare_metal()
    values, inside = {}, {}
    for c in ENDS:
        r = one(t, "the bare-metal band", concurrency=c)
        inside[c] = bool(r["inside_band"])
        values.update({f"bmb_pt_{c}": float(r["predicted_tok_s"]), f"bmb_lo_{c}": float(r["band_low_tok_s"]),
                       f"bmb_pctile_{c}": float(r["observed_percentile"]), f"bmb_atmid_{c}": float(r["mid_inputs_tok_s"]),
                       f"bmb_hi_{c}": float(r["band_high_tok_s"]), f"bmb_obs_{c}": float(r["observed_tok_s"]),
                       f"bmb_err_{c}": 100 * float(r["rel_err"]), f"bmb_inside_{c}": "inside" if inside[c] else "outside"})
    hidden = vd.overlap_fractions(d.study) if d.study is not None else pd.DataFrame(
        columns=["dtype", "batch", "context", "saved_us", "shared_us", "hidden_fraction"])
    values.update(eager_launch_note(d))
    values.update({"hidden_n": len(hidden), "hidden_def": HIDDEN_DEF})
    values.update({"n_samples": v.samples, "band_seed": v.seed,
                   "hidden_mid_pct": 100 * v.inputs.get("shared_hidden", BARE).mid,
                   "hidden_where": v.inputs.get("shared_hidden", BARE).source})
    for c in ENDS:
        sp = v.split(c)
        # the step stated is the prediction's (the band's median), as the answer box states it; the split's
        # shares are those of the step at every input's middle value, stated beside it under its own name
        values[f"split_step_{c}"] = c * 1e3 / values[f"bmb_pt_{c}"]
        values[f"split_step_mid_{c}"] = float(sp["step"])
        for k in ("experts", "collectives", "other"):
            values[f"split_{k}_{c}"] = 100 * sp[k] / sp["step"]
        values[f"split_attention_{c}"] = 100 * (sp["attention"] + sp["indexer"]) / sp["step"]
    values["split_attention_what"] = ("the attention core and its indexer" if v.inputs.get("indexer", BARE).mid > 0 else
                                      "the attention core (no indexer: the reference ran attention densely)")
    first = v.as_first_registered().bare_metal()
    for c in ENDS:
        r = one(first, "the bare-metal band as first registered", concurrency=c)
        values.update({f"bmf_lo_{c}": float(r["band_low_tok_s"]), f"bmf_med_{c}": float(r["band_median_tok_s"]),
                       f"bmf_hi_{c}": float(r["band_high_tok_s"]), f"bmf_pctile_{c}": float(r["observed_percentile"]),
                       f"bmf_inside_{c}": "inside" if bool(r["inside_band"]) else "outside"})
    changed = v.inputs.changed()
    values["changed_inputs"] = changed_words(changed)
    values["n_changed"] = len(changed)
    for c in ENDS:
        values[f"bm_where_{c}"] = where_in_band(values[f"bmb_pctile_{c}"], inside[c], c,
                                                (values[f"bmb_lo_{c}"], values[f"bmb_hi_{c}"]), values[f"bmb_obs_{c}"],
                                                values[f"bmb_atmid_{c}"])
        # the summary's short form: where the observation sits, without section 3's account of why
        values[f"bm_where_short_{c}"] = where_in_band(values[f"bmb_pctile_{c}"], inside[c], c)
    values["mid_vs_budget"] = mid_against_budget(v)
    step_obs_1 = 1e3 / values["bmb_obs_1"]
    values["bm_takeaway"] = ("a deployment slower than the band's end is losing time outside the kernels" if inside[1] else
                             f"the healthy reference itself ran outside that band ({step_obs_1:.1f} ms), so hold a "
                             f"deployment to the reference's own step rather than to the band: one well above "
                             f"{step_obs_1:.1f} ms is losing time outside the kernels")
    values["bm_history"] = band_history(len(changed), {c: (values[f"bmf_lo_{c}"], values[f"bmf_hi_{c}"],
                                                           values[f"bmf_inside_{c}"] == "inside") for c in ENDS})
    values["first_band_text"] = FIRST_BAND_TEXT[(values["bmf_inside_64"] == "inside", values["bmb_inside_64"] == "inside")]
    peer = peer_on_glm5_graph(d)
    for r in peer.itertuples():
        values.update({f"peer_{r.concurrency}": r.predicted_tok_s, f"peer_err_{r.concurrency}": 100 * r.rel_err})
    values["peer_what"] = kt.GLM5_GRAPH
    return Part(values, {"verdict_inputs": v.inputs.table(), "bare_metal_band": t, "bare_metal_band_first": first},
                {"bare_metal_band": t[BAND_COLUMNS], "peer": peer, "hidden_points": hidden})


def changed_words(changed) -> str:
    """The input ranges changed after a comparison, named once each and grouped by when each was registered
    (`registered`: the commit or review that changed it), in the order first met; 'none' where none changed."""
    if not changed:
        return "none"
    groups: dict[str, list[str]] = {}
    for r in changed:
        groups.setdefault(str(r.registered), []).append(str(r.name))
    return ("; ".join(f"{', '.join(names)} ({when})" for when, names in groups.items())
            + " (each with its first range and its reason in the input table above)")


def peer_on_glm5_graph(d: Diagnosis) -> pd.DataFrame:
    """aiconfigurator's own estimator composed on GLM-5's op graph from the same measured tables (its DSA
    attention op replaced by its dense MLA decode ops, stated), beside the book's point prediction and the
    observation, at 1 and 64 (reference: its step time, turned into tokens/s as the book's)."""
    bm = d.verdict.bare_metal()
    out = []
    for c in ENDS:
        us, status, note = kt.estimate_step_us(c, substitution=kt.GLM5_GRAPH)
        if us is None:
            raise FindingError(f"aiconfigurator has no GLM-5-graph estimate at batch {c}: {status} ({note})")
        obs = d.observed(BARE, c)
        ours = float(one(bm, "the bare-metal band", concurrency=c)["predicted_tok_s"])
        pred = c * 1e6 / us
        out.append({"concurrency": c, "observed_tok_s": obs, "this_book_tok_s": ours, "predicted_tok_s": pred,
                    "rel_err": (pred - obs) / obs, "book_rel_err": (ours - obs) / obs})
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------------ 7. the VM predicted
def _size(c: int, th: pd.DataFrame) -> str:
    """The rule's message size at concurrency `c`, in words ("one stream's 12 KiB")."""
    kib = {int(t.concurrency): t.message_bytes / 1024 for t in th.itertuples()}[c]
    return f"{'one stream' if c == 1 else f'concurrency {c}'}'s {kib:.0f} KiB"


def faster_where(fast: pd.DataFrame, th: pd.DataFrame) -> str:
    """Per scenario set aside for beating P2P (admissibility's rows, indexed by key, with `faster_at`), at which of
    the rule's message sizes it does: a reason true at one stream only says so, and names the size it is not."""
    every = [int(t.concurrency) for t in th.itertuples()]
    parts = []
    for r in fast.itertuples():
        at = [c for c in every if c in tuple(r.faster_at)]
        not_at = [c for c in every if c not in at]
        # of the rule's two sizes: a model may also beat P2P at a size between them (the achieved batch's, section
        # 5's fold), so no "only" (site-read8 T4)
        parts.append(f"{r.scenario} at both of the rule's sizes" if not not_at else
                     f"{r.scenario} at {' and '.join(_size(c, th) for c in at)} of the rule's two sizes, not at "
                     f"{' and '.join(_size(c, th) for c in not_at)}")
    return "; ".join(parts)


def set_aside_label(key: str, c: int, faster_at: tuple, th: pd.DataFrame) -> str:
    """Why a scenario's row at concurrency `c` is set aside, true at that row: a remedy arm, or faster than P2P at
    this row's message, or (set aside by the other size) faster at another concurrency's message only."""
    if key in vd.REMEDY_ARMS:
        return "set aside: a remedy arm, sets no bound"
    here = _size(c, th)
    if c in tuple(faster_at):
        return f"set aside: faster than P2P at {here}, sets no bound"
    other = " and ".join(_size(o, th) for o in faster_at)
    # the row's size named, not "this size": a 64-stream band also draws the achieved batch's smaller message,
    # where a model set aside may be faster than P2P too (site-read8 T4)
    return f"set aside: faster than P2P at {other}, not at {here}; sets no bound"


VM_TAKEAWAY_NONE = ("No host-path model with evidence behind it reproduces the VM's one-stream speed on its own: "
                    "the VM lost more than any of them prices.")
VM_TAKEAWAY_SOME = ("{n} of {of} host-path models reproduce the VM's one-stream speed within their band; the others "
                    "leave part of the loss unexplained.")
VM_COLUMNS = ["scenario", "what", "observed_tok_s", "predicted_tok_s", "band_low_tok_s", "band_high_tok_s",
              "observed_percentile", "inside_band", "admissible"]


def vm_predicted(d: Diagnosis) -> Part:
    """The VM predicted scenario by scenario (measured compute + each host-path model with evidence), every
    recorded VM observation scored against each band; the figure: both systems' bands at 1 and 64."""
    v = d.verdict
    t = v.vm()
    adm = v.admissibility().set_index("scenario_key")
    t["admissible"] = [bool(adm.loc[k, "admissible"]) for k in t["scenario_key"]]
    scen = pd.DataFrame([{"scenario": h.label, "kind": h.kind, "evidence": h.evidence,
                          "sets a bound": "yes" if adm.loc[h.key, "admissible"] else f"no: {adm.loc[h.key, 'why_not']}"}
                         for h in v.scenarios])
    ok = t[t["admissible"]]
    one_stream = rows(ok, "the VM predictions (admissible scenarios)", observation="vm_1")
    c64 = rows(ok, "the VM predictions (admissible scenarios)", observation="vm_64")
    # distinct predictions: two observations at the same concurrency and context score against one band
    bands = ok.drop_duplicates(["scenario_key", "concurrency", "band_low_tok_s", "band_high_tok_s"])
    inside_bands = ok[ok["inside_band"]].drop_duplicates(["scenario_key", "concurrency", "band_low_tok_s",
                                                           "band_high_tok_s"])
    aside = adm[~adm["admissible"]]
    n_rem = int(aside.index.isin(list(vd.REMEDY_ARMS)).sum())
    n_fast = len(aside) - n_rem
    fast = aside[~aside.index.isin(list(vd.REMEDY_ARMS))]
    why = ([f"{n_fast} price an all-reduce through host memory faster than bare metal's NCCL over P2P at the same "
            f"message ({faster_where(fast, v.thresholds())}), which contradicts what they model"] if n_fast else []) + \
          ([f"{n_rem} {'is a remedy arm' if n_rem == 1 else 'are remedy arms'} (what the VM would pay with it, not a "
            "model of the VM as it ran)"] if n_rem else [])
    values = {"n_scenarios": len(v.scenarios), "n_admitted": int(adm["admissible"].sum()),
              "set_aside_words": ("of the others, " + " and ".join(why) + "; they are shown set aside in the scenario table"
                                  if why else "none is set aside"),
              "n_vm_points": int(t["observation"].nunique()),
              "n_inside": len(inside_bands), "n_rows": len(bands),
              "n_inside_scenarios": int(inside_bands["scenario_key"].nunique()),
              "vmp_lo_1": float(one_stream["predicted_tok_s"].min()), "vmp_hi_1": float(one_stream["predicted_tok_s"].max()),
              "vmp_lo_64": float(c64["predicted_tok_s"].min()), "vmp_hi_64": float(c64["predicted_tok_s"].max()),
              "vm_obs_1": float(one_stream["observed_tok_s"].iloc[0]), "vm_obs_64": float(c64["observed_tok_s"].iloc[0]),
              "n_inside_1": int(one_stream["inside_band"].sum()),
              "set_aside": (", ".join(r.scenario for r in adm.itertuples() if not r.admissible)
                            + " (each with its figures in the scenario table)") if not adm["admissible"].all() else "none"}
    values["vm_takeaway"] = (VM_TAKEAWAY_NONE if values["n_inside_1"] == 0 else
                             VM_TAKEAWAY_SOME.format(n=values["n_inside_1"], of=values["n_admitted"]))
    bm = v.bare_metal()
    fig = pd.concat([
        _band_rows(bm, lambda r: "one stream" if r.concurrency == 1 else "concurrency 64",
                   lambda r: "bare metal (aiconfigurator's kernel tables)", "measured"),
        _band_rows(t[t["observation"].isin(["vm_1", "vm_64"])],
                   lambda r: "one stream" if r.concurrency == 1 else "concurrency 64",
                   lambda r: f"VM: {r.scenario}" + ("" if r.admissible else " (set aside)"))], ignore_index=True)
    scores = t[VM_COLUMNS].copy()
    scores["scenario"] = [s_ if ok else f"{s_} (set aside)" for s_, ok in zip(t["scenario"], t["admissible"])]
    return Part(values, {"vm_scenarios": t}, {"scenarios": scen, "vm_scores": scores},
                figure={"rows": fig})


# ------------------------------------------------------------------------------------------ 8. attribution
#: the source of the fixed time per forward a healthy bare-metal host paid (data/reference/baremetal.csv)
ISSUE25 = "rtx6kpro-issue25"


def attribution(d: Diagnosis) -> Part:
    """The VM's lost time per step against bare metal and the share each scenario explains (with its band),
    what is left; and the left-over beyond predicted compute at batch 1 and 17."""
    v = d.verdict
    a = v.attribution()
    res = v.residuals()
    values = {}
    env = v.share_envelope()
    for c in ENDS:
        g = a[a["concurrency"] == c]
        lo, hi = 100 * env[c][0], 100 * env[c][1]
        # as computed (no clamp): share_words says where an end leaves 0-100 %
        values.update({f"loss_{c}": float(g["lost_ms_per_step"].iloc[0]), f"loss_lo_{c}": float(g["lost_ms_low"].iloc[0]),
                       f"share_lo_{c}": lo, f"share_hi_{c}": hi, f"share_range_{c}": vd.share_words(lo, hi)})
    for r in res.itertuples():
        values[f"left_{r.batch}"] = float(r.left_over_ms)
        values[f"step_obs_{r.batch}"] = float(r.observed_step_ms)
    values["band_basis_64"] = band_basis_words(v)
    values["band_ends_64"] = envelope_end_words(v, a)
    values["left_relation"] = vd.relation_words(values["left_17"], values["left_1"])
    for c in ENDS:
        values[f"slow_{c}"] = d.observed(BARE, c) / d.observed(VM, c)
    values["ratio_relation"] = vd.relation_words(values["slow_64"], values["slow_1"])
    shrank = values["slow_64"] < values["slow_1"] * (1 - vd.decision.SAME_WITHIN)
    values["ratio_implication"] = (
        "as a cost that does not grow with the batch predicts" if shrank else
        "where a cost that does not grow with the batch (a fixed tax, or a latency-bound collective) would have made "
        "it shrink: from one stream to 64 the VM's extra time grew as bare metal's step did, though the residual "
        "above falls from batch 1 to 17, so these points do not settle which it is")
    values["bm_growth_64"] = 64 * d.observed(BARE, 1) / d.observed(BARE, 64)
    values["issue25_ms"] = recorded.value(recorded.load("reference/baremetal.csv"), source=ISSUE25,
                                          metric="fixed_time_per_forward")
    shown = a[["concurrency", "scenario", "lost_ms_per_step", "host_path_excess_ms", "share_explained", "share_low",
               "share_high", "unexplained"]].copy()
    faster = v.admissibility().set_index("scenario_key")["faster_at"]
    th = v.thresholds()
    shown["scenario"] = [s_ if ok else f"{s_} ({set_aside_label(key, int(c), faster[key], th)})"
                         for s_, ok, key, c in zip(a["scenario"], a["admissible"], a["scenario_key"], a["concurrency"])]
    return Part(values, {"attribution": a}, {"attribution": shown, "residuals": res})


def band_basis_words(v, short: bool = False) -> str:
    """What the 64-stream share bands draw, said where a band or its range is shown (site-read6 R1): the decode
    batch's two ends (Verdict.share_band_basis, one computation with the attribution). `short`: the clause the
    conclusion gives beside its 64-stream range."""
    b = v.share_band_basis()
    if short:
        return (f"each band's ends over the decode batch from the achieved {b['batch_lo']:g} to {b['batch_hi']:g} in "
                f"flight, so over a loss of {b['loss_lo_ms']:.0f}-{b['loss_hi_ms']:.0f} ms")
    return (f"at 64 each band's ends take the model's low and high all-reduce at both ends of the decode batch, from "
            f"the achieved {b['batch_lo']:g} to {b['batch_hi']:g} in flight ({b['message_lo_bytes'] / 1024:.0f}-"
            f"{b['message_hi_bytes'] / 1024:.0f} KiB), so over a loss of {b['loss_lo_ms']:.0f}-{b['loss_hi_ms']:.0f} ms; "
            f"its middle value is at {b['batch_mid']:g} in flight and {b['loss_mid_ms']:.0f} ms")


def envelope_end_words(v, a: pd.DataFrame, c: int = 64) -> str:
    """Where the range's two ends at `c` come from: the admissible model and the decode batch each was drawn at,
    with that batch's message and loss (site-read6 R1: a band end below its middle with one all-reduce at 768 KiB
    is the achieved batch's)."""
    b = v.share_band_basis()
    g = a[(a["concurrency"] == c) & a["admissible"]]
    words = []
    for col, batch_col, pick in (("share_low", "share_low_batch", "idxmin"), ("share_high", "share_high_batch", "idxmax")):
        r = g.loc[getattr(g[col], pick)()]
        at = float(r[batch_col])
        lo = at == b["batch_lo"]
        msg, loss = ((b["message_lo_bytes"], b["loss_lo_ms"]) if lo else (b["message_hi_bytes"], b["loss_hi_ms"]))
        words.append(f"{100 * float(r[col]):.0f} % at {at:g} in flight ({msg / 1024:.0f} KiB over {loss:.0f} ms): "
                     f"{r['scenario']}")
    return "the range's ends: " + "; ".join(words)


# ------------------------------------------------------------------------------------------ 9. the decision rule
def decision(d: Diagnosis) -> Part:
    """What an 8-rank all-reduce on the VM must cost for the host path to explain at least 80 % (at most
    25 %) of the loss, each scenario's figure at those sizes, and the conclusion chosen from them; the
    seeds' claim (a copy's latency per all-reduce) in the same terms."""
    v = d.verdict
    th, ev = v.thresholds(), v.evidence()
    case, text = vd.conclusion(ev, th, v.share_envelope(), basis={64: band_basis_words(v, short=True)})
    t1 = one(th, "the thresholds", concurrency=1)
    # the seeds' claim as the expert-parallelism chapter prices it (one computation): every all-reduce pays the
    # recorded one-token copy once
    copies = recorded.load("recorded/copy_sweep.csv")
    seed_ms = pl.seed_floor_ms(d.model, copies)
    values = {"conclusion_case": case, "conclusion_text": text, "page1_status": vd.STATUS[case],
              "cmd_nccl": vd.MEASURE_COMMANDS[0], "copy_one_us": pl.one_token_copy_us(copies), "seed_floor_ms": seed_ms,
              "seed_floor_pct": 100 * seed_ms / float(t1["lost_ms_per_step"]),
              "n_ar": int(t1["all_reduces_per_step"]), "cannot_pct": 100 * vd.CANNOT}
    for t in th.itertuples():
        c = int(t.concurrency)
        values.update({f"t80_{c}": t.explains_80_us, f"t25_{c}": t.explains_25_us, f"kib_{c}": t.message_bytes / 1024,
                       f"bare_ar_{c}": t.bare_metal_us})
    # the rule at the 64-stream bands' other end, the achieved decode batch (site-read7 S3, S6): its thresholds and
    # each model's all-reduce at its message, so the bands' ends drawn there can be recomputed from the page
    ach, ach_ev = v.achieved_batch_rule()
    values.update({"ach_batch": ach["batch"], "ach_kib": ach["message_bytes"] / 1024, "ach_loss": ach["lost_ms_per_step"],
                   "ach_t80": ach["explains_80_us"], "ach_t25": ach["explains_25_us"], "ach_bare": ach["bare_metal_us"],
                   "ach_vm_step": ach["vm_step_ms"], "ach_bm_step": ach["bm_step_ms"],
                   "ach_loss_prop": ach["loss_proportional_ms"], "ach_bytes": int(ach["message_bytes"]),
                   "ach_bm_from": (f"read between the community's observed steps at {ach['bm_point_lo']['batch']:g} "
                                   f"({ach['bm_point_lo']['step_ms']:.1f} ms{SOURCE_WORDS[ach['bm_point_lo']['source']]}) "
                                   f"and {ach['bm_point_hi']['batch']:g} in flight ({ach['bm_point_hi']['step_ms']:.1f} ms"
                                   f"{SOURCE_WORDS[ach['bm_point_hi']['source']]}), both of its MTP-off cutlass decode "
                                   f"table at context 0, derived")})
    values["bare_ar_1_points"] = table_points_words(float(t1["message_bytes"]))
    th_shown = pd.concat([th, pd.DataFrame([{k: x for k, x in ach.items() if k in th.columns or k == "batch"}])],
                         ignore_index=True)
    th_shown["concurrency"] = [f"{c:g}" if c == 1 else f"{c:g} ({b:g} in flight)"
                               for c, b in zip(th_shown["concurrency"], th_shown["batch"].fillna(64))]
    th_shown = th_shown.drop(columns="batch")
    values["tuned_curve_text"] = tuned_curve_words([float(t.message_bytes) for t in th.itertuples()])
    values["curve_source_text"] = tuned_curve_words([float(t.message_bytes) for t in th.itertuples()], short=True)
    ring = ev[(ev["scenario_key"] == "copy_ring") & (ev["concurrency"] == 1)]
    if len(ring):
        values["seed_ring_pct"] = 100 * float(ring["share_mid"].iloc[0])
    values.update(seed_claim_shares(values["copy_one_us"], int(t1["all_reduces_per_step"]), float(t1["bare_metal_us"]),
                                    float(t1["lost_ms_per_step"])))
    # the shares are section 4's (the attribution, over the whole step), not restated here at the rule's sizes,
    # where a linear share per all-reduce gives another figure for the same scenario (issue 35)
    shown = ev[["scenario", "concurrency", "message_bytes", "low_us", "mid_us", "high_us"]]
    outcomes = vd.outcomes_table(th)
    trace = vd.p2p_checks("trace").iloc[0]
    # the page names the outcome ("Between the two thresholds"): glue what it means, not the name again
    values.update({"middle_means": vd.OUTCOMES["middle"].split(": ", 1)[1], "trace_cmd": str(trace["command"]),
                   "trace_what": str(trace["note"])})
    return Part(values, {"decision_thresholds": th, "decision_evidence": ev, "decision_outcomes": outcomes,
                         "decision_achieved_batch": ach_ev.assign(**{k: ach[k] for k in ("batch", "lost_ms_per_step",
                                                                                           "bare_metal_us")})},
                {"thresholds": th_shown, "evidence": shown, "outcomes": outcomes,
                 "achieved": ach_ev.assign(scenario=[s_ if ok else f"{s_} (set aside: section 4)" for s_, ok in
                                                     zip(ach_ev["scenario"], ach_ev["admissible"])])[
                     ["scenario", "low_us", "mid_us", "high_us", "share_low", "share_high"]]})


def seed_claim_shares(copy_us: float, n_ar: int, bare_us: float, loss_ms: float, ranks: int = vd.TP) -> dict:
    """The seeds' claim (the one-token copy) as a share of the one-stream loss on both bases, each said (site-read5
    N3): gross (the copy's whole time) and net of bare metal's all-reduce (what the thresholds and section 4 count),
    paid once per all-reduce and at each of a ring's 2(n-1) steps. A net share at or below 0 is said in words."""
    steps = 2 * (ranks - 1)
    pct = lambda us: 100 * us * n_ar / 1e3 / loss_ms  # noqa: E731
    net_once = pct(copy_us - bare_us)
    once = (f"{net_once:.0f} % net of bare metal's {bare_us:.0f} µs all-reduce" if net_once > 0 else
            f"nothing net of bare metal's {bare_us:.0f} µs all-reduce, which costs more than the copy")
    return {"seed_once_net_text": once, "seed_ring_steps": steps, "seed_ring_gross_pct": pct(steps * copy_us),
            "seed_ring_net_pct": pct(steps * copy_us - bare_us)}


# ------------------------------------------------------------------------------------------ 10. ceilings
CEILING_TAKEAWAY = {
    True: ("Even bare metal reaches less than half of the bandwidth floor for one stream: latency, not bytes, "
           "sets a single stream's speed on these GPUs."),
    False: "Bare metal reaches half of the bandwidth floor or more for one stream: bytes set its speed.",
}
def ceilings(d: Diagnosis) -> Part:
    """Every observed and predicted point as a fraction of the weight-bytes floor at TP8 (derived)."""
    v = d.verdict
    bm, vm = v.bare_metal(), v.vm()
    admitted = {h.key for h in v.admitted()}
    rows_ = []
    for c in ENDS:
        ce = vd.ceiling(d.model, c)
        dense = vd.ceiling(d.model, c, dense=True)     # bare metal ran attention densely: no indexer bytes (issue 45)
        b = one(bm, "the bare-metal band", concurrency=c)
        vmc = vm[vm["observation"] == f"vm_{c}"]
        vmc = vmc[vmc["scenario_key"].isin(admitted)]      # the set-aside scenarios set no bound here either
        pts = [("original VM, observed (recorded)", float(vmc["observed_tok_s"].iloc[0])),
               ("bare metal, observed (reference)", float(b["observed_tok_s"])),
               ("bare metal, predicted (derived)", float(b["predicted_tok_s"])),
               ("original VM, predicted: slowest admissible scenario (derived)", float(vmc["predicted_tok_s"].min())),
               ("original VM, predicted: fastest admissible scenario (derived)", float(vmc["predicted_tok_s"].max()))]
        for what, tok in pts:
            e = dense if what.startswith("bare metal") else ce
            rows_.append({"concurrency": c, "point": what, "tok_s": tok, "ceiling_tok_s": e["ceiling_tok_s"],
                          "fraction_of_ceiling": tok / e["ceiling_tok_s"], "bytes_per_gpu_GB": e["bytes_per_gpu_GB"],
                          "floor_ms": e["floor_ms"]})
    t = pd.DataFrame(rows_)
    bm1 = float(one(t[t["concurrency"] == 1], "the ceilings", point="bare metal, observed (reference)")["fraction_of_ceiling"])
    values = {"ceiling_takeaway": CEILING_TAKEAWAY[bm1 < 0.5]}
    for c in ENDS:
        g = t[t["concurrency"] == c]
        bm_row = one(g, "the ceilings", point="bare metal, observed (reference)")
        values.update({f"ceil_bm_{c}": float(bm_row["ceiling_tok_s"]), f"ceil_bm_gb_{c}": float(bm_row["bytes_per_gpu_GB"])})
        g = g[g["point"].str.startswith("original VM")]
        values.update({f"ceil_{c}": float(g["ceiling_tok_s"].iloc[0]), f"ceil_gb_{c}": float(g["bytes_per_gpu_GB"].iloc[0]),
                       f"ceil_ms_{c}": float(g["floor_ms"].iloc[0]),
                       f"frac_vm_{c}": 100 * float(one(g, "the ceilings", point="original VM, observed (recorded)")["fraction_of_ceiling"]),
                       f"frac_bm_{c}": 100 * float(bm_row["fraction_of_ceiling"])})
    return Part(values, {"ceilings": t})


# ------------------------------------------------------------------------------------------ 11. remedies
REMEDY_COLUMNS = ["rank", "remedy", "tried", "tok_s_mid @1", "tok_s_low @1", "tok_s_high @1", "tok_s_mid @64",
                  "priced_as"]


def remedies(d: Diagnosis) -> Part:
    """The remedies ranked by predicted gain with bands; each says whether the investigation tried it."""
    fit = fits_on_gpus(d)
    r = vd.remedies(d.verdict, fit[bd.TP4_SCENARIO])
    top = one(r, "the ranked remedies", rank=1)
    bm1 = d.observed(BARE, 1)
    values = {"top_remedy": str(top["remedy"]), "top_gain_lo": float(top["tok_s_low @1"]) / d.observed(VM, 1),
              "top_gain_hi": float(top["tok_s_high @1"]) / d.observed(VM, 1),
              "top_tok_lo": float(top["tok_s_low @1"]), "top_tok_hi": float(top["tok_s_high @1"]),
              "bm_over_vm_1": bm1 / d.observed(VM, 1),
              "unpriced_remedies": "; ".join(str(x) for x in r.loc[r["tok_s_mid @1"].isna(), "remedy"]),
              "top_how": re.sub(r"(\d) us\b", r"\1 µs", str(top["note"])),   # data writes µs as us
              "top_source": ("as the investigation recorded it" if str(top["source"]).startswith("seed-")
                             else f"source: {top['source']}, 90_provenance")}
    return Part(values, {"remedies": r}, {"remedies": r[REMEDY_COLUMNS + ["finding"]]})


@dataclass(frozen=True)
class GuestContext:
    """This run's guest facts as the remedy section cites them (01_environment's probe, measured)."""
    rem_guest_hypervisor: str
    rem_guest_host_bridge: str
    rem_guest_bar1: str
    rem_guest_nccl_p2p_level: str


def guest_context(probe: dict | None) -> GuestContext:
    """This run's guest facts (helpers.machine.probe's `guest`, measured by 01_environment) for the remedy
    section, or why there are none."""
    from helpers.chapters.environment import guest_facts

    if probe is None:
        return GuestContext(*(["not probed in this run"] * 4))
    g = guest_facts(probe)
    return GuestContext(g.guest_hypervisor, g.guest_host_bridge, g.guest_bar1, g.guest_nccl_p2p_level)
