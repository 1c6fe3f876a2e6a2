"""Chapter 04, MoE runners: its parameters, the recorded runner figures, and this run's comparison: the
spread across repeats and which runner pairs differ beyond it.

The comparison itself is helpers.serving.experiments.runner_comparison; whether it runs here is
helpers.serving.experiments.runner_plan. Every figure the prose cites is picked by
`helpers.core.recorded.value`, which names the table, the condition and what the table holds instead when
a row is missing or a label was renamed.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from helpers.chapters import _serving
from helpers.chapters._serving import ENGINE, MODE, SGLANG, SWEEP, TINY, server_choice, short_why
from helpers.core import params, recorded
from helpers.core.recorded import value
from helpers.serving import live
from helpers.serving.config import RunnerConfig, ServerChoice

#: the chapter's parameters (the notebook's validation cell and the runbook's precheck check them)
PARAMS = {**MODE, **ENGINE, **SGLANG, **TINY, **SWEEP,
          "runners": params.depends(live.names_param("MoE runner"), ("engine", "mode"),
                                    live.names_rule("runners", live.RUNNERS)),
          "repeats": params.number(1, 20, integer=True), "workload": live.workload_param()}
#: the least time the live comparison these values plan takes in its cell (the runbook refuses a plan over the limit)
PLAN_TIME = _serving.runner_time


def config(P: dict) -> tuple[ServerChoice, RunnerConfig]:
    """The chapter's validated parameters, typed once (the server it launches; the comparison it runs)."""
    return server_choice(P), RunnerConfig(tuple(P["runners"]), int(P["repeats"]), P["workload"],
                                          tuple(int(c) for c in P["concurrencies"]),
                                          int(P["requests_per_concurrency"]))


#: the recorded serving figures (data/recorded/serving.csv), shared with chapter 03
recorded_serving = _serving.recorded_serving

#: the columns of the runner-pair verdicts (distinguishable), present even where there is no pair
VERDICT_COLUMNS = ["workload", "concurrency", "a", "b", "diff_pct (derived)", "ranges_overlap", "verdict"]


@dataclass(frozen=True)
class RecordedRunners:
    """The two runners recorded at 64 in flight (recorded, and derived from them)."""
    rec_cutlass_lo: float       # flashinfer_cutlass's stated range, output tok/s
    rec_cutlass_hi: float
    rec_cutedsl: float          # flashinfer_cutedsl's figure, output tok/s
    rec_inside: str             # "inside" or "outside" that range
    rec_spread_pct: float       # the range's width over its low end, % (derived)
    rec_c: int                  # the concurrency the runners were recorded at (requests in flight)


@dataclass(frozen=True)
class LiveRunners:
    """This run's comparison: the noise across repeats and the runner pairs beyond it (measured, derived)."""
    live_max_noise_pct: float
    live_n_real: int
    live_n_pairs: int


def recorded_runners(df: pd.DataFrame) -> pd.DataFrame:
    """The recorded MoE-runner figures."""
    rr = df[df.experiment.str.startswith("moe_runner")]
    if rr.empty:
        raise recorded.DataError("data/recorded/serving.csv has no experiment starting with 'moe_runner'")
    return rr


def runner_facts(df: pd.DataFrame) -> RecordedRunners:
    """The two runners recorded at 64 in flight: flashinfer_cutlass's stated range, flashinfer_cutedsl's
    figure, and whether the figure lies inside the range."""
    at64 = {"metric": "output_throughput", "concurrency": 64}
    lo = float(value(df, "value_low", experiment="moe_runner_cutlass", **at64))  # noqa: E501
    hi = float(value(df, "value_high", experiment="moe_runner_cutlass", **at64))
    dsl = float(value(df, experiment="moe_runner_cutedsl", **at64))
    return RecordedRunners(rec_cutlass_lo=lo, rec_cutlass_hi=hi, rec_cutedsl=dsl,
                           rec_inside="inside" if lo <= dsl <= hi else "outside",
                           rec_spread_pct=100 * (hi - lo) / lo, rec_c=at64["concurrency"])


def repeat_spread(df: pd.DataFrame, by: str = "runner") -> pd.DataFrame:
    """Mean, min, max and relative range of output throughput across repeats per (runner, concurrency)."""
    g = df.groupby([by, "workload", "concurrency"]).output_throughput
    out = g.agg(["mean", "min", "max", "count"]).reset_index()
    out["range_pct"] = 100 * (out["max"] - out["min"]) / out["mean"]
    return out


def distinguishable(spread: pd.DataFrame, by: str = "runner") -> pd.DataFrame:
    """For each concurrency, each pair of runners: the difference of means, and whether their
    repeat ranges overlap (overlap: the difference is within run-to-run noise)."""
    rows = []
    for (wl, c), g in spread.groupby(["workload", "concurrency"]):
        g = g.reset_index(drop=True)
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                a, b = g.iloc[i], g.iloc[j]
                overlap = not (a["max"] < b["min"] or b["max"] < a["min"])
                rows.append({"workload": wl, "concurrency": c, "a": a[by], "b": b[by],
                             "diff_pct (derived)": 100 * (a["mean"] - b["mean"]) / b["mean"],
                             "ranges_overlap": overlap,
                             "verdict": "within noise" if overlap else "a real difference"})
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def runner_live_facts(spread: pd.DataFrame | None, verdicts: pd.DataFrame | None) -> LiveRunners | None:
    """The live comparison's noise and how many runner pairs differ beyond it (None without one)."""
    if spread is None or verdicts is None:
        return None
    return LiveRunners(live_max_noise_pct=float(spread.range_pct.max()),
                       live_n_real=int((~verdicts.ranges_overlap).sum()), live_n_pairs=int(len(verdicts)))


def runner_phrase(spread: pd.DataFrame | None, verdicts: pd.DataFrame | None, repeats: int, why_none: str,
                  status: pd.DataFrame | None = None) -> str:
    """The live comparison in a phrase: the noise across repeats and the pairs beyond it, or why none ran
    (`status`: the runners' launch outcomes, where the comparison ran but no runner served)."""
    f = runner_live_facts(spread, verdicts)
    if f is None and status is not None:
        return f"no runner served, so none was swept ({', '.join(f'{r.runner}: {r.outcome}' for r in status.itertuples())})"
    if f is None:
        return f"no live comparison: {short_why(why_none)}"
    return (f"across {repeats} repeats one runner's output throughput varied by up to {f.live_max_noise_pct:.1f} % "
            f"(max-min over mean), and {f.live_n_real} of {f.live_n_pairs} runner pairs differ by more than "
            "their repeat ranges (measured)")


def recorded_view(rr: pd.DataFrame) -> pd.DataFrame:
    """The recorded runner figures in six columns: a stated range written low-high, with its unit."""
    val = [f"{v:g}" if pd.notna(v) else f"{lo:g}-{hi:g}" for v, lo, hi in zip(rr.value, rr.value_low, rr.value_high)]
    unit = rr.unit.fillna("").str.replace("tok/s", "tokens/s")
    return pd.DataFrame({"MoE runner": rr.moe_runner.values, "concurrency": rr.concurrency.values,
                         "metric": rr.metric.str.replace("_", " ").values,
                         "figure": [f"{v} {u}".strip() for v, u in zip(val, unit)],
                         "about": ["yes" if str(a).lower() in ("true", "1") else "no" for a in rr.approx],
                         "source": rr.source.values})


def verdict_view(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The runner-pair verdicts with human headers (seven columns, overlap as yes/no)."""
    out = verdicts.rename(columns={"a": "runner a", "b": "runner b", "diff_pct (derived)": "a over b_pct",
                                   "ranges_overlap": "ranges overlap"})
    out["ranges overlap"] = ["yes" if o else "no" for o in out["ranges overlap"]]
    return out


def spread_view(spread: pd.DataFrame) -> pd.DataFrame:
    """Each runner's mean, min, max and range across repeats with human headers (seven columns)."""
    return spread.rename(columns={"mean": "mean (tokens/s)", "min": "min (tokens/s)", "max": "max (tokens/s)",
                                  "count": "repeats", "range_pct": "range_pct"})[
        ["runner", "concurrency", "mean (tokens/s)", "min (tokens/s)", "max (tokens/s)", "range_pct", "repeats"]]
