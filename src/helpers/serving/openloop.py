"""Open-loop points and goodput on a LoadSpec: requests start on a seeded schedule, not when one ends.

run_spec(base_url, model, spec) -> (row, results): the existing summary (client.summarize) plus the nominal
and achieved request rate (flagged when short by more than loadspec.RATE_SHORTFALL), goodput at spec.slo,
ITL per token beside ITL per chunk, TPOT std and p95, and the arrival schedule itself (saved with the row).
"""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np

from .client import (Deadlines, Endpoint, RequestResult, Window, make_prompts, run_requests, run_sync,
                     summarize)
from .client import one_request  # the closed-loop path's single request, reused unchanged
from .loadspec import (RATE_SHORTFALL, ClosedLoop, LoadSpec, OpenLoop, achieved_rate, goodput, rate_short,
                       tpot_s)


async def run_open(base_url: str, model: str, prompts, max_tokens: int, load: OpenLoop, schedule,
                   timeout_s: float = 600.0, chat: bool = False, limit_s: float | None = None,
                   until: float | None = None) -> tuple[list[RequestResult], float]:
    """Start prompt i at schedule[i] seconds (at most load.max_concurrency in flight); (results, duration_s).
    With `limit_s` no request starts later than that many seconds from now (those scheduled after it, or still
    waiting for a slot then, are "not-run" at once, without waiting), and with `until` (a time.monotonic()
    instant) none runs past it (client.Window): the point ends within one request's time limit of `limit_s`."""
    d = Deadlines.from_timeout(timeout_s)
    window = Window.of(limit_s, until)
    client = await Endpoint.resolve(base_url)
    sem = asyncio.Semaphore(load.max_concurrency) if load.max_concurrency else None
    t_origin, m0 = time.perf_counter(), time.monotonic()

    async def go(p):
        dd = window.deadlines(d)
        if dd is None:
            return Window.not_run(time.perf_counter() - t_origin)
        return await one_request(client, model, p, max_tokens, t_origin, dd, chat)

    async def at(p, t):
        if window.stop is not None and m0 + t >= window.stop:   # scheduled past the limit: never waited for
            return Window.not_run(t)
        await asyncio.sleep(max(0.0, t - (time.perf_counter() - t_origin)))
        if sem is None:
            return await go(p)
        async with sem:
            return await go(p)

    results = await asyncio.gather(*(at(p, float(t)) for p, t in zip(prompts, schedule)))
    return list(results), time.perf_counter() - t_origin


def extra_stats(results) -> dict:
    """ITL per token (a chunk carrying k tokens counts k gaps of ITL/k), multi-token chunks, TPOT std and p95."""
    ok = [r for r in results if r.ok]
    per_token, multi = [], 0
    for r in ok:
        chunks = len(r.itl_s) + 1 if r.ttft_s == r.ttft_s else 0
        k = r.output_tokens / chunks if chunks else 1.0
        multi += k > 1.0 + 1e-9
        per_token += [x / k for x in r.itl_s]
    tp = np.asarray([tpot_s(r) for r in ok], dtype=float) * 1e3
    tp = tp[np.isfinite(tp)]
    itl = np.asarray([x for r in ok for x in r.itl_s], dtype=float) * 1e3
    pt = np.asarray(per_token, dtype=float) * 1e3
    nan = float("nan")
    return {"multi_token_chunk_requests": int(multi),
            "median_itl_per_token_ms": float(np.median(pt)) if len(pt) else nan,
            "std_itl_ms": float(itl.std()) if len(itl) else nan,
            "p95_itl_ms": float(np.percentile(itl, 95)) if len(itl) else nan,
            "std_tpot_ms": float(tp.std()) if len(tp) else nan,
            "p95_tpot_ms": float(np.percentile(tp, 95)) if len(tp) else nan}


#: an open-loop point sends at least this many seconds of arrivals: a few requests at a high rate arrive as one
#: burst the server absorbs like a closed-loop wave (cpu-demo: 8 requests at 17.6 requests/s all met a TTFT the
#: 16-in-flight probe missed for 38 % of its requests), so a rate would "hold" that the server cannot sustain
MIN_SPAN_S = 4.0


def open_requests(rate: float, at_least: int) -> int:
    """Requests an open-loop point at `rate` sends: `at_least`, or enough for MIN_SPAN_S of arrivals."""
    return max(int(at_least), int(np.ceil(rate * MIN_SPAN_S)))


def run_spec(base_url: str, model: str, spec: LoadSpec, tokenizer=None, chat: bool = False,
             until: float | None = None) -> tuple[dict, list]:
    """One point of `spec` (closed or open loop): its row and its per-request results. No request starts after
    spec.time_limit_s, and with `until` (a time.monotonic() instant: the end of the phase or study the point
    belongs to) none runs past it; the requests that did not run are counted (`not_run`, `cut_short`) and left out
    of goodput, whose share is over the requests that ran."""
    w = spec.workload
    prompts = make_prompts(spec.num_requests, w.input_len, tokenizer, spec.seed)
    row = {"workload": w.name, "input_len": w.input_len, "output_len": w.output_len, "num_requests": spec.num_requests,
           "seed": spec.seed, "time_limit_s": spec.time_limit_s}
    if isinstance(spec.load, ClosedLoop):
        results, dur = run_sync(run_requests(base_url, model, prompts, w.output_len, spec.load.concurrency,
                                             spec.request_limit_s, chat, limit_s=spec.time_limit_s, until=until))
        row.update(mode="closed", concurrency=spec.load.concurrency)
    else:
        sched = spec.schedule()
        results, dur = run_sync(run_open(base_url, model, prompts, w.output_len, spec.load, sched,
                                         spec.request_limit_s, chat, limit_s=spec.time_limit_s, until=until))
        ran = [i for i, r in enumerate(results) if r.error_kind != "not-run"]
        ach, drawn = achieved_rate([results[i].start_s for i in ran]), achieved_rate([sched[i] for i in ran])
        # flagged against the drawn schedule's rate: with few requests a seeded draw itself departs from the
        # nominal rate (CV of the mean gap ~ 1/sqrt(n burstiness)); the flag is for a client that fell behind
        row.update(mode="open", request_rate=spec.load.rate, burstiness=spec.load.burstiness,
                   max_concurrency=spec.load.max_concurrency, scheduled_rate=drawn, achieved_rate=ach,
                   rate_short=rate_short(drawn, ach), rate_margin=RATE_SHORTFALL,
                   schedule_s=[round(float(t), 6) for t in sched])
    row.update(summarize(results, dur))
    row.update(extra_stats(results))
    row["cut_short"] = row["not_run"] > 0
    ran_results = [r for r in results if r.error_kind != "not-run"]
    if not spec.slo.empty and ran_results:
        row.update(goodput(ran_results, spec.slo, dur) if dur > 0 else {})
    return row, results


def rate_sweep(base_url: str, model: str, workload, points: int = 4, slo=None, requests_per_point: int = 16,
               max_concurrency_probe: int = 16, burstiness: float = 1.0, seed: int = 0,
               time_limit_s: float = 600.0, chat: bool = False, points_file=None, vllm_dir=None,
               request_timeout_s: float | None = None, until: float | None = None) -> list[dict]:
    """Open-loop rates from one-at-a-time to the measured maximum throughput (geometric steps).

    The ends are measured first: the request rate with one request in flight (closed loop, concurrency 1)
    and with `max_concurrency_probe` in flight; `points` rates between them run open loop with seeded
    Poisson/gamma arrivals. Each row says which kind it is (`sweep_role`). With `points_file` (JSON lines) every
    finished point is appended at once and a rerun measures only the points not there. A point that raises (a
    server that fell over) is kept as failed with its error. With `vllm_dir` each measured point is also saved
    there as `vllm bench serve --save-result` JSON (helpers.serving.formats).

    Time: the sweep stops at `time_limit_s` (no point and no request starts after it; the requests in flight
    then end within `request_timeout_s`, default `time_limit_s`, so the sweep ends at most one request time limit
    after its limit), and nothing runs past `until` (a time.monotonic() instant: the study's end). A point not
    started is a row with `skipped` "time limit"; one cut short says `cut_short` and its `not_run` requests; neither
    is written to `points_file`, so a rerun measures them."""
    from .loadspec import SLO, LoadSpecError

    if isinstance(points, bool) or not isinstance(points, int) or points < 2:
        raise LoadSpecError(f"rate sweep points = {points}: expected 2 or more (the two ends)")
    slo = slo or SLO()
    deadline = time.monotonic() + time_limit_s
    deadline = deadline if until is None else min(deadline, until)
    per_request = float(request_timeout_s if request_timeout_s is not None else time_limit_s)
    done = _read_points(points_file)

    def point(key, role, load, n):
        if key in done:
            return done[key]
        left = deadline - time.monotonic()
        if left <= 0:
            return {"sweep_role": role, "key": key, "skipped": "time limit", "not_run": n, "cut_short": True,
                    **({"request_rate": load.rate} if isinstance(load, OpenLoop) else {"concurrency": load.concurrency})}
        spec = LoadSpec(workload, load, num_requests=n, slo=slo, seed=seed, time_limit_s=left,
                        request_timeout_s=per_request)
        try:
            row, results = run_spec(base_url, model, spec, chat=chat, until=until)
        except Exception as e:  # noqa: BLE001 - the point ends as failed; the rows measured stay
            row, results = {"failed_point": f"{type(e).__name__}: {e}"[:300], "request_throughput": float("nan")}, None
        row = {**row, "sweep_role": role, "key": key}
        if vllm_dir and results is not None:
            from .formats import vllm_result

            Path(vllm_dir).mkdir(parents=True, exist_ok=True)
            name = key.replace(" ", "-") + ".json"
            (Path(vllm_dir) / name).write_text(json.dumps(vllm_result(row, results, model), default=str))
        if points_file and not row.get("cut_short"):
            with open(points_file, "a") as f:
                f.write(json.dumps(row, default=str) + "\n")
        if not row.get("cut_short"):
            done[key] = row
        return row

    rows = []
    # the max-throughput probe sends two waves at least: one wave of c requests measures latency, not throughput
    for role, c, n in (("one-at-a-time", 1, max(4, min(requests_per_point, 2))),
                       ("max-throughput", max_concurrency_probe, max(4, requests_per_point, 2 * max_concurrency_probe))):
        rows.append(point(role, role, ClosedLoop(c), n))
    lo, hi = (None if r.get("cut_short") else r.get("request_throughput") for r in rows)
    if not (lo and hi and lo > 0 and hi > 0):
        return rows
    if hi <= lo:   # said on the row: the rates below then collapse onto one-at-a-time's (a loaded machine)
        rows[1] = {**rows[1], "probe_below_one_at_a_time": True}
    for r in sorted(set(np.geomspace(lo, max(hi, lo), points).round(6))):
        rows.append(point(f"open {r:.6g}", "open", OpenLoop(float(r), burstiness), open_requests(r, requests_per_point)))
    return rows


def _read_points(points_file) -> dict:
    from pathlib import Path

    out = {}
    if points_file and Path(points_file).exists():
        for line in Path(points_file).read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                out[row["key"]] = row
    return out
