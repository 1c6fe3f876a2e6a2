"""The remedies of data/reference/remedies.csv, each priced by the verdict (or said not to be), ranked by
predicted gain with bands."""
from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.core import recorded
from helpers.model.verdict.compute import compute_us, parts
from helpers.model.verdict.ranges import VM, VerdictInputError, observations
from helpers.model.verdict.scenarios import vm_collectives_us

# -------------------------------------------------------------------------------------------- remedies
def check_remedies() -> pd.DataFrame:
    """data/reference/remedies.csv, each mechanism one the verdict can price (or says it cannot)."""
    t = recorded.load("reference/remedies.csv")
    bad = sorted(set(t["mechanism"]) - set(PRICED_AS))
    if bad:
        raise VerdictInputError(f"data/reference/remedies.csv: mechanism(s) {bad} are not priced by "
                                f"helpers.model.verdict; known: {sorted(PRICED_AS)}")
    return t


def remedies(v, fits_tp4: bool) -> pd.DataFrame:
    """Each remedy of data/reference/remedies.csv (priced by `v`, a helpers.model.verdict.Verdict) with its
    predicted tokens/s at 1 and 64 (band over the host-path scenarios) and gain over the VM as observed;
    what the investigation tried and found."""
    table = check_remedies()
    att = v.attribution()
    obs = {o.key: o for o in observations()}
    rows = []
    for r in table.itertuples(index=False):
        row = {"remedy": r.remedy, "tried": r.tried, "finding": r.finding, "source": r.source, "note": r.note}
        for c, key in ((1, "vm_1"), (64, "vm_64")):
            observed = obs[key].observed_tok_s
            step = c / observed * 1e3   # ms at the nominal batch
            gains = _remedy_gains(v, r.mechanism, c, step, att, fits_tp4)
            if gains is None:
                row.update({f"tok_s_low @{c}": np.nan, f"tok_s_mid @{c}": np.nan, f"tok_s_high @{c}": np.nan,
                            f"gain_mid @{c}": np.nan})
                continue
            lo, mid, hi = gains
            row.update({f"tok_s_low @{c}": observed * lo, f"tok_s_mid @{c}": observed * mid,
                        f"tok_s_high @{c}": observed * hi, f"gain_mid @{c}": mid})
        row["priced_as"] = PRICED_AS[r.mechanism] if r.mechanism != "fewer_gpus" or fits_tp4 else \
            "not possible: at TP4 the weights do not fit on the recorded GPUs"
        rows.append(row)
    out = pd.DataFrame(rows)
    out = out.sort_values("gain_mid @1", ascending=False, na_position="last", kind="stable").reset_index(drop=True)
    out.insert(0, "rank", range(1, len(out) + 1))
    return out


PRICED_AS = {
    "p2p_in_vm": "the host path replaced by bare metal's NCCL: the step loses each scenario's excess (band over scenarios)",
    "enabler": "no gain alone: it is what a clique needs",
    "condition": "not a remedy: it decides whether the clique can work",
    "nccl_tuning": "each host-path model's all-reduce replaced by the tuned arm's (NCCL without P2P, 32-64 channels, a 64 MB buffer: the community's tuning, not the settings the investigation listed; its end-to-end figures turned into a per-all-reduce cost; band over the models)",
    "tp4_pp2": "four ranks per all-reduce (each scenario at 4 ranks), compute doubled (the stages run one after the other at one batch)",
    "fewer_gpus": "TP4 on four GPUs",
    "mtp": "not priced: no acceptance rate for GLM-5 on this deployment is recorded",
}


def _remedy_gains(v, mech: str, c: int, step_ms: float, att: pd.DataFrame, fits_tp4: bool):
    """(low, mid, high) of observed-step / remedied-step, or None where it is not priced."""
    if mech in ("enabler", "condition"):
        return 1.0, 1.0, 1.0
    if mech in ("mtp",) or (mech == "fewer_gpus" and not fits_tp4):
        return None
    a = att[(att["concurrency"] == c) & att["admissible"]]   # a scenario faster than P2P sets no bound
    if mech == "nccl_tuning":   # each other scenario's host path replaced by the tuned arm's (none where it costs more)
        tuned = att[(att["concurrency"] == c) & (att["scenario_key"] == "nccl_tuned_p2p_off")]["step_excess_ms"]
        if not len(tuned):
            return None
        saved = np.clip(a[a["scenario_key"] != "nccl_tuned_p2p_off"]["step_excess_ms"].to_numpy()
                        - float(tuned.iloc[0]), 0, None)
        f = lambda s: step_ms / max(step_ms - s, 1e-9)  # noqa: E731
        return f(float(saved.min())), f(float(np.median(saved))), f(float(saved.max()))
    if mech == "p2p_in_vm":
        saved = a["step_excess_ms"].to_numpy()
        lo_s, hi_s = float(np.clip(saved.min(), 0, None)), float(np.clip(saved.max(), 0, None))
        mid_s = float(np.clip(np.median(saved), 0, None))
        f = lambda s: step_ms / max(step_ms - s, 1e-9)  # noqa: E731
        return f(lo_s), f(mid_s), f(hi_s)
    if mech in ("tp4_pp2", "fewer_gpus"):
        mid = v.mids(VM)
        p = parts(v.model.key, c, v.context, v.floor_us)
        comp = float(compute_us(p, mid)[0]) / 1e3
        deltas = []
        for hp in v.admitted():          # a scenario faster than P2P sets no bound (Verdict.admissibility)
            try:
                c8 = float(vm_collectives_us(p, hp, np.array([0.5]))[0]) / 1e3
                c4 = float(vm_collectives_us(p, hp, np.array([0.5]), ranks=4)[0]) / 1e3
            except VerdictInputError:
                continue
            deltas.append((c8 - c4) - comp)   # TP4 (+PP2 or not): twice the bytes per GPU, compute doubled
        if not deltas:
            return None
        f = lambda dlt: step_ms / max(step_ms - dlt, 1e-9)  # noqa: E731
        return f(min(deltas)), f(float(np.median(deltas))), f(max(deltas))
    raise VerdictInputError(f"remedy mechanism {mech!r} is unknown; data/schema.yaml lists the allowed ones")


# ----------------------------------------------------------------------------------- the decisive measurement
#: what each outcome of the decisive measurement (MEASURE_COMMANDS) means against the thresholds, and what to do next
OUTCOMES = {
    "host path": ("at or above the 'explains 80 %' threshold at both sizes: the host path explains most of the lost "
                  "time; restore P2P (the remedies below), then check that it really works with the four steps"),
    "middle": ("between the thresholds (or above one and below the other): the host path explains part of the "
               "loss; trace live decode steps to split collective time from a per-step tax before acting"),
    "not the host path": ("at or below the 'explains 25 %' threshold at both sizes: the host path cannot explain "
                          "the loss; trace live decode steps to find the per-step tax that does"),
}


def classify(us_by_bytes: dict, thresholds: pd.DataFrame) -> str:
    """Which OUTCOMES key an all-reduce time per message size (µs, keyed by bytes) falls in, against the
    verdict's thresholds (columns message_bytes, explains_80_us, explains_25_us)."""
    need = {"message_bytes", "explains_80_us", "explains_25_us"}
    if not need <= set(thresholds.columns):
        raise VerdictInputError(f"thresholds need columns {sorted(need)}; got {sorted(thresholds.columns)}")
    above, below = [], []
    for t in thresholds.itertuples():
        key = next((k for k in us_by_bytes if int(k) == int(t.message_bytes)), None)
        if key is None:
            raise VerdictInputError(f"no all-reduce time given at {int(t.message_bytes)} B: measure both sizes "
                                    f"of the decision rule")
        us = float(us_by_bytes[key])
        above.append(us >= t.explains_80_us)
        below.append(us <= t.explains_25_us)
    if all(above):
        return "host path"
    if all(below):
        return "not the host path"
    return "middle"


def p2p_checks(kind: str | None = None) -> pd.DataFrame:
    """data/reference/p2p_checks.csv (the four checks, the caveats, the trace), optionally one kind, in order."""
    t = recorded.load("reference/p2p_checks.csv")
    if kind is not None:
        if kind not in set(t["kind"]):
            raise VerdictInputError(f"data/reference/p2p_checks.csv has no kind {kind!r}; known: {sorted(set(t['kind']))}")
        t = t[t["kind"] == kind]
    return t.sort_values(["kind", "order"]).reset_index(drop=True)


def outcomes_table(thresholds: pd.DataFrame) -> pd.DataFrame:
    """Each outcome of the decisive measurement: the range of µs at each size it covers, what it means and the
    next command (the trace of live decode steps from p2p_checks.csv, or the four-step P2P check)."""
    trace = p2p_checks("trace").iloc[0]
    th = thresholds.sort_values("message_bytes")
    span = {"host path": lambda t: f"{t.explains_80_us:.0f} µs or more",
            # open at both ends: a time at a mark belongs to the outcome that names the mark (classify: >= and <=)
            "middle": lambda t: f"over {t.explains_25_us:.0f} and under {t.explains_80_us:.0f} µs",
            "not the host path": lambda t: f"{t.explains_25_us:.0f} µs or less"}
    rows = []
    for key, meaning in OUTCOMES.items():
        row = {"outcome": key}
        for t in th.itertuples():
            row[f"at {int(t.message_bytes) // 1024} KiB"] = span[key](t)
        row.update({"means": meaning, "next": ("the four-step P2P check, after the clique setting (section 6)"
                                                if key == "host path" else f"{trace['command']} ({trace['source']})")})
        rows.append(row)
    return pd.DataFrame(rows)
