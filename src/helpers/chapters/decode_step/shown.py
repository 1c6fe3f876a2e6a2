"""What the decode-step chapter shows a reader, beside what it computes: its tables with human headers and
units (at most seven columns), the answer's ratios, and the sentences that follow what this run executed
(the two-rank check is claimed only where it ran). The saved results keep their own columns
(helpers.core.layout); these are the page's views of them."""
from __future__ import annotations

import math

import pandas as pd

from helpers.core import tables
from helpers.core.pick import one
from helpers.model import arith as ma

#: the whole-step table the page shows: column -> header (a unit in parentheses)
STEPS_SHOWN = {"batch": "batch", "context": "context (tokens)", "mode": "mode", "step_ms": "step (ms)",
               "p90_ms": "p90 (ms)", "tok_s": "tokens/s", "tok_s_per_stream": "tokens/s per stream"}
#: the split table the page shows (shares and the fraction of the datasheet as percent)
SPLIT_SHOWN_HUMAN = {"batch": "batch", "component": "component", "time_us": "time (µs)", "share": "share of the components' sum (%)",
                     "kernels": "kernels", "achieved_GBps": "achieved (GB/s)", "share_of_peak": "of datasheet (%)"}
#: the per-operation fidelity table (section 7)
FIDELITY_SHOWN = {"batch": "batch", "op": "operation", "ours_us": "this step (µs)", "aic_here_us": "SGLang (µs)",
                  "ratio_here": "ratio", "ours_GBps": "achieved (GB/s)"}
#: the tuning bounds (section 8)
TUNING_SHOWN = {"tuning": "tuning", "acts_on": "acts on", "removable_ms": "removable (ms)",
                "max_speedup": "at most (x)", "share_of_observed_step": "of the observed step (%)"}
_PERCENT = ("share", "share_of_peak", "share_of_observed_step")


def human(df: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """`df`'s `columns` (in that order) under their human headers; fractions named in _PERCENT become percent.
    A column the table lacks raises tables.ColumnError (a KeyError) naming it and the columns there are."""
    return tables.view(df, columns, _PERCENT, "decode-step table")


CHECK_SUMMARY_NOT_RUN = ("This run did not execute the two-rank check of section 1 (a CPU run in mode auto and the "
                         "test suite do).")
CHECK_SUMMARY_PASSED = ("The sharded step over two real processes reproduced the unsharded logits to "
                        "{rel:.1e} of the largest (tolerance {tol:.0e}); the wrong split was off by {wrong:.2f} "
                        "and was caught.")
CHECK_SUMMARY_FAILED = ("The two-rank check FAILED in this run: the sharded step was off by {rel:.1e} (tolerance "
                        "{tol:.0e}), the wrong split by {wrong:.2f}{caught}; section 1 has the table.")


def check_summary(check: pd.DataFrame | None) -> str:
    """The Summary's sentence on the two-rank check, chosen from what this run executed (step.sharding_check's
    table, or None where it did not run): it claims agreement only where the check ran and passed."""
    if check is None:
        return CHECK_SUMMARY_NOT_RUN
    r = one(check, "the sharding check", variant="right")
    w = one(check, "the sharding check", variant="naive gate_up")
    if bool(r.ok) and not bool(w.ok):
        return CHECK_SUMMARY_PASSED.format(rel=float(r.rel_err), tol=float(r.tolerance), wrong=float(w.rel_err))
    return CHECK_SUMMARY_FAILED.format(rel=float(r.rel_err), tol=float(r.tolerance), wrong=float(w.rel_err),
                                       caught="" if not bool(w.ok) else ", NOT caught")


def answer_values(measurement: dict, byte_values: dict) -> dict:
    """The answer's ratios: the measured step over the time its bytes take at the datasheet bandwidth (a
    bound), at one sequence and at 64 (`measurement_values` and `bytes_values` dicts)."""
    out = {}
    for b in (1, 64):
        bound = float(byte_values[f"bound_ms_{b}"])
        if not bound > 0 or not math.isfinite(bound):
            raise ValueError(f"bytes bound at batch {b}: {bound} ms; expected a positive time")
        out[f"floor_x_{b}"] = float(measurement[f"step_{b}"]) / bound
    return out


ANSWER_WHAT = ("An emulated TP{tp} rank of {model} ({weights}; its all-reduces left out; {held}; no SGLang) "
               "runs a decode step in")


def answer_what(meas) -> str:
    """What the answer's step is, from the measurement's own meta (helpers.model.measured.StepMeasurement):
    one rank at its TP degree with random weights in its precision (not the checkpoint's formats), timed
    alone in one process (the chapter's sweep joins no process group, so no all-reduce runs), and the MoE
    layers its memory plan held (cycled over the model's MoE positions where it held fewer)."""
    cfg, plan = meas.meta_value("config"), meas.meta_value("plan")
    m = ma.load_model(cfg["model"])
    dtype = str(meas.meta.get("precision", plan["dtype"]))
    other = sorted({str(f).upper() for f in m.precision.values() if f != dtype})
    weights = f"random {dtype} weights" + (f", not the checkpoint's {' and '.join(other)}" if other else "")
    held = int(plan["moe_held"])
    held_words = (f"all {m.moe_layers} MoE layers held" if held >= m.moe_layers else
                  f"{held} of {m.moe_layers} MoE layers held and cycled")
    return ANSWER_WHAT.format(tp=int(cfg["tp"]), model=m.name, weights=weights, held=held_words)


FIDELITY_SUMMARY = "each operation against SGLang's kernel for the same shape: µs and their ratio"
FIDELITY_SUMMARY_NONE = "each operation of this step: µs and achieved GB/s (no SGLang kernel timed on {device})"


def fidelity_summary(fid: pd.DataFrame, device: str) -> str:
    """The per-operation table's title: a comparison only where some operation has an SGLang time beside it."""
    return FIDELITY_SUMMARY if fid["ratio_here"].notna().any() else FIDELITY_SUMMARY_NONE.format(device=device)


#: the bytes table's headers (helpers.chapters.decode_step.measurement.bytes_table's columns)
BYTES_SHOWN = {f"bytes_{k} GiB @{n}": f"{label}, {n} {'sequence' if n == 1 else 'sequences'} (GiB)"
               for k, label in (("emulated", "bf16"), ("checkpoint", "checkpoint")) for n in (1, 64)}


#: header text for the FP8 and overlap tables' columns that carry no unit of their own (a unit suffix such as
#: `_ms` still adds its unit: `bf16_ms` -> `bf16 (ms)`)
HEADERS = {"bf16_ms": "bf16", "fp8_ms": "FP8", "bf16_GiB": "bf16", "fp8_GiB": "FP8", "bf16_MiB": "bf16",
           "fp8_MiB": "FP8", "bf16_us": "bf16", "fp8_us": "FP8", "bf16_GBps": "bf16", "fp8_GBps": "FP8",
           "fp8_speedup": "FP8 speed-up (x)", "fp8_vs_bf16": "FP8 / bf16 (x)", "held_in": "held in",
           "per_rank_shape": "per-rank shape", "rel_l2": "relative L2 error", "routing_flips": "routing flips",
           "token_agreement": "same greedy token", "one_stream_ms": "one stream", "two_streams_ms": "two streams",
           "saved_ms": "saved", "saved_share": "saved (share)", "shared_dense_alone_ms": "shared/dense MLP alone",
           "hidden_share": "shared expert hidden (share)"}


def headers(df: pd.DataFrame) -> dict[str, str]:
    """HEADERS for the columns `df` has (helpers.core.tables.show's `rename`, which refuses a column the table
    lacks)."""
    return {c: h for c, h in HEADERS.items() if c in df.columns}
