"""The diagnosis chapter's section 3, held out: the predictor (helpers.model.verdict.predictor) against public
observations it was not built beside, each against the band registered for it before any comparison
(helpers.model.verdict.calibration), the calibration over them, what was left out and why, and what it implies
for the original VM's attribution (a sentence chosen by a stated rule)."""
from __future__ import annotations

import pandas as pd

from helpers.chapters.diagnosis.build import Diagnosis, Part
from helpers.core import recorded
from helpers.core.pick import PickError
from helpers.model import kernels as kt
from helpers.model import verdict as vd

#: the issue's goal for the calibration: at least this share inside the 5-95 % bands, and a median absolute error
#: at most this
GOAL_INSIDE, GOAL_MEDIAN = 0.80, 0.10
#: a machine kind whose held-out errors all exceed the model-error range's widest side is "not priced by the tables"
SHORT = {kt.RTX: "RTX PRO 6000", kt.H200: "H200", kt.B200: "B200"}

GOAL_TEXT = {
    (True, True): "meeting the goal set before the comparison (at least 80 % inside, median error at most 10 %)",
    (True, False): "inside often enough for the goal set before the comparison (80 %), but with a median error above its 10 %",
    (False, True): "with a median error within the goal set before the comparison (10 %), but fewer than its 80 % inside",
    (False, False): "missing both parts of the goal set before the comparison (80 % inside, median error at most 10 %)",
}
#: what the calibration implies for the VM's attribution: (the recorded GPU calibrated, every other kind calibrated)
IMPLICATION = {
    (True, True): ("On the recorded GPU and elsewhere the tables price GLM-5's decode within the bands, so the VM's "
                   "loss is not the predictor's error."),
    (True, False): ("On the recorded GPU the tables price GLM-5's decode within the bands at concurrencies and "
                    "contexts the prediction was not built beside, so the VM's lost time is not this predictor's error "
                    "there. Elsewhere an SGLang build of early 2026 ran far slower than the tables of SGLang 0.5.14 "
                    "price: a software release alone can cost that much, and the original VM ran a nightly of early "
                    "2026, so part of the VM's loss may be its software rather than its host path; the host-path "
                    "shares below are upper bounds in that sense."),
    (False, True): ("On the recorded GPU the held-out points fall outside the bands more often than they should: the "
                    "VM's attribution inherits that error."),
    (False, False): ("The held-out points fall outside the bands on every machine kind: the predictor's error is larger "
                     "than its band says, and the VM's attribution inherits it."),
}


#: the held-out observations' median percentile among their draws further than this from 50 makes the predictor
#: lean: below, most observations are slower than their band's median (it leans fast); above, faster (it leans slow)
LEAN_MARGIN = 10.0


def lean_words(median_percentile: float) -> str:
    """Which way the predictor leans on the held-out points, from the observations' median percentile among their
    draws (LEAN_MARGIN), its subject named so it is not read as the bare-metal band's lean at one point."""
    if median_percentile < 50 - LEAN_MARGIN:
        return ("below 50: on these held-out points the predictor leans fast, most observations slower than their "
                "band's median")
    if median_percentile > 50 + LEAN_MARGIN:
        return ("above 50: on these held-out points the predictor leans slow, most observations faster than their "
                "band's median")
    return f"within {LEAN_MARGIN:.0f} of 50: on these held-out points the predictor leans neither way"


def _calibrated(c: dict) -> bool:
    return c["share_inside"] >= GOAL_INSIDE and c["median_abs_err"] <= GOAL_MEDIAN


def held_out(d: Diagnosis) -> Part:
    """Section 3, held out: the calibration's values, the per-observation table and what was left out."""
    t = vd.calibration.holdout_table()
    c = vd.calibration.calibration(t)
    per = vd.calibration.by_system(t).set_index("system")
    if kt.RTX not in per.index:
        raise PickError(f"no held-out observation on the recorded GPU ({kt.RTX}); the holdouts have {list(per.index)}")
    rtx = vd.calibration.calibration(t[t["system"] == kt.RTX])
    others = [vd.calibration.calibration(g) for s, g in t.groupby("system") if s != kt.RTX]
    worst = t.loc[t["rel_err"].abs().idxmax()]
    me = d.verdict.inputs.get("model_error", "all")
    registered = sorted(set(t["registered"]))
    values = {"cal_n": c["n"], "cal_n_systems": c["n_systems"], "cal_n_inside": c["n_inside"],
              "cal_share_pct": 100 * c["share_inside"], "cal_median_err_pct": 100 * c["median_abs_err"],
              "cal_worst_err_pct": 100 * float(worst["rel_err"]), "cal_median_pctile": c["median_percentile"],
              "cal_lean_text": lean_words(float(c["median_percentile"])),
              "cal_worst_what": f"{SHORT.get(worst['system'], worst['system'])}, {worst['checkpoint'].upper()}, "
                                f"concurrency {int(worst['concurrency'])}, context {worst['context_label']}",
              "cal_rtx_n": rtx["n"], "cal_rtx_inside": rtx["n_inside"], "cal_rtx_median_pct": 100 * rtx["median_abs_err"],
              "cal_rtx_worst_pct": 100 * rtx["worst_abs_err"], "cal_registered": "; ".join(registered),
              "cal_n_left_out": len(recorded.load("reference/holdouts_left_out.csv")),
              "me_low_pct": 100 * (me.low - 1), "me_high_pct": 100 * (me.high - 1),
              "cal_goal_text": GOAL_TEXT[(c["share_inside"] >= GOAL_INSIDE, c["median_abs_err"] <= GOAL_MEDIAN)],
              "cal_implication": IMPLICATION[(_calibrated(rtx), all(_calibrated(o) for o in others))]}
    shown = t.assign(machine=t["system"].map(lambda s: SHORT.get(s, s)),
                     where=t["concurrency"].astype(int).astype(str) + " at " + t["context_label"].astype(str))
    left = recorded.load("reference/holdouts_left_out.csv")
    return Part(values, {}, {"holdouts": shown, "left_out": left[["what", "system", "why"]]})


def holdout_rows(part: Part) -> pd.DataFrame:
    """The held-out table as the page shows it (the chapter's `human` view is applied by the fold)."""
    return part.shown["holdouts"]
