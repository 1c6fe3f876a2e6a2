"""Checks that the diagnosis agrees with itself, each one a function that lists what it finds (empty: nothing):
a point prediction outside its own band, a stated range of shares that is not the computed one (a share above
100 % summarised as at most 100 %), a set-aside scenario that still sets a bound, a comparison word the
numbers contradict, a rule that flags the healthy reference as it flags the VM. `problems(d)` runs them all
on a Diagnosis; the chapter's tests run it on the recorded diagnosis and plant each defect."""
from __future__ import annotations

import pandas as pd

from helpers.chapters import baselines_tuning as bt
from helpers.model import verdict as vd

#: two stated figures of one quantity differ when they are further apart than this (relative)
SAME_FIGURE = 1e-9


def points_outside_bands(predictions: pd.DataFrame) -> list[str]:
    """Rows whose point prediction lies outside their own 5-95 % band."""
    bad = predictions[(predictions["predicted_tok_s"] < predictions["band_low_tok_s"])
                      | (predictions["predicted_tok_s"] > predictions["band_high_tok_s"])]
    return [f"{r.scenario} at {r.concurrency}: point {r.predicted_tok_s:.1f} outside its band "
            f"{r.band_low_tok_s:.1f}-{r.band_high_tok_s:.1f}" for r in bad.itertuples()]


def stated_range_problems(attribution: pd.DataFrame, stated: dict[int, tuple[float, float]]) -> list[str]:
    """Where the stated share range (percent, per end) is not the admissible scenarios' computed one: a
    clamp to 0-100 %, a set-aside scenario's share in it, or another envelope."""
    out = []
    ok = attribution[attribution["admissible"]]
    for c, (lo, hi) in stated.items():
        g = ok[ok["concurrency"] == c]
        want = (100 * float(g["share_low"].min()), 100 * float(g["share_high"].max()))
        if abs(lo - want[0]) > 0.5 or abs(hi - want[1]) > 0.5:
            out.append(f"at {c}: the page states {lo:.0f} % to {hi:.0f} %, the admissible scenarios compute "
                       f"{want[0]:.0f} % to {want[1]:.0f} %")
    return out


def set_aside_in_bounds(admissibility: pd.DataFrame, bound_rows: pd.DataFrame) -> list[str]:
    """Scenarios set aside (faster than P2P) that still appear among the rows a bound is taken from."""
    aside = set(admissibility.loc[~admissibility["admissible"], "scenario_key"])
    used = sorted(aside & set(bound_rows["scenario_key"]))
    return [f"scenario {k} is set aside (faster than P2P) but sets a bound" for k in used]


def word_problems(stated: dict[str, tuple[str, float, float]]) -> list[str]:
    """Comparison words against the numbers they compare: name -> (word stated, a, b)."""
    return [f"{name}: the page says '{word}', the numbers ({a:.3g} against {b:.3g}) say "
            f"'{vd.relation_words(a, b)}'" for name, (word, a, b) in stated.items() if word != vd.relation_words(a, b)]


def rule_problems(rule_text: str, vm_growth: float, bm_growth: float, batch: int) -> list[str]:
    """A rule that flags the VM must be stated with what it says of the reference: where it flags both, the
    page must say it cannot tell them apart, not read it as the VM's own fault."""
    if bt.growth_flagged(vm_growth, batch) and bt.growth_flagged(bm_growth, batch) and "cannot tell" not in rule_text:
        return [f"the step-growth rule flags the VM ({vm_growth:.1f}x) and the healthy reference ({bm_growth:.1f}x) "
                f"alike, yet the page reads it as the VM's fixed cost"]
    return []


def quantity_problems(statements: dict[str, list[tuple[str, float]]]) -> list[str]:
    """One quantity, one value: quantity -> [(where stated, value), ...]; two that differ are a problem."""
    out = []
    for q, said in statements.items():
        vals = {round(v, 9) for _, v in said}
        if len(vals) > 1:
            out.append(f"{q} is stated as {', '.join(f'{v:g} ({w})' for w, v in said)}")
    return out


def problems(d) -> list[str]:
    """Every check on a Diagnosis `d` (helpers.chapters.diagnosis.Diagnosis), on the values the page glues."""
    from helpers.chapters.diagnosis.verdict_sections import attribution, decision, vm_predicted

    v = d.verdict
    preds = pd.concat([v.bare_metal(), v.vm()], ignore_index=True)
    att = attribution(d)
    vmp = vm_predicted(d)
    dec = decision(d)
    a = v.attribution()
    env = v.share_envelope()
    out = points_outside_bands(preds)
    out += stated_range_problems(a, {c: (att.values[f"share_lo_{c}"], att.values[f"share_hi_{c}"]) for c in (1, 64)})
    out += set_aside_in_bounds(v.admissibility(), a[a["scenario_key"].isin([h.key for h in v.admitted()])])
    out += word_problems({"left-over at 17 against 1": (att.values["left_relation"], att.values["left_17"],
                                                       att.values["left_1"]),
                          "slowdown at 64 against 1": (att.values["ratio_relation"], att.values["slow_64"],
                                                       att.values["slow_1"])})
    sweep = bt.sweep_facts(bt.recorded_serving())
    out += rule_problems(sweep.growth_rule_text, sweep.rec_step_growth, sweep.bm_step_growth, bt.SAT_C)
    out += quantity_problems({
        "the host path's share at one stream (%)": [("attribution", att.values["share_lo_1"]),
                                                   ("envelope", 100 * env[1][0])],
        "the host path's top share at 64 (%)": [("attribution", att.values["share_hi_64"]),
                                               ("envelope", 100 * env[64][1])],
        "the VM's one-stream observation (tokens/s)": [("section 4", vmp.values["vm_obs_1"]),
                                                       ("remedies", d.observed(vd.VM, 1))],
    })
    if dec.values["conclusion_case"] == "unsettled" and \
            vd.share_words(100 * env[1][0], 100 * env[1][1]) not in dec.values["conclusion_text"]:
        out.append("the conclusion states another share range than the page")
    return out
