"""Chapter 06, section 3: the collective sweeps, the NCCL variants and the alpha-beta fits.

Sentences that depend on the machine or the mode are chosen here as whole variants, each tested; a row a
sentence cites that is missing raises helpers.core.pick.PickError naming it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from helpers.core.pick import PickError
from helpers.interconnect import settings, suite
from helpers.interconnect.method import Method


# ------------------------------------------------------------------------------------------ 3. collectives
def collective_text(live: bool, coll: pd.DataFrame | None, machine_label: str = "") -> str:
    if not live:
        return "Recorded mode: the original investigation never ran a collective benchmark, so there is nothing to show."
    if coll is None or not len(coll):
        return "No collective point was measured on this machine; see the runs above."
    return f"{len(coll)} collective points measured on this machine ({machine_label})."


def plan_text(live: bool, statements) -> str:
    """What the suite could not run here and why (helpers.interconnect.suite.plan_collectives)."""
    if not live:
        return "Recorded mode launches nothing."
    if statements is None:   # a replay of a run saved before the statements were
        return ("What the plan could not run on the run's machine, and why, was not recorded in this run (it "
                "predates saving it); the launches below are every one it made.")
    return " ".join(statements) if statements else "Every collective sweep this machine allows was launched."


def decode_collectives(coll: pd.DataFrame | None, decode_sizes) -> pd.DataFrame | None:
    """Every default collective at the decode sizes, unrounded: the table helper rounds once, as the diagnosis's
    table of this run's collectives does from the same saved value (site-read6 R6: rounding to 3 decimals first
    made 24.8496 µs read 24.9 here and 24.8 there)."""
    if coll is None or not len(coll):
        return None
    d = coll[coll.size_bytes.isin(list(decode_sizes)) & (coll.variant == "default")]
    return d[["op", "backend", "world_size", "method", "size_bytes", "time_us", "time_us_p10", "time_us_p90",
              "algbw_GBps", "busbw_GBps"]]


# ------------------------------------------------------------------------------------------ 3. NCCL variants
@dataclass
class Variants:
    rows: pd.DataFrame | None     # the all-reduce rows the comparison uses (the figure's)
    best: pd.DataFrame | None     # per decode size, the fastest variant (suite.best_variant)
    text: str                     # variant_text


def variants(coll: pd.DataFrame | None, decode_sizes, live: bool, gpus: int = 0, machine_label: str = "") -> Variants:
    """The NCCL variant comparison at the decode sizes and its sentence (variant_text): which variant
    won where, by how much, whether the win is clear of the launch-to-launch spread, how the variants
    were timed, and the notes of variants the investigation did not list."""
    var = suite.variant_rows(coll) if coll is not None and len(coll) else None
    var = var[var.world_size > 1] if var is not None else None
    if var is None or var.variant.nunique() <= 1:
        if not live:
            return Variants(None, None, "Recorded mode: the variants were never run on the original VM, so there is "
                                        "nothing to show.")
        why = ("this machine has fewer than two GPUs, so there is no GPU-to-GPU transfer for them to change."
               if gpus < 2 else "the parameter `nccl_variants` selected none (or only the default).")
        return Variants(var, None, "The NCCL variants were not run: " + why)
    best = suite.best_variant(coll, decode_sizes)
    if best.empty:
        raise PickError(f"NCCL variants: no variant row at the decode sizes {list(decode_sizes)}")
    wins = best.best_variant.value_counts()
    spread = best.launch_spread_us.median()
    rule = ("the best variant's p90 below the default's p10, and a saving larger than the default's own move "
            f"between its two launches, {spread:.1f} us at the median size" if np.isfinite(spread) else
            "the best variant's p90 below the default's p10; the default ran once, so how far a setting moves "
            "between launches is not known in this run")
    text = (f"At the decode sizes, the fastest all-reduce came from `{wins.index[0]}` at {wins.iloc[0]} of {len(best)} "
            f"sizes (measured, {machine_label}); the median saving over the default there is "
            f"{(best.default_time_us - best.best_time_us).median():.1f} us per all-reduce, a clear win at "
            f"{int(best.clear_win.sum())} of {len(best)} sizes ({rule}). " + _variant_timing(var))
    return Variants(var, best, text + _noted_variants(coll, best, decode_sizes))


def _noted_variants(coll: pd.DataFrame, best: pd.DataFrame, decode_sizes) -> str:
    """The notes of winning variants the investigation did not list, and then the winner among its own list
    (the default among them: PickError where those have no row at the decode sizes)."""
    noted = sorted(set(best.best_variant) & set(settings.VARIANT_NOTES))
    if not noted:
        return ""
    text = "".join(f" `{v}` is {settings.VARIANT_NOTES[v]}." for v in noted)
    own = suite.best_variant(coll, decode_sizes, exclude=list(settings.VARIANT_NOTES))
    if own.empty:
        raise PickError(f"NCCL variants: no row of the investigation's own settings (the default among them) at the "
                        f"decode sizes {list(decode_sizes)}, only of {noted}")
    ow = own.best_variant.value_counts()
    return text + (f" Among the settings the investigation listed, `{ow.index[0]}` was fastest at {ow.iloc[0]} of "
                   f"{len(own)} decode sizes, {(own.default_time_us - own.best_time_us).median():.1f} us below the "
                   f"default (median), a clear win by the same rule at {int(own.clear_win.sum())} of {len(own)}.")


def _variant_timing(var: pd.DataFrame) -> str:
    """How the variant rows were timed, from their method (VARIANT_METHOD, or the eager harness of older runs)."""
    m = Method.from_row(var.iloc[0])
    if m.harness != "graph":
        return ("Each variant is a separate launch timed with the eager harness (this run predates the graph-timed "
                "variant sweep), whose per-call host cost can move between launches by as much as these "
                "differences; a ranking at decode sizes from it needs a second run that agrees.")
    late = var.late_starts.dropna()
    lates = (f"; {int(late.sum())} of {int(var.loc[late.index, 'repeats'].sum())} timed blocks had a rank that "
             "received the deadline late and launched at once" if len(late) else "")
    call = ", each an ncclAllReduce call of its own as sglang makes it" if m.api == "nccl" else ""
    if m.start == "aligned":
        start = (f"every rank launching at one shared deadline set {m.start_lead_us / 1000:g} ms ahead (median "
                 f"launch skew between ranks {var.start_skew_us.median():.1f} us{lates}, measured)")
    else:
        start = "every rank released by a barrier" + (f" (the ranks span {m.nodes} nodes, whose hosts share no clock "
                                                       "for an aligned start)" if m.nodes > 1 else "")
    return (f"Each variant is a separate launch whose all-reduces ({int(var.iters.iloc[0])} per block{call}) are "
            f"captured in one CUDA graph and timed by nccl-tests' host clock, {start}: no Python or dispatch cost "
            "is left in these figures.")


# ------------------------------------------------------------------------------------------ 3. fits
def fits_table(fits: pd.DataFrame) -> pd.DataFrame:
    """The fits as shown: a fit is derived from the points it was fitted to (kind 'measured' in the data, which
    selects the link; shown as 'derived: fit to measured'); a one-rank collective moves no bytes between GPUs,
    so its beta is blank (the table's summary says why)."""
    one_rank = (fits.scope == "collective") & (fits.world_size == 1)
    show = fits.assign(beta_GBps=fits.beta_GBps.replace(np.inf, np.nan).mask(one_rank),
                       kind=fits.kind.replace({"measured": "derived: fit to measured"}))
    return show[["scope", "path", "method", "variant", "backend", "world_size", "alpha_us", "beta_GBps",
                 "median_rel_err", "max_rel_err", "n_points", "kind"]].round(3)


#: the fits' label in the prose, as the fit table's kind column gives it (site-read6 R7): a fit is derived
FIT_MEASURED, FIT_RECORDED = "derived: fitted to measured copies", "derived: fitted to recorded copies"


def fit_text(fits: pd.DataFrame, recorded_fit: pd.Series) -> str:
    """This machine's host-bounce fit beside the recorded VM's, or why there is none."""
    hb = fits[(fits.path == "host_bounce") & (fits.harness == "eager")]
    if not len(hb):
        return ("This run has no host-bounce measurement (it needs a GPU), so only the recorded fit can be "
                "compared with later chapters.")
    return (f"Through host memory, issued from Python, this machine's copies fit alpha = {hb.alpha_us.iloc[0]:.1f} us "
            f"and beta = {hb.beta_GBps.iloc[0]:.1f} GB/s ({FIT_MEASURED}), against alpha = "
            f"{recorded_fit.alpha_us:.1f} us and beta = {recorded_fit.beta_GBps:.1f} GB/s for the original VM's "
            f"GPU-to-GPU copies ({FIT_RECORDED}).")


def variant_figure_rows(v: Variants, most: int = 5) -> pd.DataFrame | None:
    """The rows section 3's variant figure draws: the default's launches and the variants that were fastest at a
    decode size, at most `most` series in all (the fastest first), so the legend stays short; None where no
    variant ran."""
    if v.rows is None or not len(v.rows) or v.best is None:
        return None
    defaults = [x for x in dict.fromkeys(v.rows.variant) if str(x).startswith("default")]
    winners = [x for x in v.best.best_variant.value_counts().index if x not in defaults]
    keep = (defaults + winners)[:max(most, len(defaults))]
    return v.rows[v.rows.variant.isin(keep)]
