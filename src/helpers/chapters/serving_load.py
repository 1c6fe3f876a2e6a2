"""Chapter 03's load study on the page (issue 38): its parameters, their rules, the time it adds to the plan,
and the tables and phrases of the rate sweep, goodput, capacity at the SLOs and the client's overhead.

The study itself is helpers.serving.loadstudy.load_study. It runs where `load_modes` is "on" (the cpu-demo and
GPU targets) and the chapter's sweep runs live; the default `auto` target leaves it "off" and the section says
so. Every phrase here is short and chosen from the study's numbers; the sentences stay in the notebook.
"""
from __future__ import annotations

import math

import pandas as pd

from helpers.core import params, recorded
from helpers.serving.loadspec import SLO, LoadSpecError


def _slo_rule(slo, load_modes):
    try:
        parsed = SLO.parse(slo)
    except LoadSpecError as e:
        return f"{e} (the `slo` parameter)"
    if load_modes == "on" and parsed.empty:
        return ("the load study's capacity search needs an SLO: set slo to e.g. 'ttft:2000 tpot:200' "
                "(milliseconds; tps:N for an output-speed floor in tokens/s per user), or load_modes='off'")
    return None


def _burstiness_rule(b):
    return None if b > 0 else ("burstiness 0 has no gamma distribution: give a positive shape (1 = Poisson "
                               "arrivals, 0.5 burstier, 2 steadier)")


PARAMS = {"load_modes": params.choice("off", "on"),
          "slo": params.depends(params.string(max_len=200), "load_modes", _slo_rule),
          "slo_share": params.number(0.01, 1.0),
          "burstiness": params.depends(params.number(0, 100), (), lambda b: _burstiness_rule(b)),
          "rate_points": params.number(2, 16, integer=True),
          "load_requests": params.number(2, 256, integer=True),
          "load_time_s": params.number(10, 3600)}


def plan_time(v: dict, base: "params.Estimate | None") -> "params.Estimate | None":
    """The chapter's sweep estimate plus the load study's bound (`load_time_s`) where the study runs."""
    if base is None or v.get("load_modes") != "on":
        return base
    return params.Estimate(base.seconds + float(v["load_time_s"]), base.names + ("load_time_s",),
                           base.how + f"; plus the load study's bound, load_time_s = {v['load_time_s']:g} s",
                           base.fix + ", or a smaller load_time_s")


def status(study: dict | None, live: bool) -> str:
    """Why the load study did or did not run here (one phrase)."""
    if study is None:
        return ("not run here: load_modes is 'off' (the default target keeps its time; the cpu-demo and h200 "
                "targets run it)") if live else ("not run here: the chapter's sweep does not run live on this machine (the load study runs "
                     "with it: the cpu-demo and h200 targets)")
    if study.get("failed"):
        return f"run, and ended early: {study['failed'][:200]}"
    return f"measured on this machine in {study['study_s']:.0f} s"


#: how the rate table names the sweep's points: the closed-loop end at the top concurrency is a probe at that
#: concurrency, not a maximum (throughput may still grow past it)
ROLES = {"one-at-a-time": "one at a time (closed loop)", "max-throughput": "top concurrency (closed loop)",
         "open": "open loop"}


def rate_view(study: dict) -> pd.DataFrame:
    rows = []
    for r in study.get("rate_sweep", []):
        nominal = r.get("request_rate", r.get("request_throughput"))
        rows.append({"point": ROLES.get(r.get("sweep_role", ""), r.get("sweep_role", "")),
                     "concurrency cap": r.get("concurrency", r.get("max_concurrency")),
                     "requests": r.get("num_requests"), "nominal rate (requests/s)": nominal,
                     "sent rate (requests/s)": r.get("achieved_rate", r.get("request_throughput")),
                     "completed rate (requests/s)": r.get("request_throughput"),
                     "short of nominal (>10 %)": _short(r), "median TTFT (ms)": r.get("median_ttft_ms"),
                     "median TPOT (ms)": r.get("median_tpot_ms"), "inside SLOs (%)": _pct(r.get("good_share")),
                     "goodput (good tokens/s)": r.get("good_tokens_per_s"),
                     "failed": r.get("failed_point") or r.get("skipped") or ""})
    return pd.DataFrame(rows)


def _short(r: dict) -> str:
    if r.get("sweep_role") != "open" or "rate_short" not in r:
        return "n/a (closed loop)" if r.get("sweep_role") != "open" else ""
    return "yes" if r["rate_short"] else "no"


def _pct(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else 100.0 * x


def capacity_view(study: dict, which: str) -> pd.DataFrame:
    unit = "concurrency (requests in flight)" if which == "capacity_concurrency" else "request rate (requests/s)"
    pts = study.get(which, {}).get("points", [])
    return pd.DataFrame([{unit: p["load"], "inside SLOs (%)": _pct(p.get("good_share")),
                          "held": "yes" if p.get("passed") else "no",
                          "measured by": "the rate sweep" if p.get("from_known") else "the search",
                          "median TTFT (ms)": p.get("median_ttft_ms"), "median TPOT (ms)": p.get("median_tpot_ms"),
                          "error": (p.get("error") or "")[:80]} for p in pts])


def overhead_view(study: dict) -> pd.DataFrame:
    return pd.DataFrame([{"concurrency": r["concurrency"], "scheduled E2E (ms)": r["scheduled_e2e_ms"],
                          "measured median E2E (ms)": r["median_e2e_ms"],
                          "overhead per request (ms)": r["overhead_per_request_ms"],
                          "overhead per token (ms)": r["overhead_per_token_ms"]} for r in study["client_overhead"]])


def names_table() -> pd.DataFrame:
    """The mapping of the book's metric names to vllm bench serve, sglang bench_serving, GuideLLM and AIPerf."""
    df = recorded.load("reference/serving_metric_names.csv")
    return df.rename(columns={"book_name": "this book", "vllm_bench_serve": "vllm bench serve",
                              "sglang_bench_serving": "sglang bench_serving", "guidellm": "GuideLLM",
                              "aiperf": "AIPerf"})[["this book", "definition", "vllm bench serve",
                                                    "sglang bench_serving", "GuideLLM", "AIPerf", "note", "checked"]]


def facts(study: dict | None) -> dict:
    """The numbers the section's prose cites (measured, or derived from the measured points); 'n/a' without."""
    if study is None:
        return {k: "n/a" for k in ("ld_slo", "ld_share", "ld_cap_c", "ld_cap_r", "ld_short_points", "ld_points",
                                   "ld_ovh_1", "ld_ovh_16", "ld_max_rate", "ld_one_rate", "ld_warm")}
    opens = [r for r in study.get("rate_sweep", []) if r.get("sweep_role") == "open" and "rate_short" in r]
    ends = study.get("rate_sweep", [])[:2]
    ovh = {r["concurrency"]: r["overhead_per_request_ms"] for r in study["client_overhead"]}

    def cap(which, fmt):
        def num(x):   # the figure alone, without its unit
            return fmt.format(x).split(" ")[0]

        c = study.get(which, {})
        v = c.get("capacity", float("nan"))
        above = c.get("held_above_failure") or []
        odd = (f"; {', '.join(num(a) for a in above)} held above that failure: not "
               f"monotonic, a sign the machine's load changed between points") if above else ""
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return f"none (even the first point missed the SLOs{odd})" if c.get("points") else "not measured"
        more = "" if c.get("complete", False) else " (search stopped at its time limit)"
        top = " (the search's top: it held there)" if c.get("hit_limit") else ""
        nxt = c.get("first_failed")
        edge = f" ({num(nxt)} did not hold{odd})" if nxt is not None and not top else ""
        return fmt.format(v) + edge + top + more

    return {"ld_slo": f"{study['slo']} (assumed: set by the target)", "ld_share": f"{100 * study['slo_share']:.0f} %",
            "ld_cap_c": cap("capacity_concurrency", "{:.0f} requests in flight"),
            "ld_cap_r": cap("capacity_rate", "{:.2f} requests/s"),
            "ld_short_points": f"{sum(bool(r['rate_short']) for r in opens)} of {len(opens)}",
            "ld_points": f"{len(opens)}",
            "ld_ovh_1": f"{ovh.get(1, float('nan')):.1f} ms", "ld_ovh_16": f"{ovh.get(16, float('nan')):.1f} ms",
            "ld_one_rate": _rate(ends[0] if ends else {}), "ld_max_rate": _rate(ends[1] if len(ends) > 1 else {}),
            "ld_warm": _warm(study.get("warmup"))}


def _warm(w: dict | None) -> str:
    if not w:
        return "no warm-up"
    if w.get("error"):
        return f"a warm-up of {w['requests']} requests that failed ({w['error'][:80]})"
    return f"a warm-up wave of {w['requests']} requests, not counted"


def _rate(r: dict) -> str:
    v = r.get("request_throughput")
    return "not measured" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f} requests/s"
