"""Chapter 03's load study (issue 38): against one server, an open-loop request-rate sweep from one request at
a time to the measured maximum throughput, goodput at the chapter's SLOs per point, capacity at those SLOs
(the highest concurrency and the highest request rate holding `slo_share` of requests inside them, with the
points each rests on), and the client's own overhead measured against the stand-in server.

    study = load_study(P, run)      # None where P["load_modes"] is "off"

Every part is bounded by `load_time_s` and by the notebook cell's budget (helpers.serving.sweep.time_left),
resumes from its JSON-lines points files, and keeps a point whose server fell over as failed. Each part stops at
its own share of the time (a point starts with no more time than its part has left, and no request starts past
it, so a part ends at most one request time limit after its share), and nothing runs past the study's end
(`until`: a request in flight there is cut off); what did not run is recorded as not run (rows `skipped`,
`cut_short`, `not_run`), the overhead rows included. The server is
launched here (or the given one is used) and stopped when the study ends, whatever happened.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

from helpers.core import layout
from . import client as cl, live, sweep
from .capacity import search
from .loadspec import SLO, ClosedLoop, LoadSpec, OpenLoop
from .openloop import open_requests, rate_sweep, run_spec
from .overhead import client_overhead

#: shares of the study's measuring time (after the server's start and the warm-up, less OVERHEAD_S): the rate sweep,
#: then the concurrency search, then the rate search (the rest)
SHARES = (0.4, 0.3)
#: the largest concurrency the study probes or searches (a cap on the chapter's concurrencies)
MAX_CONCURRENCY = 64


@contextmanager
def _server(P: dict, run: layout.Run):
    """(base_url, model, tokenizer) of the given server, or of one launched for the study (stopped after)."""
    if P["server_url"]:
        yield P["server_url"], P["served_model"] or cl.served_model(P["server_url"]), None
        return
    from .experiments import served_tiny_model, sglang_base, with_health

    if P["engine"] == "transformers":
        model_dir, _ = served_tiny_model(P)
        spec, model = live.transformers_spec(model_dir, "batched", P["device"]), str(model_dir)
    else:
        base, env, fs, _ = sglang_base(P)
        spec, model = live.sglang_spec(base, env, fs, "cuda-graph"), base.served_model_name or P["model_path"]
    spec = with_health(P, spec)
    with live.Server(spec, run.path("logs") / f"load-{spec.name}.log",
                     startup_timeout_s=min(P["startup_timeout_s"], max(1.0, budget_s(P)))):   # inside the study
        yield spec.base_url, model, None


def budget_s(P: dict) -> float:
    """The study's time: `load_time_s`, or less where the cell's budget has less left."""
    left = sweep.time_left()
    return max(0.0, min(float(P["load_time_s"]), left if left is not None else float("inf")))


def load_study(P: dict, run: layout.Run) -> dict | None:
    """Run the study (see the module docstring); saves load_study.json and returns it."""
    if P.get("load_modes", "off") == "off":
        return None
    w0 = P["workloads"][0]   # validated parameters hold Workloads; a plain dict may hold "IN/OUT" text
    slo, wl = SLO.parse(P["slo"]), w0 if isinstance(w0, cl.Workload) else cl.Workload.parse(w0)
    top = min(MAX_CONCURRENCY, max(P["concurrencies"]))
    t0, total = time.monotonic(), budget_s(P)
    end = t0 + total   # the study's end: nothing runs past it
    out = {"slo": P["slo"], "slo_share": P["slo_share"], "workload": wl.name, "burstiness": P["burstiness"],
           "requests_per_point": P["load_requests"], "time_limit_s": total}
    try:
        with _server(P, run) as (url, model, _):
            out["warmup"] = _warm_up(url, model, wl, P, top, end)
            t1 = time.monotonic()   # the parts share what is left for measuring (the server's start, the warm-up done)
            left = max(0.0, end - OVERHEAD_S - t1)
            out["rate_sweep"] = rate_sweep(
                url, model, wl, points=P["rate_points"], slo=slo, requests_per_point=P["load_requests"],
                max_concurrency_probe=top, burstiness=P["burstiness"], time_limit_s=_part(t1, SHARES[0] * left, end),
                points_file=run.path("rate_rows"), vllm_dir=run.path("vllm_results"),
                request_timeout_s=P["request_timeout_s"], until=end - OVERHEAD_S)
            out["capacity_concurrency"] = _search_concurrency(url, model, wl, slo, P, top, run,
                                                              _part(t1, sum(SHARES) * left, end), end)
            ends = [r.get("request_throughput") for r in out["rate_sweep"][:2]]
            out["capacity_rate"] = _search_rate(url, model, wl, slo, P, ends, run, _part(t1, left, end),
                                                out["rate_sweep"], end)
    except Exception as e:  # noqa: BLE001 - a server that would not start or fell over: the rows kept say so
        out["failed"] = f"{type(e).__name__}: {e}"[:400]
    if end - time.monotonic() >= OVERHEAD_S / 2:
        out["client_overhead"] = client_overhead((1, 4, 16), tokens=32, per_concurrency=2)
    else:   # recorded as not run (no rows: the chapter shows none)
        out["client_overhead"], out["client_overhead_not_run"] = [], "the study's time was spent before them"
    out["study_s"] = time.monotonic() - t0
    run.save("load_study", out)
    return out


#: seconds kept at the study's end for the client-overhead rows (they take 2-5 s on the stand-in; they run where at
#: least half of it is left)
OVERHEAD_S = 10.0


def _part(t0: float, share_end_s: float, end: float) -> float:
    """Seconds from now to where a part of the study must stop: `share_end_s` after `t0`, and at most OVERHEAD_S
    before the study's end."""
    return max(0.0, min(t0 + share_end_s, end - OVERHEAD_S) - time.monotonic())


#: the warm-up wave before the study's first point: requests in flight (at most the study's top concurrency)
WARMUP_CONCURRENCY = 4


def _warm_up(url, model, wl, P, top, end: float) -> dict:
    """One closed-loop wave, not counted, before the first point: the study launches its own server, whose first
    requests run kernels and allocations for the first time (on the H200, the one-at-a-time point on a cold
    server read TTFT 52 ms and TPOT 14 ms where the chapter's warm sweep read 13 and 7)."""
    c = max(1, min(WARMUP_CONCURRENCY, top))
    t0 = time.monotonic()
    try:
        spec = LoadSpec(wl, ClosedLoop(c), num_requests=c, time_limit_s=max(1e-3, _part(t0, P["request_timeout_s"], end)))
        row = run_spec(url, model, spec, until=end - OVERHEAD_S)[0]
    except Exception as e:  # noqa: BLE001 - the study's first point will meet the same fault and keep it
        return {"concurrency": c, "requests": c, "error": f"{type(e).__name__}: {e}"[:200],
                "seconds": time.monotonic() - t0}
    return {"concurrency": c, "requests": c, "completed": row.get("completed"), "seconds": time.monotonic() - t0}


def _search_concurrency(url, model, wl, slo, P, top, run, limit_s, end) -> dict:
    stop = time.monotonic() + limit_s   # the search's own end: a point gets no more than what is left of it

    def measure(c):
        spec = LoadSpec(wl, ClosedLoop(int(c)), num_requests=max(int(c), P["load_requests"]), slo=slo,
                        time_limit_s=max(1e-3, stop - time.monotonic()), request_timeout_s=P["request_timeout_s"])
        return _slim(run_spec(url, model, spec, until=end - OVERHEAD_S)[0])
    return search(measure, 1, P["slo_share"], limit=top, points_file=run.path("capacity_concurrency"),
                  time_limit_s=limit_s)


def _search_rate(url, model, wl, slo, P, ends, run, limit_s, sweep_rows=(), end=None) -> dict:
    """The highest request rate inside the SLOs. The rate sweep's open points (same workload, SLO, request count
    and burstiness) are known points of the search: it starts at the lowest and measures only where the sweep
    left the answer open."""
    lo, hi = ends
    stop = time.monotonic() + limit_s
    known = [{**_slim(r), "load": r["request_rate"]} for r in sweep_rows
             if r.get("sweep_role") == "open" and r.get("good_share") is not None and not r.get("failed_point")
             and not r.get("cut_short")]
    if not (lo and hi and lo > 0 and hi > 0):
        return {"capacity": float("nan"), "complete": False, "points": [], "first_failed": None,
                "hit_limit": False, "why": "the rate sweep's ends were not measured"}

    def measure(r):
        n = open_requests(r, P["load_requests"])
        spec = LoadSpec(wl, OpenLoop(float(r), P["burstiness"]), num_requests=n, slo=slo,
                        time_limit_s=max(1e-3, stop - time.monotonic()), request_timeout_s=P["request_timeout_s"])
        return _slim(run_spec(url, model, spec, until=None if end is None else end - OVERHEAD_S)[0])
    lowest = min(known, key=lambda k: k["load"], default=None)   # where the sweep's lowest rate failed, go below
    start = lowest["load"] if lowest and lowest["good_share"] >= P["slo_share"] else lo / 2
    return search(measure, start, P["slo_share"], limit=2 * max(lo, hi), integer=False, rel_tol=0.15,
                  points_file=run.path("capacity_rate"), time_limit_s=limit_s, known=known)


def _slim(row: dict) -> dict:
    """A point's row without its arrival schedule (kept in the rate sweep's rows only)."""
    return {k: v for k, v in row.items() if k != "schedule_s"}


