"""One load point of the load study, measured once: its requests' own records, the ramp before them excluded
and counted, and its summary over the measured requests only.

    rule_requests(0.9) -> 10          the fewest requests a point needs for its share rule (one may miss)
    measure(url, model, Load.closed(4), LoadPlan(...)) -> row   (row["records"]: one dict per request)

A closed-loop point at concurrency c starts its c slots one after another over `ramp_s` (the ramp) and
excludes the first wave, c requests, from its figures (with `count_ramp`, issue 46: the first wave is part of the
point's requests and counted in its figures, as a tool that counts every request it sends - for a like-for-like
run beside a tool whose own first wave is spread out); an open-loop point sends its first `ramp_s` seconds of
arrivals at a rate growing linearly from zero to the nominal one and excludes them; a trace replays its
arrivals as they are (the study's warm-up runs before its first point). Each request's record keeps its
phases: connect (start to connection set up), send (to the request written), wait (to the reply's first byte),
first token (to the first content) and receive (to the end of the stream).
"""
from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

import numpy as np

from .client import (BenchmarkError, Deadlines, Endpoint, RequestResult, Window, Workload, make_prompts, one_request,
                     run_sync, summarize)
from .loadspec import SLO, OpenLoop, achieved_rate, arrival_schedule, goodput, meets, rate_short, tpot_s
from .openloop import extra_stats

#: an open-loop point sends at least this many seconds of arrivals after its ramp (openloop.MIN_SPAN_S's reason)
MIN_SPAN_S = 4.0


def rule_requests(share: float) -> int:
    """The fewest measured requests a point needs for "a share `share` of requests inside the SLOs" to allow
    one request outside: ceil(1 / (1 - share)) (10 for 90 %), and 10 where every request must be inside."""
    if share >= 1.0:
        return 10
    return max(2, math.ceil(1.0 / (1.0 - share) - 1e-9))


@dataclass(frozen=True)
class Load:
    """Which load a point puts on the server: `kind` closed (value: requests in flight), open (requests/s) or
    trace (value: the replay's speed-up)."""
    kind: str
    value: float
    name: str = ""          # a trace's name

    @classmethod
    def closed(cls, c: int) -> "Load":
        return cls("closed", int(c))

    @classmethod
    def open(cls, rate: float) -> "Load":
        return cls("open", round(float(rate), 6))

    @property
    def key(self) -> str:
        if self.kind == "closed":
            return f"c={int(self.value)}"
        if self.kind == "open":
            return f"r={self.value:.6g}"
        return f"trace={self.name}x{self.value:g}"


@dataclass(frozen=True)
class LoadPlan:
    """What every point of one study shares: workload, SLO, requests, arrivals, ramp, time limits."""
    workload: Workload
    slo: SLO
    requests: int                   # measured requests per point (at least rule_requests(share))
    burstiness: float = 1.0
    ramp_s: float = 1.0
    min_span_s: float = MIN_SPAN_S
    timeout_s: float = 600.0
    seed: int = 0
    tokenizer: object = None
    chat: bool = False
    until: float | None = None      # a time.monotonic() instant no request starts or runs past (the study's end)
    count_ramp: bool = False        # closed loop only: the first wave is among `requests` and counted, not excluded


def ramp_offsets(rate: float, ramp_s: float) -> np.ndarray:
    """Arrival offsets (s) of an open-loop ramp: the rate grows linearly from 0 to `rate` over `ramp_s`, so
    arrival i comes at sqrt(2 ramp_s i / rate), i = 1 .. floor(rate ramp_s / 2)."""
    k = int(rate * ramp_s / 2) if ramp_s > 0 else 0
    return np.sqrt(2.0 * ramp_s * np.arange(1, k + 1) / rate) if k else np.zeros(0)


def open_schedule(rate: float, plan: LoadPlan) -> tuple[np.ndarray, int]:
    """(arrival offsets, how many of them are the ramp) of an open-loop point at `rate`."""
    ramp = ramp_offsets(rate, plan.ramp_s)
    n = max(plan.requests, int(math.ceil(rate * plan.min_span_s)))
    body = arrival_schedule(OpenLoop(rate, plan.burstiness), n, plan.seed) + (plan.ramp_s if len(ramp) else 0.0)
    return np.concatenate([ramp, body]), len(ramp)


async def _one(ep, model, prompt, max_tokens, t_origin, d, window: Window, chat):
    """One request within the window (not run where it may no longer start)."""
    dj = window.deadlines(d)
    if dj is None:
        return Window.not_run(time.perf_counter() - t_origin)
    return await one_request(ep, model, prompt, max_tokens, t_origin, dj, chat)


async def _closed(ep, model, prompts, max_tokens, c, ramp_s, d, window, chat):
    """Closed loop: c slots, slot i starting at i ramp_s / c, each taking the next prompt when its last ends."""
    t_origin, queue, out = time.perf_counter(), list(enumerate(prompts)), [None] * len(prompts)

    async def slot(i):
        await asyncio.sleep(i * ramp_s / c)
        while queue:
            j, p = queue.pop(0)
            out[j] = await _one(ep, model, p, max_tokens[j], t_origin, d, window, chat)

    await asyncio.gather(*(slot(i) for i in range(c)))
    return out


async def _scheduled(ep, model, prompts, max_tokens, schedule, d, window, chat):
    """Open loop or trace: prompt i starts at schedule[i] seconds, whatever is in flight."""
    t_origin = time.perf_counter()

    async def at(j, t):
        await asyncio.sleep(max(0.0, t - (time.perf_counter() - t_origin)))
        return await _one(ep, model, prompts[j], max_tokens[j], t_origin, d, window, chat)

    return list(await asyncio.gather(*(at(j, float(t)) for j, t in enumerate(schedule))))


def _send(url, model, prompts, max_tokens, plan, closed=None, schedule=None):
    async def go():
        ep = await Endpoint.resolve(url)   # a connection of its own per request (helpers.serving.fetch)
        d, window = Deadlines.from_timeout(plan.timeout_s), Window(plan.until, plan.until)
        if closed is not None:
            return await _closed(ep, model, prompts, max_tokens, closed, plan.ramp_s, d, window, plan.chat)
        return await _scheduled(ep, model, prompts, max_tokens, schedule, d, window, plan.chat)
    return run_sync(go())


def record(r: RequestResult, ramp: bool) -> dict:
    """One request as the study keeps it (seconds from the point's start, or from the request's start)."""
    def f(x):
        return None if x is None or not math.isfinite(x) else round(float(x), 6)
    return {"start_s": f(r.start_s), "ok": r.ok, "ramp": ramp, "ttft_s": f(r.ttft_s), "e2e_s": f(r.e2e_s),
            "tpot_s": f(tpot_s(r)), "input_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
            "connected_s": f(r.sent_s), "written_s": f(r.written_s),
            "first_byte_s": f(r.headers_s),
            "itl_s": [round(x, 6) for x in r.itl_s], "error_kind": r.error_kind, "error": r.error[:200]}


def _summary(load: Load, results: list[RequestResult], n_ramp: int, plan: LoadPlan, slo: SLO) -> dict:
    """The row of a point: its summary over the measured requests (the ramp's excluded and counted)."""
    order = sorted(range(len(results)), key=lambda j: results[j].start_s)
    ramp_ids = set(order[:n_ramp])
    kept = [results[j] for j in order[n_ramp:] if results[j].error_kind != "not-run"]
    not_run = sum(1 for r in results if r.error_kind == "not-run")
    t0 = min((r.start_s for r in kept), default=0.0)
    t1 = max((r.start_s + r.e2e_s for r in kept if math.isfinite(r.e2e_s)), default=t0)
    dur = max(t1 - t0, 1e-9)
    row = {"key": load.key, "kind": load.kind, "load": load.value, "workload": plan.workload.name,
           "requests_measured": len(kept), "ramp_requests": n_ramp, "rule_requests": plan.requests,
           **summarize(kept, dur), **extra_stats(kept), "not_run": not_run, "cut_short": not_run > 0}
    row["sent_rate"] = achieved_rate([r.start_s for r in kept])
    row["per_user_tokens_per_s"] = 1e3 / row["median_tpot_ms"] if row.get("median_tpot_ms", 0) > 0 else float("nan")
    if not slo.empty:
        row.update(goodput(kept, slo, dur))
    row["records"] = [record(results[j], j in ramp_ids) for j in order]
    return row


def measure(url: str, model: str, load: Load, plan: LoadPlan, trace=None) -> dict:
    """Measure one point (see the module docstring) and return its row, its requests' records included."""
    w, rng_seed = plan.workload, plan.seed
    if plan.count_ramp and load.kind != "closed":
        raise BenchmarkError(f"LoadPlan.count_ramp with the {load.kind} load {load.key}: counting the first wave is "
                             "for a closed loop only (its ramp is the first c requests); leave count_ramp False")
    if load.kind == "closed":
        c = int(load.value)
        n_ramp, n = (0, plan.requests) if plan.count_ramp else (c, c + plan.requests)
        prompts = make_prompts(n, w.input_len, plan.tokenizer, rng_seed)
        results = _send(url, model, prompts, [w.output_len] * n, plan, closed=c)
    elif load.kind == "open":
        schedule, n_ramp = open_schedule(load.value, plan)
        prompts = make_prompts(len(schedule), w.input_len, plan.tokenizer, rng_seed)
        results = _send(url, model, prompts, [w.output_len] * len(schedule), plan, schedule=schedule)
    else:
        entries, n_ramp = list(trace or []), 0
        prompts = [make_prompts(1, e.input_len, plan.tokenizer, rng_seed + i)[0] for i, e in enumerate(entries)]
        schedule = np.array([e.t_s / load.value for e in entries])
        results = _send(url, model, prompts, [e.output_len for e in entries], plan, schedule=schedule)
    row = _summary(load, results, n_ramp, plan, plan.slo)
    if load.kind == "open":
        drawn = achieved_rate(list(schedule[n_ramp:]))
        row.update(request_rate=load.value, scheduled_rate=drawn, rate_short=rate_short(drawn, row["sent_rate"]))
    return row


def meets_of(row: dict, slo: SLO) -> list[bool]:
    """Whether each measured request of a point's row met `slo` (from its records; a request that never ran, its
    point cut short by the study's end, is none)."""
    out = []
    for r in row.get("records", []):
        if r["ramp"] or r["error_kind"] == "not-run":
            continue
        rr = RequestResult(ok=r["ok"], ttft_s=_num(r["ttft_s"]), e2e_s=_num(r["e2e_s"]),
                           output_tokens=r["output_tokens"])
        out.append(meets(rr, slo))
    return out


def _num(x) -> float:
    return float("nan") if x is None else float(x)
