"""What the diagnosis page shows first and how its tables read: the answer's "predicted X ms, observed Y ms,
explained Z %" for each observed point (bare metal from measured kernels with its band; the original VM over
its host-path models), and the page's views of the sections' tables with at most seven columns and human
headers with units. The saved results keep their own columns (helpers.core.layout)."""
from __future__ import annotations

import pandas as pd

from helpers.chapters.diagnosis.build import ENDS, Diagnosis, Part
from helpers.core import tables
from helpers.core.tables import Folded, folded  # noqa: F401 (the diagnosis's folds; helpers.chapters.diagnosis re-exports them)
from helpers.core.pick import PickError, one, rows


def _ms(concurrency: int, tok_s: float) -> float:
    """A decode step's time (ms) from tokens/s at `concurrency` sequences (per stream at 1, in aggregate above)."""
    if not tok_s > 0:
        raise PickError(f"a step time from {tok_s} tokens/s at concurrency {concurrency}: expected a positive speed")
    return concurrency * 1e3 / float(tok_s)


def answer(d: Diagnosis) -> Part:
    """Per observed point, the predicted step (ms) against the observed one and the share of the observed step
    the prediction accounts for (predicted over observed, %): bare metal from measured inputs (point and its
    5-95 % band), the original VM from measured compute plus each host-path model (fastest to slowest)."""
    v = d.verdict
    bm, vm = v.bare_metal(), v.vm()
    admitted = {h.key for h in v.admitted()}   # a scenario faster than P2P sets no bound (Verdict.admissibility)
    values = {}
    for c in ENDS:
        b = one(bm, "the bare-metal band", concurrency=c)
        obs = _ms(c, b["observed_tok_s"])
        pred = _ms(c, b["predicted_tok_s"])
        values.update({f"ans_bm_pred_{c}": pred, f"ans_bm_lo_{c}": _ms(c, b["band_high_tok_s"]),
                       f"ans_bm_hi_{c}": _ms(c, b["band_low_tok_s"]), f"ans_bm_obs_{c}": obs,
                       f"ans_bm_expl_{c}": 100 * pred / obs})
        g = rows(vm[vm["scenario_key"].isin(admitted)], "the VM predictions (admissible scenarios)",
                 observation=f"vm_{c}")
        steps = [_ms(c, t) for t in g["predicted_tok_s"]]
        vobs = _ms(c, g["observed_tok_s"].iloc[0])
        values.update({f"ans_vm_lo_{c}": min(steps), f"ans_vm_hi_{c}": max(steps), f"ans_vm_obs_{c}": vobs,
                       f"ans_vm_expl_lo_{c}": 100 * min(steps) / vobs, f"ans_vm_expl_hi_{c}": 100 * max(steps) / vobs})
    return Part(values)


# ------------------------------------------------------------------------------------------ the page's tables
#: fractions shown as percent wherever a table has them
_PERCENT = ("rel_err", "share_memory", "share_launch", "share_comm", "share_explained", "share_low", "share_high",
            "share_mid", "fraction_of_ceiling", "book_rel_err", "hidden_fraction")

SHOWN = {
    "inputs": {"input": "input", "value": "value", "unit": "unit", "kind": "kind", "source": "source"},
    "baseline": {"batch": "batch", "memory_us": "memory (µs)", "launch_us": "launches (µs)",
                 "comm_us": "collectives (µs)", "total_ms": "step (ms)", "share_comm": "collectives (%)",
                 "tok_s_per_stream": "tokens/s per stream"},
    "comparison": {"system": "system", "concurrency": "concurrency", "steps": "steps counted",
                   "observed_tok_s": "observed (tokens/s)", "predicted_tok_s": "predicted (tokens/s)",
                   "rel_err": "error (%)", "within_tolerance": "agrees"},
    "comparison_ms": {"system": "system", "concurrency": "concurrency", "steps": "steps counted",
                      "observed_step_ms": "observed step (ms)", "predicted_step_ms": "predicted step (ms)",
                      "missing_ms": "missing (ms)", "missing_us_per_collective": "missing per collective (µs)"},
    "observations": {"system": "system", "kind": "kind", "experiment": "experiment", "concurrency": "concurrency",
                     "tok_s_shown": "tokens/s", "approx": "approximate", "source": "source"},
    "budgets": {"system": "system", "concurrency": "concurrency", "budget": "budget", "step_ms": "step (ms)",
                "predicted_tok_s": "predicted (tokens/s)", "observed_tok_s": "observed (tokens/s)",
                "rel_err": "error (%)"},
    "goal": {"concurrency": "concurrency", "predicted_ms": "predicted (ms)", "observed_ms": "observed (ms)",
             "largest": "largest term", "largest_ms": "largest (ms)", "second": "second term",
             "second_ms": "second (ms)"},
    "projection_check": {"batch": "batch", "op": "operation", "ours_us": "this step, the GPU it was timed on (µs)",
                         "projected_us": "projected (µs)", "aic_target_us": "aiconfigurator there (µs)",
                         "ratio_projected": "projected / aiconfigurator", "ratio_here": "this step / SGLang"},
    "verdict_inputs": {"input": "input", "system": "system", "low": "low", "mid": "mid", "high": "high",
                       "unit": "unit", "why": "why"},
    "bare_metal_band": {"concurrency": "concurrency", "observed_tok_s": "observed (tokens/s)",
                        "predicted_tok_s": "predicted: band median (tokens/s)", "band_low_tok_s": "band low (tokens/s)",
                        "band_high_tok_s": "band high (tokens/s)", "rel_err": "error (%)",
                        "observed_percentile": "observation's percentile"},
    "holdouts": {"machine": "machine", "where": "streams at context", "observed": "observed (tokens/s)",
                 "point": "predicted (tokens/s)", "rel_err": "error (%)", "percentile": "observation's percentile",
                 "inside": "inside 5-95 %"},
    "left_out": {"what": "observations", "system": "machine", "why": "why left out"},
    "hidden_points": {"dtype": "precision", "batch": "batch", "context": "context (tokens)", "saved_us": "saved (µs)",
                      "shared_us": "shared expert's own operations (µs)", "hidden_fraction": "hidden (%)"},
    "peer": {"concurrency": "concurrency", "observed_tok_s": "observed (tokens/s)",
             "this_book_tok_s": "this book (tokens/s)", "predicted_tok_s": "aiconfigurator, GLM-5 graph (tokens/s)",
             "book_rel_err": "this book's error (%)", "rel_err": "aiconfigurator's error (%)"},
    "vm_scores": {"scenario": "host-path model", "what": "observation", "observed_tok_s": "observed (tokens/s)",
                  "predicted_tok_s": "predicted (tokens/s)", "band_low_tok_s": "band low (tokens/s)",
                  "band_high_tok_s": "band high (tokens/s)", "observed_percentile": "observation's percentile"},
    "attribution": {"concurrency": "concurrency", "scenario": "host-path model", "lost_ms_per_step": "lost (ms)",
                    "host_path_excess_ms": "all-reduces above bare metal (ms)", "share_low": "explained, low (%)",
                    "share_explained": "explained (%)", "share_high": "explained, high (%)"},
    "residuals": {"observation": "observation", "batch": "batch", "observed_step_ms": "observed step (ms)",
                  "predicted_with_bare_metal_collectives_ms": "predicted, bare-metal collectives (ms)",
                  "left_over_ms": "left over (ms)"},
    "thresholds": {"concurrency": "concurrency", "message_bytes": "message", "all_reduces_per_step": "all-reduces",
                   "bare_metal_us": "bare metal (µs)", "lost_ms_per_step": "lost (ms)",
                   "explains_80_us": "explains 80 % at (µs)", "explains_25_us": "explains 25 % at (µs)"},
    "evidence": {"scenario": "host-path model", "concurrency": "concurrency", "message_bytes": "message",
                 "low_us": "low (µs)", "mid_us": "mid (µs)", "high_us": "high (µs)"},
    "achieved": {"scenario": "host-path model", "low_us": "low (µs)", "mid_us": "mid (µs)", "high_us": "high (µs)",
                 "share_low": "explained, low (%)", "share_high": "explained, high (%)"},
    "ceilings": {"concurrency": "concurrency", "point": "point", "tok_s": "tokens/s",
                 "ceiling_tok_s": "ceiling (tokens/s)", "fraction_of_ceiling": "of the ceiling (%)"},
    "remedies": {"rank": "rank", "remedy": "remedy", "tried": "tried", "tok_s_low @1": "one stream, low (tokens/s)",
                 "tok_s_mid @1": "one stream (tokens/s)", "tok_s_high @1": "one stream, high (tokens/s)",
                 "tok_s_mid @64": "at 64 (tokens/s)"},
    "remedy_findings": {"rank": "rank", "remedy": "remedy", "priced_as": "priced as", "finding": "finding"},
}


def human(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """The page's view of a section's table: SHOWN[name]'s columns in order, under their headers, fractions as
    percent. A column the table lacks raises PickError naming it and the columns there are."""
    spec = SHOWN[name]
    if len(spec) > 7:
        raise ValueError(f"the diagnosis table '{name}' would show {len(spec)} columns; at most 7")
    out = tables.view(df, spec, _PERCENT, f"the diagnosis table '{name}'")
    if "unit" in spec:   # the data's "us" is written µs on the page
        out[spec["unit"]] = out[spec["unit"]].replace({"us": "µs"})
    return out


#: header text for the tables the page shows without a SHOWN view (helpers.core.tables.show's `rename`; a unit in
#: the name, as `memory_us` or `VM ring (us)`, is still added by the table)
HEADERS = {"VM one_shot (us)": "VM one-shot", "message_KiB": "message", "all_reduce": "all-reduce (µs)",
           "all_to_all": "all-to-all (µs)", "world_size": "GPUs", "size_bytes": "message",
           "tok_s_per_stream": "tokens/s per stream", "tok_s_aggregate": "tokens/s", "memory_us": "memory",
           "launch_us": "launches", "comm_us": "collectives", "total_ms": "step", "scenario": "host-path model"}


def headers(df: pd.DataFrame) -> dict[str, str]:
    """HEADERS for the columns `df` has (helpers.core.tables.show's `rename` refuses a column the table lacks)."""
    return {c: h for c, h in HEADERS.items() if c in df.columns}
