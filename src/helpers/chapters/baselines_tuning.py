"""Chapter 03, baselines and tuning: its parameters, the recorded serving points, the seeds'
disagreements settled from data, and this run's live sweep beside them.

The sweep itself is helpers.serving.experiments.baseline_sweep (and gpu_profile for this machine's GPUs
under it); whether it runs here is helpers.serving.experiments.baseline_plan. Every figure the prose cites
is picked by `helpers.core.recorded.value`, which names the table, the condition and what the table holds
instead when a row is missing or a label was renamed; nothing here returns a blank. Phrases that depend on
whether a live run happened (`*_status`, `*_phrase`) are short and chosen here, so the chapter's sentences
stay in its Markdown. Per-stream tokens/s is derived the same way for every series: output throughput /
concurrency (the nominal number of requests in flight), so recorded and measured points compare like with
like.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from helpers.chapters import serving_load
from helpers.chapters._serving import (ENGINE, MODE, SGLANG, SWEEP, TINY, baseline_time, recorded_serving,
                                       server_choice, short_why)
from helpers.core import params, recorded
from helpers.core.recorded import value
from helpers.serving import live as serving_live
from helpers.serving.config import ServerChoice, StudyConfig, SweepConfig

#: the chapter's parameters (the notebook's validation cell and the runbook's precheck check them)
PARAMS = {**MODE, "server_url": params.string(), "served_model": params.string(),
          "served_engine": params.string(max_len=200), "served_hardware": params.string(max_len=200), **ENGINE, **SGLANG,
          **TINY, **SWEEP, "workloads": serving_live.workloads_param(),
          "variants": params.depends(serving_live.names_param("server variant"), ("engine", "mode", "server_url"),
                                     serving_live.names_rule("variants", serving_live.VARIANTS, server_url=True)),
          "variant_workloads": params.choice("first", "all"), **serving_load.PARAMS}
#: the least time the live sweep these values plan takes in its cell (the runbook refuses a plan over the limit)
def PLAN_TIME(v: dict) -> "params.Estimate | None":  # noqa: N802 - the runbook's name for it
    return serving_load.plan_time(v, baseline_time(v))


@dataclass(frozen=True)
class Config:
    """The chapter's validated parameters, typed once here: nothing below helpers.chapters reads `P`."""
    server: ServerChoice
    sweep: SweepConfig
    study: StudyConfig


def config(P: dict) -> Config:
    sw = SweepConfig(tuple(P["workloads"]), tuple(int(c) for c in P["concurrencies"]), tuple(P["variants"]),
                     P["variant_workloads"], int(P["requests_per_concurrency"]))
    return Config(server_choice(P), sw, serving_load.study_config(P))


#: the concurrency of the recorded saturated figures (the sweeps' top point)
SAT_C = 64


@dataclass(frozen=True)
class RecordedSweep:
    """The recorded sweep figures the prose cites (recorded, and derived from them)."""
    rec_achieved_conc: float    # the first baseline's achieved concurrency
    rec_single: float           # output tok/s, one stream (256/256)
    rec_sat_256: float          # output tok/s at 64 in flight (256/256)
    rec_log_conc: int           # running requests of the server log's decode-batch line
    rec_log_tok_s: float        # its generation throughput, tok/s
    rec_scaling_256: float      # rec_sat_256 / rec_single (derived)
    rec_per_stream_64: float    # rec_sat_256 / 64 (derived)
    rec_step_growth: float      # rec_single / rec_per_stream_64 (derived)
    rec_step_growth_achieved: float  # the same from the first baseline's own output and achieved concurrency (derived)
    rec_first_out: float        # the first baseline's output tok/s (64 requests in flight, 256/256; recorded)
    rec_sat_c: int              # the concurrency of the saturated figures (requests in flight)
    bm_single: float            # the bare-metal reference, one stream (reference)
    bm_sat: float               # the same at 64 in flight (reference)
    bm_step_growth: float       # bm_single / (bm_sat / 64) (derived)
    rec_step_1_ms: float        # the VM's one-stream step, 1000 / rec_single (derived)
    bm_step_1_ms: float         # bare metal's, 1000 / bm_single (derived)
    growth_rule_text: str       # what the step-growth rule says of the two machines (step_growth_rule)


#: a step that grows less than this fraction of the batch counts as "far below" the batch (GROWTH_RULE)
FAR_BELOW = 0.25
GROWTH_RULE = {
    "both": ("The step of a healthy bare-metal reference ({ref}) grew {bm:.1f}x over the same range (derived from "
             "its reference figures): by this measure the two machines look alike, so step growth alone cannot "
             "tell a fixed per-step cost from healthy decode. What differs is the step itself: {vm_ms:.0f} ms for "
             "one stream on the VM against {bm_ms:.1f} ms on bare metal (both derived as 1000 / one-stream tokens/s: the "
             "VM's from its recorded {vm_tok:.1f}, bare metal's from the reference {bm_tok:.1f})."),
    "vm": ("The step of a healthy bare-metal reference ({ref}) grew {bm:.1f}x over the same range (derived from its "
           "reference figures), close to the batch: the VM's far smaller growth points to a fixed per-step cost there."),
    "neither": ("Both steps grew close to the batch (the VM {vm:.1f}x, bare metal {bm:.1f}x, derived; {ref}): no "
                "sign of a fixed per-step cost in either."),
    "bm": ("Bare metal's step grew far less than the batch ({bm:.1f}x, derived; {ref}) and the VM's did not "
           "({vm:.1f}x): the rule flags the healthy machine, not the VM."),
}


def growth_flagged(growth: float, batch: int) -> bool:
    """The step-growth rule: a step that grew by less than FAR_BELOW of the batch is flagged as a fixed
    per-step cost."""
    return growth < FAR_BELOW * batch


def step_growth_rule(vm_growth: float, bm_growth: float, batch: int, vm_ms: float, bm_ms: float,
                     ref: str = "the bare-metal reference") -> str:
    """The rule applied to the VM and to the bare-metal reference alike (`ref`: which reference, in words),
    and what it then says: where it flags both, it cannot tell them apart and the page says so."""
    key = {(True, True): "both", (True, False): "vm", (False, False): "neither", (False, True): "bm"}[
        (growth_flagged(vm_growth, batch), growth_flagged(bm_growth, batch))]
    return GROWTH_RULE[key].format(vm=vm_growth, bm=bm_growth, vm_ms=vm_ms, bm_ms=bm_ms, ref=ref,
                                   vm_tok=1e3 / vm_ms, bm_tok=1e3 / bm_ms)


def bare_metal_reference() -> tuple[float, float]:
    """(one stream, 64 in flight) output tokens/s of the bare-metal reference (data/reference/baremetal.csv,
    the cutlass MoE run the diagnosis also uses)."""
    ref = _bare_metal_rows()
    pick = lambda c: float(ref.loc[ref["concurrency"] == c, "value"].iloc[0])  # noqa: E731
    return pick(1), pick(SAT_C)


def _bare_metal_rows() -> pd.DataFrame:
    ref = recorded.load("reference/baremetal.csv")
    return ref[(ref["metric"] == "output_throughput") & ref["system"].str.contains("cutlass")]


def bare_metal_name() -> str:
    """The bare-metal reference in words: its system as data/reference/baremetal.csv names it (the MoE runner's
    parenthesis left off) and whose figure it is (its note's first words)."""
    r = _bare_metal_rows().iloc[0]
    system = str(r["system"]).split(" (")[0]
    note = str(r["note"]).split(" (")[0] if pd.notna(r["note"]) else "reference"
    return f"{system}, a {note}"


@dataclass(frozen=True)
class Totals:
    """The two recorded totals at 64 in flight and the noise to judge them by (recorded, derived)."""
    tot_lo: float
    tot_hi: float
    tot_gap_pct: float
    ratio_spread_pct: float
    ratio_mean: float
    noise_pct: float


@dataclass(frozen=True)
class Saturation:
    """The summary's "roughly" figure, the workload it matches, the stated range and the decode-heavy
    sweep's figure at 64 (recorded, derived)."""
    sat_approx: float
    sat_match_wl: str
    sat_match_gap_pct: float
    sat_rng_lo: float
    sat_rng_hi: float
    sat_rng_lo_wl: str      # the workload whose exact figure the range's low end matches (derived: nearest_workload)
    sat_rng_hi_wl: str      # the same for its high end: the range spans two workloads, not one
    sat_512: float


@dataclass(frozen=True)
class RecordedProfile:
    """The original VM's GPUs under load (recorded)."""
    rec_util: float
    rec_pow: float
    rec_mem_lo: float           # memory busy, % of the time (the recorded range's ends)
    rec_mem_hi: float


@dataclass(frozen=True)
class LiveSweep:
    """This run's live sweep: where, how many points, failed requests, benchmarking time (measured)."""
    live_where: str
    live_points: int
    live_failed: int
    live_duration_s: float


@dataclass(frozen=True)
class LiveHeadline:
    """The first measured row of the headline table (measured, and derived from it)."""
    live_single: float
    live_sat: float
    live_sat_c: int
    live_scaling: float
    live_variant: str


def recorded_points(df: pd.DataFrame | None = None) -> pd.DataFrame:
    """The recorded output/total throughput points with a workload label (one row per source)."""
    df = recorded_serving() if df is None else df
    m = df.metric.isin(["output_throughput", "total_throughput"]) & df.concurrency.notna() & (df.experiment != "target")
    out = df[m].copy()
    out["workload"] = [f"{int(a)}/{int(b)}" if pd.notna(a) and pd.notna(b) else "unstated"
                       for a, b in zip(out.input_len, out.output_len)]
    out["kind"] = "recorded"
    return out[["experiment", "moe_runner", "workload", "concurrency", "metric", "value", "value_low", "value_high",
                "approx", "source", "note", "kind"]].reset_index(drop=True)


def recorded_table(df: pd.DataFrame) -> pd.DataFrame:
    """Every recorded serving figure but the user's targets, for the folded table: seven columns, a stated
    range written low-high in the value column."""
    d = df[df.experiment != "target"]
    wl = [f"{int(a)}/{int(b)}" if pd.notna(a) and pd.notna(b) else "" for a, b in zip(d.input_len, d.output_len)]
    val = [f"{v:g}" if pd.notna(v) else f"{lo:g}-{hi:g}" if pd.notna(lo) else ""
           for v, lo, hi in zip(d.value, d.value_low, d.value_high)]
    return pd.DataFrame({"experiment": d.experiment.values, "workload (in/out tokens)": wl,
                         "concurrency": d.concurrency.values, "metric": d.metric.values, "value": val,
                         "unit": d.unit.fillna("").str.replace("tok/s", "tokens/s").values,
                         "source": d.source.values})


#: the headline table's columns as a reader reads them
HEADLINE_NAMES = {"who": "whose", "single_stream_tok_s": "one stream (tokens/s)",
                  "max_concurrency": "peak at (requests)", "saturated_tok_s": "peak (tokens/s)",
                  "scaling (derived)": "scaling (×, derived)"}


def headline_view(head: pd.DataFrame) -> pd.DataFrame:
    """The headline table with human headers (seven columns)."""
    return head.rename(columns=HEADLINE_NAMES)


def sweep_view(live: pd.DataFrame) -> pd.DataFrame:
    """This run's sweep in seven columns (the whole table is the run's sweep.csv)."""
    return live[["variant", "workload", "concurrency", "output_throughput", "median_ttft_ms", "median_tpot_ms",
                 "failed"]].rename(columns={"output_throughput": "output (tokens/s)", "median_ttft_ms": "median TTFT_ms",
                                            "median_tpot_ms": "median TPOT_ms", "failed": "failed requests"})


def profile_table(gpu_profile: pd.DataFrame) -> pd.DataFrame:
    """The original VM's GPU profile (recorded) in five columns, a range written low-high."""
    val = [f"{v:g}" if isinstance(v, float) and pd.notna(v) else str(v) if pd.notna(v) else f"{lo:g}-{hi:g}"
           for v, lo, hi in zip(gpu_profile.value, gpu_profile.value_low, gpu_profile.value_high)]
    return pd.DataFrame({"metric": gpu_profile.metric.values, "value": val, "unit": gpu_profile.unit.fillna("").values,
                         "note": gpu_profile.note.fillna("").values, "source": gpu_profile.source.values})


def profile_view(prof: pd.DataFrame) -> pd.DataFrame:
    """This machine's GPU medians per point (measured) in seven columns."""
    cols = [c for c in ("variant", "workload", "concurrency", "util_gpu_pct", "util_mem_pct", "power_pct_of_limit",
                        "n_samples") if c in prof.columns]
    return prof[cols].rename(columns={"util_gpu_pct": "GPU busy_pct", "util_mem_pct": "memory busy_pct",
                                      "power_pct_of_limit": "power of limit_pct", "n_samples": "samples"})


def server_log_point(df: pd.DataFrame | None = None) -> dict:
    """The one decode-batch line of the server log (running requests, generation throughput)."""
    df = recorded_serving() if df is None else df
    where = {"experiment": "server_log_decode_batch", "metric": "generation_throughput"}
    return {"concurrency": int(value(df, "concurrency", **where)), "value": float(value(df, **where)),
            "source": str(value(df, "source", **where))}


def sweep_facts(df: pd.DataFrame) -> RecordedSweep:
    """The recorded sweep figures the prose cites: single stream, 64 in flight, the first baseline's
    achieved concurrency, the server-log batch, and the scaling derived from them."""
    out = lambda c: float(value(df, experiment="sweep_256_256", metric="output_throughput", concurrency=c))  # noqa: E731
    single, sat = out(1), out(SAT_C)
    log = server_log_point(df)
    bm1, bm64 = bare_metal_reference()
    growth, bm_growth = single / (sat / SAT_C), bm1 / (bm64 / SAT_C)
    achieved = float(value(df, experiment="first_baseline", metric="achieved_concurrency"))
    # the achieved concurrency belongs to the first baseline's run, so its step growth takes that run's own output
    first_out = float(value(df, experiment="first_baseline", metric="output_throughput", concurrency=SAT_C))
    return RecordedSweep(
        rec_achieved_conc=achieved, rec_first_out=first_out,
        rec_single=single, rec_sat_256=sat, rec_log_conc=log["concurrency"], rec_log_tok_s=log["value"],
        rec_scaling_256=sat / single, rec_per_stream_64=sat / SAT_C, rec_step_growth=growth,
        rec_step_growth_achieved=single / (first_out / achieved),
        rec_sat_c=SAT_C, bm_single=bm1, bm_sat=bm64, bm_step_growth=bm_growth, rec_step_1_ms=1e3 / single,
        bm_step_1_ms=1e3 / bm1, growth_rule_text=step_growth_rule(growth, bm_growth, SAT_C, 1e3 / single, 1e3 / bm1,
                                                                  bare_metal_name()))


def total_disagreement(df: pd.DataFrame | None = None) -> pd.DataFrame:
    """The two recorded totals at concurrency 64 (256/256), each with the output figure of the same run,
    and the derived total/output ratio that tells whether they are one run mis-quoted or two runs."""
    df = recorded_serving() if df is None else df
    rows = []
    for exp in ("first_baseline", "sweep_256_256"):
        sub = df[(df.experiment == exp) & (df.concurrency == 64)]
        if sub.empty:
            raise recorded.DataError(f"data/recorded/serving.csv has no rows of experiment '{exp}' at concurrency "
                                     "64, which the total-throughput disagreement compares")
        for src in sorted(set(sub.source)):
            s = sub[sub.source == src]
            tot = s[s.metric == "total_throughput"].value
            out = s[s.metric == "output_throughput"].value
            if len(tot) and len(out):
                rows.append({"experiment": exp, "source": src, "total_tok_s (recorded)": float(tot.iloc[0]),
                             "output_tok_s (recorded)": float(out.iloc[0]),
                             "total/output (derived)": float(tot.iloc[0] / out.iloc[0]),
                             "approx": bool(s.approx.any())})
    return pd.DataFrame(rows)


def total_facts(tot: pd.DataFrame, df: pd.DataFrame) -> Totals:
    """How far apart the two totals are, how well each agrees with its own output figure, and the
    run-to-run spread the investigation recorded for one MoE runner (the noise to judge them by)."""
    lo, hi = tot["total_tok_s (recorded)"].min(), tot["total_tok_s (recorded)"].max()
    ratio = tot["total/output (derived)"]
    where = {"experiment": "moe_runner_cutlass", "metric": "output_throughput", "concurrency": 64}
    n_lo, n_hi = float(value(df, "value_low", **where)), float(value(df, "value_high", **where))
    return Totals(tot_lo=float(lo), tot_hi=float(hi), tot_gap_pct=float(100 * (hi - lo) / lo),
                  ratio_spread_pct=float(100 * (ratio.max() / ratio.min() - 1)), ratio_mean=float(ratio.mean()),
                  noise_pct=100 * (n_hi - n_lo) / n_lo)


def saturation_claims(df: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every recorded statement of saturated output throughput (concurrency 64), with its workload."""
    df = recorded_serving() if df is None else df
    m = (df.metric == "output_throughput") & (df.concurrency == 64) & ~df.experiment.str.startswith("moe_runner")
    out = df[m].copy()
    out["workload"] = [f"{int(a)}/{int(b)}" if pd.notna(a) and pd.notna(b) else "not stated"
                       for a, b in zip(out.input_len, out.output_len)]
    out["figure"] = [f"{v:g}" if pd.notna(v) else f"{lo:g}-{hi:g}"
                     for v, lo, hi in zip(out.value, out.value_low, out.value_high)]
    out = out[["experiment", "workload", "figure", "value", "value_low", "value_high", "approx", "source", "note"]
              ].drop_duplicates(["experiment", "figure", "source"]).reset_index(drop=True)
    # a range with no stated workload names what each end is, so "210-247" is not read as one workload's spread
    # (issue 47): each end's nearest exact figure with a stated workload
    ranged = out.value.isna() & out.value_low.notna() & out.value_high.notna() & (out.workload == "not stated")
    out.loc[ranged, "figure"] = [range_ends_words(lo, hi, out) for lo, hi in
                                 zip(out.loc[ranged, "value_low"], out.loc[ranged, "value_high"])]
    return out


def range_ends_words(lo: float, hi: float, claims: pd.DataFrame) -> str:
    """A range of saturated figures with each end named by the workload whose exact figure it matches:
    "LO-HI (low end: the W1 sweep's X1; high end: the W2 sweep's X2)", each X the exact figure nearest its end."""
    ends = []
    for name, x in (("low", lo), ("high", hi)):
        wl, _ = nearest_workload(float(x), claims)
        exact = claims[claims.value.notna() & (claims.workload == wl)].value.astype(float)
        ends.append(f"{name} end: the {wl} sweep's {exact.iloc[(exact - x).abs().argmin()]:g}")
    return f"{lo:g}-{hi:g} ({'; '.join(ends)})"


def nearest_workload(figure: float, claims: pd.DataFrame) -> tuple[str, float]:
    """The workload whose exact recorded figure is closest to `figure`, and the relative gap."""
    exact = claims[claims.value.notna() & (claims.workload != "not stated")]
    if exact.empty:
        raise recorded.DataError("no saturation claim with a stated workload and an exact figure to compare with")
    gaps = (exact.value.astype(float) - figure).abs() / exact.value.astype(float)
    i = gaps.idxmin()
    return str(exact.workload[i]), float(gaps[i])


def saturation_facts(df: pd.DataFrame, claims: pd.DataFrame) -> Saturation:
    """The summary's "roughly" figure and the workload it matches, the stated range, and the decode-heavy
    sweep's figure at 64."""
    at64 = {"metric": "output_throughput", "concurrency": 64}
    approx = float(value(df, experiment="summary_311", **at64))
    wl, gap = nearest_workload(approx, claims)
    lo = float(value(df, "value_low", experiment="mem_fraction_cuda_graphs", **at64))
    hi = float(value(df, "value_high", experiment="mem_fraction_cuda_graphs", **at64))
    return Saturation(sat_approx=approx, sat_match_wl=wl, sat_match_gap_pct=100 * gap, sat_rng_lo=lo, sat_rng_hi=hi,
                      sat_rng_lo_wl=workload_words(nearest_workload(lo, claims)[0]),
                      sat_rng_hi_wl=workload_words(nearest_workload(hi, claims)[0]),
                      sat_512=float(value(df, experiment="sweep_128_512", **at64)))


def workload_words(workload: str) -> str:
    """"256/256" as the page says it: "256 in / 256 out"."""
    a, b = workload.split("/")
    return f"{a} in / {b} out"


def profile_facts(gpu_profile: pd.DataFrame) -> RecordedProfile:
    """The original VM's GPUs under load (recorded): busy fraction, power against TDP and memory busy."""
    mem = {"metric": "memory_bandwidth_utilization"}
    return RecordedProfile(rec_util=float(value(gpu_profile, metric="gpu_utilization")),
                           rec_pow=float(value(gpu_profile, metric="power_fraction_of_tdp")),
                           rec_mem_lo=float(value(gpu_profile, "value_low", **mem)),
                           rec_mem_hi=float(value(gpu_profile, "value_high", **mem)))


def profile_phrase(prof: pd.DataFrame | None, why_none: str) -> str:
    """This machine's GPU profile at the highest concurrency swept, or why none was sampled."""
    top = None if prof is None else prof.dropna(subset=["util_gpu_pct"]).sort_values("concurrency")
    if top is None or top.empty:
        return f"none was sampled ({why_none})"
    t = top.iloc[-1]
    return (f"at concurrency {int(t.concurrency)} this machine's GPU was busy {t.util_gpu_pct:.0f} % of the time, "
            f"its memory {t.util_mem_pct:.0f} %, at {t.power_pct_of_limit:.0f} % of its power limit (measured, "
            f"median over {int(t.n_samples)} samples)")


def sweep_status(live: pd.DataFrame | None, where: str, why: str) -> str:
    """This run's live sweep in a phrase: how many points where, or why none ran."""
    if live is None:
        return f"no live sweep: {short_why(why)}"
    return (f"{len(live)} points were swept live on {where}, with {int(live.failed.sum())} failed requests "
            f"in {live.duration_s.sum():.0f} s of benchmarking")


def sweep_live_facts(live: pd.DataFrame | None, where: str) -> LiveSweep | None:
    """The live sweep's size, failures and benchmarking time (None without one)."""
    if live is None:
        return None
    return LiveSweep(live_where=where, live_points=int(len(live)), live_failed=int(live.failed.sum()),
                     live_duration_s=float(live.duration_s.sum()))


def per_stream(df: pd.DataFrame, value_col: str = "output_throughput") -> pd.Series:
    return df[value_col].astype(float) / df["concurrency"].astype(float)


def headline_table(rec: pd.DataFrame, live: pd.DataFrame | None, where: str) -> pd.DataFrame:
    """Single-stream and saturated output throughput: recorded (original VM) and measured (this machine)."""
    rows = []
    outp = rec[(rec.metric == "output_throughput") & rec.value.notna() & rec.experiment.str.startswith("sweep_")]
    for wl in ("256/256", "128/512"):
        s = outp[outp.workload == wl]
        c1, c64 = s[s.concurrency == 1].value, s[s.concurrency == 64].value
        if len(c1) and len(c64):
            rows.append({"who": "recorded: original VM (sglang TP8, 8 GPUs)", "variant": "best configuration",
                         "workload": wl, "single_stream_tok_s": float(c1.iloc[0]), "max_concurrency": 64,
                         "saturated_tok_s": float(c64.iloc[0]),
                         "scaling (derived)": float(c64.iloc[0] / c1.iloc[0])})
    if live is not None and len(live):
        for (var, wl), g in live.groupby(["variant", "workload"], sort=False):
            g = g.sort_values("concurrency")
            one = g[g.concurrency == 1].output_throughput
            top = g.iloc[g.output_throughput.astype(float).argmax()]
            rows.append({"who": f"measured: {where}", "variant": var, "workload": wl,
                         "single_stream_tok_s": float(one.iloc[0]) if len(one) else np.nan,
                         "max_concurrency": int(top.concurrency), "saturated_tok_s": float(top.output_throughput),
                         "scaling (derived)": float(top.output_throughput / one.iloc[0]) if len(one) else np.nan})
    return pd.DataFrame(rows)


def live_headline(head: pd.DataFrame) -> LiveHeadline | None:
    """The first measured row of the headline table (None without a live sweep)."""
    m = head[head.who.str.startswith("measured")]
    if m.empty:
        return None
    r = m.iloc[0]
    return LiveHeadline(live_single=float(r.single_stream_tok_s), live_sat=float(r.saturated_tok_s),
                        live_sat_c=int(r.max_concurrency), live_scaling=float(r["scaling (derived)"]),
                        live_variant=str(r.variant))


def scaling_phrase(head: pd.DataFrame, why_none: str) -> str:
    """How this run's first live variant scaled from one stream to its best point, or why there is none."""
    f = live_headline(head)
    if f is None:
        return "no live sweep"
    return (f"variant {f.live_variant} scaled {f.live_scaling:.1f}x from one stream to its best point, "
            f"at concurrency {f.live_sat_c} (in output throughput, each point's output tokens over its duration, "
            f"measured; the ratio derived from the table above)")


#: a point whose mean end-to-end latency exceeds its median by this factor has a slow request pulling its
#: throughput (total tokens / duration) below what its typical request gives
SLOW_MEAN_OVER_MEDIAN = 1.5


def slow_phrase(live: pd.DataFrame | None) -> str:
    """The points where a slow request pulls throughput down (mean E2E over SLOW_MEAN_OVER_MEDIAN times the
    median), each with the throughput its median request would give (derived: concurrency x output tokens per
    request / median E2E), or "" where none is."""
    cols = {"mean_e2e_latency_ms", "median_e2e_latency_ms", "total_output_tokens", "completed"}
    if live is None or not cols <= set(live.columns):
        return ""
    done = live[live.completed.astype(float) > 0]
    d = done[done.mean_e2e_latency_ms.astype(float) > SLOW_MEAN_OVER_MEDIAN * done.median_e2e_latency_ms.astype(float)]
    several = {"variant", "workload"} <= set(live.columns) and len(live[["variant", "workload"]].drop_duplicates()) > 1
    parts = []
    for r in d.itertuples():
        at_median = median_throughput(r)
        who = f" ({r.variant}, {r.workload})" if several else ""
        said = (f"at concurrency {int(r.concurrency)}{who} a slow request pulls throughput down (mean E2E "
                f"{r.mean_e2e_latency_ms:.0f} ms, median {r.median_e2e_latency_ms:.0f} ms, measured; at the "
                f"median it would be {at_median:.0f} tokens/s, derived: concurrency x output tokens per request over "
                f"the median E2E")
        top = _best_of_its_series(done, r)
        if int(r.concurrency) == 1 and top is not None and int(top.concurrency) != 1:
            # the scaling the run line states is in output throughput; by this statistic it is another figure,
            # and the page gives both, each named (issue 47)
            said += (f"; by that median statistic at both ends the scaling to concurrency {int(top.concurrency)} is "
                     f"{median_throughput(top) / at_median:.1f}x")
        parts.append(said + ")")
    return "; ".join(parts)


def median_throughput(r) -> float:
    """Output tokens/s a point's median request gives (derived): concurrency x output tokens per request over the
    median end-to-end latency. `r`: a row of the live sweep (a namedtuple or a Series)."""
    per_request = float(r.total_output_tokens) / float(r.completed)
    return float(r.concurrency) * per_request / (float(r.median_e2e_latency_ms) / 1e3)


def _best_of_its_series(done: pd.DataFrame, r):
    """The point of r's variant and workload with the highest output throughput (the run line's "best point"), or
    None where the sweep has no throughput column."""
    if "output_throughput" not in done.columns:
        return None
    g = done
    for col in ("variant", "workload"):
        if col in done.columns:
            g = g[g[col] == getattr(r, col)]
    return None if g.empty else g.loc[g.output_throughput.astype(float).idxmax()]


def run_line(live: pd.DataFrame | None, status: str, scaling: str, profile: str) -> str:
    """This run's sweep in one line: why there was none, or its size, its scaling, the points a slow request
    pulled down (slow_phrase) and its GPU profile."""
    if live is None:
        return status
    slow = slow_phrase(live)
    return f"{status}; {scaling}{'; ' + slow if slow else ''}; GPU profile: {profile}"


#: the two disagreement tables' columns as a reader reads them
DISAGREEMENT_NAMES = {"total_tok_s (recorded)": "total (tokens/s, recorded)",
                      "output_tok_s (recorded)": "output (tokens/s, recorded)",
                      "total/output (derived)": "total / output (derived)", "approx": "about"}


def disagreement_view(df: pd.DataFrame) -> pd.DataFrame:
    """A disagreement table with human headers and 'about' as yes/no."""
    out = df.rename(columns=DISAGREEMENT_NAMES)
    if "about" in out:
        out["about"] = ["yes" if str(a).lower() in ("true", "1") else "no" for a in out["about"]]
    return out


@dataclass(frozen=True)
class LoadFacts:
    """The load study's figures and phrases section 4 cites (measured, or derived from its points;
    helpers.chapters.serving_load chooses each; 'n/a' where the study did not run)."""
    ld_what: str            # what the study measured: engine, model, hardware and how each is known
    ld_can: str             # what that can and cannot show
    ld_slo: str             # the SLOs the study judged at, as given (`slo`; assumed)
    ld_share: str           # the share of requests that must meet them (`slo_share`), in %
    ld_rule: str            # requests per point and the rule behind the count
    ld_counts: str          # points, requests measured, ramp requests excluded
    ld_cap_c: str           # capacity over concurrency with its 90 % interval (measured; interval derived)
    ld_cap_r: str           # capacity over request rate with its interval
    ld_drift: str           # the drift check's verdict (the first point measured again at the end)
    ld_ovh_1: str           # the client's overhead per request at concurrency 1 (measured on the stand-in)
    ld_ovh_16: str          # the same at 16
    ld_warm: str            # the warm-up wave before the study's first point (not counted)
    ld_trace: str           # the trace replay, or why none


def load_facts(study) -> LoadFacts:
    return LoadFacts(**serving_load.facts(study))
