"""What was observed (the investigation's throughputs) set beside the prediction, and the investigation's open
next steps ranked by the gain the budget predicts."""
from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.model import arith as ma
from helpers.core import recorded

from .inputs import BAREMETAL_SCENARIO, PP_SCENARIO, TP4_SCENARIO, VM_SCENARIO
from .terms import BudgetError

# --------------------------------------------------------------------------------------------------
# Observations


@recorded.derived("recorded/serving.csv", "reference/baremetal.csv")
def observations() -> pd.DataFrame:
    """Output tokens/s at concurrency 1 and 64: the original VM (recorded) and bare metal (reference)."""
    s = recorded.load("recorded/serving.csv")
    s = s[(s["metric"] == "output_throughput") & s["concurrency"].isin([1, 64]) & (s["experiment"] != "target")]
    vm = pd.DataFrame({"system": "original VM", "kind": "recorded", "experiment": s["experiment"],
                       "concurrency": s["concurrency"].astype(int), "value": s["value"],
                       "value_low": s["value_low"], "value_high": s["value_high"],
                       "approx": s["approx"], "source": s["source"], "note": s["note"]})
    b = recorded.load("reference/baremetal.csv")
    b = b[(b["metric"] == "output_throughput") & b["concurrency"].isin([1, 64])]
    bm = pd.DataFrame({"system": b["system"], "kind": "reference", "experiment": "community bare metal",
                       "concurrency": b["concurrency"].astype(int), "value": b["value"],
                       "value_low": b["value_low"], "value_high": b["value_high"],
                       "approx": b["approx"], "source": b["source"], "note": b["note"]})
    out = pd.concat([vm, bm], ignore_index=True)
    out["mid"] = out["value"].fillna((out["value_low"] + out["value_high"]) / 2).astype(float)
    return out


@recorded.derived("recorded/serving.csv", "reference/baremetal.csv")
def primary_observations() -> pd.DataFrame:
    """One observed figure per (system, concurrency), chosen by rule, with the spread of the others.

    Rule: the original VM's figure is the best-configuration sweep (sweep_256_256, exact values);
    bare metal's is the cutlass MoE runner (the runner the VM used). The spread is min..max of every
    figure for that system and concurrency."""
    o = observations()
    rows = []
    for (vm, c), g in o.groupby([o["kind"] == "recorded", "concurrency"]):
        if vm:
            p = g[g["experiment"] == "sweep_256_256"]
            system = "original VM"
        else:
            p = g[g["system"].str.contains("cutlass")]
            system = "bare metal (reference)"
        if not len(p):
            continue
        rows.append({"system": system, "concurrency": int(c), "observed": float(p["mid"].iloc[0]),
                     "observed_min": float(g[["mid", "value_low"]].min().min()),
                     "observed_max": float(g[["mid", "value_high"]].max().max()),
                     "n_figures": len(g), "source": p["source"].iloc[0]})
    return pd.DataFrame(rows)


def compare(pred: pd.DataFrame, vm_scenario: str = VM_SCENARIO, bm_scenario: str = BAREMETAL_SCENARIO,
            model: str = "glm5", prefill_ratio: float = 0.0, tolerance: float = 0.25) -> pd.DataFrame:
    """Predicted vs observed at concurrency 1 (tokens/s per stream) and 64 (aggregate), both systems.

    `prefill_ratio` selects the prediction rows (0: pure decode; the workload's ratio: mixed steps).
    `missing_us_per_collective` is what each collective would have to add to close the gap (derived)."""
    obs = primary_observations()
    n_coll = ma.collectives_per_step(ma.load_model(model))
    out = []
    for r in obs.itertuples():
        scen = vm_scenario if r.system == "original VM" else bm_scenario
        p = pred[(pred["scenario"] == scen) & (pred["batch"] == r.concurrency)
                 & np.isclose(pred["prefill_ratio"].astype(float), prefill_ratio)]
        if not len(p):
            raise BudgetError(f"the prediction table has no row for scenario {scen!r} at batch {r.concurrency}")
        p = p.iloc[0]
        predicted = float(p["tok_s_aggregate"])
        obs_step_ms = r.concurrency / r.observed * 1e3
        rel = (predicted - r.observed) / r.observed
        out.append({"system": r.system, "concurrency": r.concurrency, "scenario": scen,
                    "observed_tok_s": r.observed, "observed_min": r.observed_min, "observed_max": r.observed_max,
                    "predicted_tok_s": predicted, "rel_err": rel, "within_tolerance": abs(rel) <= tolerance,
                    "observed_step_ms": obs_step_ms, "predicted_step_ms": float(p["total_ms"]),
                    "missing_ms": obs_step_ms - float(p["total_ms"]),
                    "missing_us_per_collective": (obs_step_ms - float(p["total_ms"])) * 1e3 / n_coll})
    return pd.DataFrame(out)


# --------------------------------------------------------------------------------------------------
# The investigation's open next steps, ranked by the gain the budget predicts

#: keyword in the step's text -> (scenario that models it or None, how)
NEXT_STEP_MODEL = (
    ("NCCL tuning", None, "acts on the collectives' unexplained cost, which the budget has no term for"),
    ("bare-metal", BAREMETAL_SCENARIO, "bare metal with P2P: the reference all-reduce"),
    ("fewer GPUs", TP4_SCENARIO, "TP4 on four of the GPUs"),
    ("IOMMU", BAREMETAL_SCENARIO, "passthrough that enables P2P: modelled as the reference all-reduce"),
    ("NCCL_ALGO", "VM, tree mapping", "tree instead of ring over the same copy latency"),
    ("Profile", None, "a measurement: it would supply the missing term, not a speed-up"),
    ("TP4+PP2", PP_SCENARIO, "two pipeline stages of TP4"),
    ("CUDA 13.1", None, "kernel speed, which the budget does not model"),
)


def rank_next_steps(pred: pd.DataFrame, fits_on_gpus: dict[str, bool] | None = None,
                    base: str = VM_SCENARIO) -> pd.DataFrame:
    """data/recorded/next_steps.csv with the predicted speed-up over `base` at batch 1 and at the
    largest batch, ranked by the batch-1 gain (steps the budget cannot price last).

    `fits_on_gpus`: scenario -> whether its weights fit; a scenario that does not fit gains nothing."""
    steps = recorded.load("recorded/next_steps.csv")
    fits_on_gpus = fits_on_gpus or {}
    pure = pred[np.isclose(pred["prefill_ratio"].astype(float), 0.0)]
    bmax = int(pure["batch"].max())

    def tok(scen, b, col):
        r = pure[(pure["scenario"] == scen) & (pure["batch"] == b)]
        return float(r[col].iloc[0]) if len(r) else float("nan")

    rows = []
    for s in steps.itertuples():
        match = [(k, sc, how) for k, sc, how in NEXT_STEP_MODEL if k.lower() in s.step.lower()]
        if not match:
            raise BudgetError(f"data/recorded/next_steps.csv step {s.order} ({s.step!r}) contains none of the "
                              f"keywords of helpers.model.budget.NEXT_STEP_MODEL {[k for k, _, _ in NEXT_STEP_MODEL]}; "
                              "add the step there (with the scenario that models it, or None)")
        k, sc, how = match[0]
        g1 = gmax = float("nan")
        feasible = True
        if sc is not None:
            feasible = fits_on_gpus.get(sc, True)
            g1 = tok(sc, 1, "tok_s_per_stream") / tok(base, 1, "tok_s_per_stream")
            gmax = tok(sc, bmax, "tok_s_aggregate") / tok(base, bmax, "tok_s_aggregate")
            if not feasible:
                how += " (the weights do not fit: no gain)"
                g1 = gmax = 0.0
        rows.append({"order": s.order, "step": s.step, "category": s.category, "status": s.status,
                     "modelled_as": sc or "not modelled", "how": how,
                     "gain_batch1": g1, f"gain_batch{bmax}": gmax, "source": s.source})
    df = pd.DataFrame(rows)
    df = df.sort_values("gain_batch1", ascending=False, na_position="last", kind="stable")
    df.insert(0, "rank", range(1, len(df) + 1))
    return df.reset_index(drop=True)
