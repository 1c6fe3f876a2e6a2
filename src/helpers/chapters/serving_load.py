"""Chapter 03's load study on the page (issues 38, 46): its parameters and their rules, the typed StudyConfig built
from them, the time it adds to the plan, and its tables, figure and phrases.

The study itself is helpers.serving.loadstudy.load_study. With `load_modes` "on" it runs in full against a real
engine or a given server, and as a short harness check against the stand-in where the chapter launched only the
tiny random-weight model (a study of that model says nothing about serving; issue 48). Every phrase is chosen
here from the study's numbers; the sentences stay in the notebook.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from helpers.core import params, recorded
from helpers.serving.config import STUDY_KINDS, StudyConfig
from helpers.serving.loadspec import SLO, LoadSpecError

#: the committed synthetic trace ("synthetic" in the `trace` parameter)
SYNTHETIC_TRACE = recorded.data_dir() / "traces" / "synthetic.jsonl"


def _slo_rule(slo, load_modes):
    try:
        parsed = SLO.parse(slo)
    except LoadSpecError as e:
        return f"{e} (the `slo` parameter)"
    if load_modes != "off" and parsed.empty:
        return ("the load study's capacity search needs an SLO: set slo to e.g. 'ttft:2000 tpot:200' "
                "(milliseconds; tps:N for an output-speed floor in tokens/s per user), or load_modes='off'")
    return None


def _burstiness(b):
    b = params.number(0, 100).check(b)
    if not b > 0:
        raise ValueError
    return b


def _trace(v):
    if not isinstance(v, str) or len(v) > 400:
        raise ValueError
    if v and v != "synthetic" and not Path(v).is_file():
        raise ValueError
    return v


PARAMS = {"load_modes": params.choice(*STUDY_KINDS),
          "slo": params.depends(params.string(max_len=200), "load_modes", _slo_rule),
          "slo_share": params.number(0.01, 1.0),
          "burstiness": params.Spec("a finite number, positive and at most 100: the arrival gaps' gamma shape (1 = Poisson "
                                    "arrivals, 0.5 burstier, 2 steadier; 0 has no gamma distribution)", _burstiness),
          "rate_points": params.number(1, 16, integer=True),
          "load_requests": params.number(2, 256, integer=True),
          "load_time_s": params.number(10, 3600),
          "ramp_s": params.number(0, 60),
          "trace": params.Spec("'' (no replay), 'synthetic' (the committed trace) or the path of a JSONL trace "
                               "(Mooncake's format: timestamp ms, input_length, output_length)", _trace)}


def study_config(P: dict) -> StudyConfig:
    """The load study's parameters, typed once (the chapter boundary)."""
    trace = str(SYNTHETIC_TRACE) if P["trace"] == "synthetic" else P["trace"]
    return StudyConfig(kind=P["load_modes"], slo=SLO.parse(P["slo"]), slo_text=P["slo"], slo_share=P["slo_share"],
                       burstiness=P["burstiness"], rate_points=P["rate_points"], load_requests=P["load_requests"],
                       load_time_s=P["load_time_s"], workload=P["workloads"][0],
                       concurrencies=tuple(int(c) for c in P["concurrencies"]), ramp_s=P["ramp_s"], trace=trace)


#: the harness check's least time in its cell (s): its own bound (helpers.serving.loadstudy.CHECK) and the client's
#: overhead rows
CHECK_TIME_S = 70.0


def plan_time(v: dict, base: "params.Estimate | None") -> "params.Estimate | None":
    """The chapter's sweep estimate plus the load study's bound: `load_time_s` in full, CHECK_TIME_S as a check."""
    if base is None or v.get("load_modes") == "off":
        return base
    real = bool(v.get("server_url")) or v.get("engine") == "sglang"
    full = v["load_modes"] == "full" or (v["load_modes"] == "on" and real)
    add = float(v["load_time_s"]) if full else CHECK_TIME_S
    how = f"load_time_s = {v['load_time_s']:g} s" if full else f"the harness check's {CHECK_TIME_S:g} s"
    return params.Estimate(base.seconds + add, base.names + ("load_time_s", "load_modes"),
                           base.how + f"; plus the load study's bound, {how}", base.fix + ", or a smaller load_time_s")


def status(study, live: bool) -> str:
    """Why the load study did or did not run here (one phrase)."""
    if study is None:
        return ("not run here: load_modes is 'off' (the default target keeps its time; the cpu-demo and h200 "
                "targets run it)") if live else ("not run here: the chapter's sweep does not run live on this "
                                                 "machine (the load study runs with it)")
    if study.failed:
        return f"run, and ended early: {study.failed[:200]}"
    kind = "in full" if study.kind == "full" else "as a harness check"
    spent = sum(float(p.get("point_s") or 0) for p in study.points)
    bound = getattr(study, "time_limit_s", None)
    within = f" within its bound of {bound:.0f} s" if bound else ""
    return f"run {kind}, {spent:.0f} s of measuring its load points{within}"


#: what each kind of study can and cannot show (the section's first sentence names what it measured)
CAN = {"full": "Its figures are that server's at this workload and these assumed SLOs, on this day; they say nothing "
               "about GLM-5, eight GPUs or a VM unless that is what the server runs",
       "check": "Section 3 launched only a tiny random-weight model, whose load says nothing about serving, so the "
                "study ran as a harness check: it shows that the client, the ramp, the searches, the interval and the "
                "drift check work on a server whose answer is known (its knee), and measures nothing about GLM-5, "
                "SGLang, a GPU or a VM. Give `server_url` (any OpenAI-compatible server, CPU included) for the study "
                "in full"}


def check_settings(study) -> str:
    """The harness check's own settings (helpers.serving.loadstudy.CHECK, with the workload, SLO and ramp the study
    recorded), which replace the parameters cell's: those apply to the study in full."""
    from helpers.serving.loadstudy import CHECK

    cs = [str(c) for c in CHECK["concurrencies"]]
    return (f"It used its own settings, not the parameters cell's (those apply in full): concurrencies "
            f"{', '.join(cs[:-1])} and {cs[-1]}, {CHECK['rate_points']} open-loop rates, the {study.workload} workload, "
            f"SLO {study.slo} and a {study.ramp_s:g} s ramp")


#: whose the SLO is
SLO_WHOSE = {"full": "assumed: set by the target", "check": "the harness check's own: two of the stand-in's token "
             "intervals, which a request past its knee takes three of"}


def _num(x) -> float:
    return float("nan") if x is None else float(x)


def _fmt(x, f="{:.1f}") -> str:
    return "n/a" if x is None or not math.isfinite(_num(x)) else f.format(x)


def points_view(study) -> pd.DataFrame:
    """One row per load the study measured (measured; rates and speeds derived from the requests)."""
    rows = []
    for p in study.points:
        load = f"{int(p['load'])} in flight" if p["kind"] == "closed" else \
            f"{p['load']:.3g}/s arriving" if p["kind"] == "open" else "trace replay"
        if p["key"].startswith("again:"):
            load += " (again, at the end)"
        rows.append({"load": load, "measured for": p.get("role", ""),
                     "requests (ramp excluded)": f"{p.get('requests_measured', 0)} (+{p.get('ramp_requests', 0)})"
                     + (f", {p['not_run']} not run: cut at the study's end" if p.get("cut_short") else ""),
                     "completed (requests/s)": p.get("request_throughput"), "median TTFT (ms)": p.get("median_ttft_ms"),
                     "median TPOT (ms)": p.get("median_tpot_ms"),
                     "inside SLOs (%)": None if p.get("good_share") is None else 100 * p["good_share"]})
    return pd.DataFrame(rows)


#: the phases of one request, from its records (helpers.serving.points)
PHASES = (("connect", None, "connected_s", "start to connection set up"),
          ("send", "connected_s", "written_s", "request written"),
          ("wait", "written_s", "first_byte_s", "to the reply's first byte"),
          ("first token", "first_byte_s", "ttft_s", "to the first content"),
          ("receive", "ttft_s", "e2e_s", "first content to the stream's end"))


def phases_view(study) -> pd.DataFrame | None:
    """Median of each phase (ms) at the lowest and the highest concurrency measured (measured); None without."""
    closed = sorted((p for p in study.points if p["kind"] == "closed" and not p["key"].startswith("again:")
                     and p.get("records")), key=lambda p: p["load"])
    if not closed:
        return None
    cols = {}
    for p in (closed[0], closed[-1]):
        recs = [r for r in p["records"] if r["ok"] and not r["ramp"]]
        vals = []
        for _, a, b, _ in PHASES:
            d = [(_num(r[b]) - (_num(r[a]) if a else 0.0)) * 1e3 for r in recs]
            d = [x for x in d if math.isfinite(x)]
            vals.append(float(np.median(d)) if d else None)
        cols[f"{int(p['load'])} in flight (ms)"] = vals
    return pd.DataFrame({"phase": [n for n, *_ in PHASES], "ends at": [w for *_, w in PHASES], **cols})


def overhead_view(study) -> pd.DataFrame | None:
    """The client's overhead rows (measured), or None where the study's time ran out before them."""
    if not study.client_overhead:
        return None
    return pd.DataFrame([{"concurrency": r["concurrency"], "scheduled E2E (ms)": r["scheduled_e2e_ms"],
                          "measured median E2E (ms)": r["median_e2e_ms"],
                          "overhead per request (ms)": r["overhead_per_request_ms"],
                          "overhead per token (ms)": r["overhead_per_token_ms"]} for r in study.client_overhead])


def names_table() -> pd.DataFrame:
    """The book's metric names beside vllm bench serve, sglang bench_serving, GuideLLM, AIPerf and inference-perf."""
    df = recorded.load("reference/serving_metric_names.csv")
    return df.rename(columns={"book_name": "this book", "vllm_bench_serve": "vllm bench serve",
                              "sglang_bench_serving": "sglang bench_serving", "guidellm": "GuideLLM",
                              "aiperf": "AIPerf", "inference_perf": "inference-perf"})[
        ["this book", "definition", "vllm bench serve", "sglang bench_serving", "GuideLLM", "AIPerf",
         "inference-perf", "note", "checked"]]


def capacity_phrase(c: dict, unit: str, fmt: str) -> str:
    """A capacity with its interval and how its search ended, from the search's result."""
    def num(x):
        return fmt.format(x)

    v = c.get("capacity", float("nan"))
    above = c.get("held_above_failure") or []
    odd = (f"; {', '.join(num(a) for a in above)} held above that failure: not monotonic, a sign the server's "
           "speed changed between points") if above else ""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return f"none (even the lowest load missed the SLOs{odd})" if c.get("points") else "not measured"
    lo, hi = (c.get("interval") or [float("nan")] * 2)[:2]
    ivl = (f", 90 % interval {num(lo)}-{num(hi)}" if math.isfinite(_num(lo)) else
           f", 90 % interval from none to {num(hi)}") if math.isfinite(_num(hi)) else ""
    more = "" if c.get("complete", False) else "; search stopped at its time limit"
    top = "; it held at the search's top" if c.get("hit_limit") else ""
    nxt = c.get("first_failed")
    # site-read5 N15: the interval is a bootstrap over each load's requests, so it can reach a load that failed as
    # measured (a resample of its requests can meet the share); the page says so where it does
    resampled = (nxt is not None and math.isfinite(_num(hi)) and _num(hi) >= _num(nxt))
    held = " as measured, though some resamples of its requests do" if resampled else ""
    edge = f"; {num(nxt)} did not hold{held}{odd}" if nxt is not None and not top else ""
    if ivl:
        ivl = ivl + ", bootstrapped over each load's requests"
    return f"{num(v)} {unit} ({ivl.lstrip(', ')}{edge}{top}{more})".replace("( ", "(").replace("(; ", "(")


def drift_phrase(d: dict | None) -> str:
    if not d:
        return "no drift check (the study's time ran out before its first point could be measured again)"
    said = "flagged: the server changed during the study" if d["flagged"] else "not flagged"
    lo, hi = d["interval_ms"]
    return (f"{said} (the first point's median {d['metric'].upper()} {d['first_ms']:.1f} ms, again at the end "
            f"{d['again_ms']:.1f} ms, {signed_pct(d['change_pct'])}; its first 90 % interval {lo:.1f}-{hi:.1f} ms)")


def signed_pct(x: float) -> str:
    """A change in per cent with its sign, to one decimal below 1 % (never "-0 %"; site-read4 L6)."""
    if abs(x) < 0.05:
        return "no change to 0.1 %"
    return f"{x:+.1f} %" if abs(x) < 1 else f"{x:+.0f} %"


def vs_sweep(study, sweep: pd.DataFrame | None) -> str:
    """Why section 3's sweep and the study may read different figures at the same concurrency."""
    if study.kind == "check":
        return "the study measured the stand-in, not section 3's server, so its figures are not section 3's"
    first = next((p for p in study.points if p["kind"] == "closed"), None)
    if sweep is None or first is None:
        return "section 3 swept no point to compare with"
    s = sweep[(sweep.concurrency == int(first["load"])) & (sweep.workload == study.workload)]
    if s.empty:
        return f"section 3 swept no point at {int(first['load'])} in flight of workload {study.workload}"
    a, b = float(s.median_ttft_ms.iloc[0]), _num(first.get("median_ttft_ms"))
    return (f"at {int(first['load'])} in flight section 3's sweep read a median TTFT of {a:.1f} ms and the study "
            f"{b:.1f} ms ({100 * (b - a) / a:+.0f} %): two measurements minutes apart, the sweep's "
            f"{int(s.num_requests.iloc[0])} requests after one warm-up request, the study's "
            f"{first['requests_measured']} after its warm-up wave and ramp; section 4's table is the study's answer")


def _ms(x) -> str:
    return "not measured (the study's time ran out first)" if x is None else f"{x:.1f} ms"


def facts(study) -> dict:
    """The numbers and phrases section 4 cites (measured, or derived from the measured points); 'n/a' without."""
    keys = ("ld_what", "ld_can", "ld_slo", "ld_share", "ld_rule", "ld_counts", "ld_cap_c", "ld_cap_r", "ld_drift",
            "ld_ovh_1", "ld_ovh_16", "ld_warm", "ld_trace")
    if study is None:
        return {k: "n/a" for k in keys}
    pts = [p for p in study.points if p.get("records") is not None]
    measured = sum(p.get("requests_measured", 0) for p in pts)
    ramp = sum(p.get("ramp_requests", 0) for p in pts)
    ovh = {r["concurrency"]: r["overhead_per_request_ms"] for r in study.client_overhead}
    w = study.warmup or {}
    warm = (f"a warm-up wave of {w['requests']} requests ({w.get('completed', 0)} completed), not counted"
            if w.get("requests") else "no warm-up (the study did not start)")
    return {"ld_what": study.target["what"] if isinstance(study.target, dict) else study.target.what,
            "ld_can": CAN[study.kind] + (". " + check_settings(study) if study.kind == "check" else ""), "ld_slo": f"{study.slo} ({SLO_WHOSE[study.kind]})",
            "ld_share": f"{100 * study.slo_share:.0f} %",
            "ld_rule": (f"{study.requests_per_point} measured requests a closed-loop point, at least "
                        f"{study.rule_requests} so that {100 * study.slo_share:.0f} % inside allows one request "
                        f"outside; an open-loop point sends at least {study.min_span_s:g} s of arrivals; the first "
                        f"wave of a closed-loop point and the first {study.ramp_s:g} s of an open-loop point's "
                        "arrivals, rising to its rate, are its ramp"),
            "ld_counts": f"{len(pts)} points, {measured} requests measured and {ramp} ramp requests excluded",
            "ld_cap_c": capacity_phrase(study.capacity_concurrency, "in flight", "{:.0f}"),
            "ld_cap_r": capacity_phrase(study.capacity_rate, "requests/s", "{:.2f}"),
            "ld_drift": drift_phrase(study.drift), "ld_ovh_1": _ms(ovh.get(1)), "ld_ovh_16": _ms(ovh.get(16)),
            "ld_warm": warm,
            "ld_trace": f"a trace replayed ({study.trace})" if study.trace else "no trace replayed (`trace` is empty)"}


def curve_points(study) -> list[dict]:
    """The figure's points: every load measured once (the drift check's repeat left out)."""
    return [p for p in study.points if not p["key"].startswith("again:")]


def slo_lines(study) -> tuple[float | None, float | None]:
    """(TTFT ceiling in ms, output speed floor in tokens/s) of the study's SLO, for the figure."""
    slo = SLO.parse(study.slo)
    floor = slo.min_tokens_per_s or (1e3 / slo.tpot_ms if slo.tpot_ms else None)
    return slo.ttft_ms, floor
