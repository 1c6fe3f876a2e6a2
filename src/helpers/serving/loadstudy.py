"""Chapter 03's load study: one server, one workload, each load measured once, then what the points say.

    study = load_study(server, cfg, run)     # a LoadStudy, saved as load_study.json; None where cfg.kind is "off"

What it measures (helpers.serving.config.StudyConfig.resolved):
- "full": the given server (`server.url`) or a real engine it launches (sglang), the study's purpose;
- "check": a short harness check where no real engine is given (the tiny random-weight model under transformers
  serve says nothing about serving capacity): the same study against the stand-in server in a process of its
  own, streaming on a known schedule whose latency rises past a known concurrency (CHECK), so the page can show
  that the study finds the knee it was built with.

Every load is measured once (helpers.serving.points, kept in one JSON-lines file the study resumes from) and
shared by every part that needs it: the closed-loop curve at the study's concurrencies, the open-loop rate
sweep between one request at a time and the top concurrency's throughput, the capacity searches over
concurrency and request rate (they measure only loads not yet measured), an optional trace replay, and the
study's first point measured again at its end (the drift check, helpers.serving.confidence). Before the first
point a warm-up wave runs, excluded and counted. Capacity comes with a bootstrap interval over the points'
requests. Bounded by `load_time_s` and the notebook cell's budget; a server that fails ends the study with the
points kept.
"""
from __future__ import annotations

import json
import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from helpers.core import layout
from . import client as cl, live, sweep
from .capacity import search
from .confidence import capacity_interval, drift
from .config import ServerChoice, StudyConfig
from .loadspec import SLO
from .overhead import client_overhead
from .points import Load, LoadPlan, measure, meets_of, rule_requests
from .standin import StandInProcess
from .target import Target, describe_given, describe_launched
from .trace import read as read_trace

#: the harness check: the stand-in's schedule (first chunk after ttft_s, a token every interval_s, both `past_knee`
#: times longer for a request that arrives past `knee` requests in flight), its workload, concurrencies and SLO (2
#: intervals per token: past the knee a request takes 3, whatever the client adds; below it the client has 20 ms)
CHECK = {"ttft_s": 0.05, "interval_s": 0.02, "knee": 4, "past_knee": 3.0, "workload": cl.Workload(8, 8),
         "concurrencies": (1, 2, 4, 8), "slo": "tpot:40", "rate_points": 2, "min_span_s": 2.0, "time_s": 60.0, "ramp_s": 0.5}
#: the largest concurrency the study probes or searches
MAX_CONCURRENCY = 64
#: seconds of the study's time kept for the drift check (and as much again, beside its span, for a trace replay)
DRIFT_S = 6.0


@dataclass
class LoadStudy:
    kind: str                   # "full" or "check"
    target: Target              # what was measured (engine, model, hardware, and how each is known)
    slo: str                    # as given (assumed: a target sets it)
    slo_share: float
    rule_requests: int          # measured requests a point needs for the share rule (points.rule_requests)
    requests_per_point: int     # measured requests per closed-loop point (at least rule_requests)
    workload: str
    time_limit_s: float
    warmup: dict = field(default_factory=dict)
    points: list = field(default_factory=list)          # one row per load, in the order measured
    capacity_concurrency: dict = field(default_factory=dict)
    capacity_rate: dict = field(default_factory=dict)
    drift: dict | None = None
    client_overhead: list = field(default_factory=list)
    trace: str = ""
    min_span_s: float = 4.0     # the least seconds of arrivals an open-loop point sends after its ramp
    ramp_s: float = 1.0
    failed: str = ""
    study_s: float = 0.0


class PointStore:
    """Every point of one study, keyed by its load (Load.key), in a JSON-lines file a rerun resumes from."""

    def __init__(self, path, url: str, model: str, plan: LoadPlan, deadline: float, end: float):
        """`deadline`: no point starts after it; `end`: no request starts or runs past it (the study's end)."""
        self.path, self.url, self.model, self.deadline = path, url, model, deadline
        self.plan = replace(plan, until=end)
        self.rows: dict = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    r = json.loads(line)
                    self.rows[r["key"]] = r

    def get(self, load: Load, role: str, trace=None, key: str | None = None) -> dict | None:
        """The point at `load` (measured now unless done; None where the deadline passed first)."""
        k = key or load.key
        if k not in self.rows:
            if time.monotonic() >= self.deadline:
                return None
            t0 = time.monotonic()
            try:
                row = measure(self.url, self.model, load, self.plan, trace)
            except Exception as e:  # noqa: BLE001 - a server that fell over: the point is kept as failed
                row = {"key": load.key, "kind": load.kind, "load": load.value, "failed_point": f"{type(e).__name__}: {e}"[:300],
                       "good_share": 0.0, "request_throughput": float("nan"), "records": []}
            row = {**row, "key": k, "role": role, "point_s": round(time.monotonic() - t0, 3)}
            self.rows[k] = row
            if row.get("cut_short"):   # the study's end came inside it: kept on the page, not in the file (a
                return row             # rerun measures it again), and no evidence for a search (helpers.serving.capacity)
            with open(self.path, "a") as f:
                f.write(json.dumps(row, default=str) + "\n")
        return self.rows[k]

    def of_kind(self, kind: str) -> list[dict]:
        return [r for k, r in self.rows.items() if r.get("kind") == kind and not k.startswith("again:")]


def _slim(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "records"}


@contextmanager
def _server(server: ServerChoice, cfg: StudyConfig, kind: str, run: layout.Run):
    """(url, model, tokenizer, Target) of what the study measures; a launched server is stopped after."""
    if kind == "check":
        with StandInProcess(CHECK["ttft_s"], CHECK["interval_s"], CHECK["knee"], CHECK["past_knee"]) as sp:
            yield sp.url, "standin", None, Target.standin(CHECK)
        return
    if server.url:
        model = server.served_model or cl.served_model(server.url)
        yield server.url, model, live.tokenizer_for(server.model_path or None), describe_given(server, model)
        return
    from .experiments import served_tiny_model, sglang_base, with_health

    if server.engine == "transformers":
        model_dir, n_params = served_tiny_model(server)
        spec, model = live.transformers_spec(model_dir, "batched", server.device), str(model_dir)
        tok, what = live.tokenizer_for(model_dir), f"a random-weight MoE of {n_params / 1e6:.1f} M parameters"
    else:
        base, env, fs, vers = sglang_base(server)
        spec, model = live.sglang_spec(base, env, fs, "cuda-graph"), base.served_model_name or server.model_path
        tok, what = live.tokenizer_for(server.model_path), server.model_path
    spec = with_health(server, spec)
    limit = min(server.startup_timeout_s, max(1.0, budget_s(cfg)))   # the launch is inside the study's time
    with live.Server(spec, run.path("logs") / f"load-{spec.name}.log", startup_timeout_s=limit):
        yield spec.base_url, model, tok, describe_launched(server, what)


def _settings(cfg: StudyConfig, kind: str, total: float) -> tuple[StudyConfig, float, dict]:
    """The study's settings for its kind (the check's own schedule and SLO), its time and the arrivals' span."""
    if kind != "check":
        return cfg, total, {"min_span_s": 4.0, "ramp_s": cfg.ramp_s}
    c = replace(cfg, slo=SLO.parse(CHECK["slo"]), slo_text=CHECK["slo"], workload=CHECK["workload"],
                concurrencies=CHECK["concurrencies"], rate_points=CHECK["rate_points"])
    return c, min(total, CHECK["time_s"]), {"min_span_s": CHECK["min_span_s"], "ramp_s": CHECK["ramp_s"]}


def overhead_s(total: float) -> float:
    """Seconds kept at the study's end for the client's overhead rows (2-5 s on the stand-in): 10, or a quarter of
    a short study (issue 47: they run where at least half of it is left, else the page says they did not)."""
    return min(10.0, 0.25 * total)


def budget_s(cfg: StudyConfig) -> float:
    """The study's time: `load_time_s`, or less where the cell's budget has less left."""
    left = sweep.time_left()
    return max(0.0, min(float(cfg.load_time_s), left if left is not None else float("inf")))


def load_study(server: ServerChoice, cfg: StudyConfig, run: layout.Run) -> LoadStudy | None:
    """Run the study (see the module docstring); saves load_study.json and returns it."""
    kind = cfg.resolved(server)
    if kind == "off":
        return None
    t0 = time.monotonic()
    cfg, total, arrivals = _settings(cfg, kind, budget_s(cfg))
    n = max(cfg.load_requests, rule_requests(cfg.slo_share))
    out = LoadStudy(kind, Target.unknown(), cfg.slo_text, cfg.slo_share, rule_requests(cfg.slo_share), n,
                    cfg.workload.name, total, min_span_s=arrivals["min_span_s"], ramp_s=arrivals["ramp_s"])
    try:
        with _server(server, cfg, kind, run) as (url, model, tok, target):
            out.target = target
            plan = LoadPlan(cfg.workload, cfg.slo, n, cfg.burstiness, timeout_s=server.request_timeout_s,
                            tokenizer=tok, **arrivals)
            entries = read_trace(cfg.trace) if cfg.trace else []
            keep = DRIFT_S + (entries[-1].t_s + DRIFT_S if entries else 0.0)   # kept for the drift check and the trace
            end = t0 + total - overhead_s(total)                                # then the client's overhead rows
            store = PointStore(run.path("study_points"), url, model, plan, end - keep, end)
            out.warmup = _warm_up(url, model, store.plan, max(cfg.concurrencies))
            _measure_all(store, cfg, out)
            store.deadline = end - 2.0
            again = store.get(Load.closed(min(cfg.concurrencies)), "drift check", key=f"again:c={min(cfg.concurrencies)}")
            first = store.rows.get(f"c={min(cfg.concurrencies)}")
            if again and first:
                d = drift(first["key"], first["records"], again["records"])
                out.drift = asdict(d) if d else None
            if entries:   # last: it takes what time is left (its requests stop at the study's end)
                out.trace = f"{len(entries)} requests over {entries[-1].t_s:.1f} s"
                store.deadline = end
                store.get(Load("trace", 1.0, name="trace"), "trace replay", trace=entries)
            out.points = [_slim(r) | {"records": r.get("records", [])} for r in store.rows.values()]
            export(out.points, model, run)
    except Exception as e:  # noqa: BLE001 - a server that would not start or fell over: the points kept say so
        out.failed = f"{type(e).__name__}: {e}"[:400]
    out.client_overhead = (client_overhead((1, 4, 16), tokens=32, per_concurrency=2)
                           if t0 + total - time.monotonic() >= overhead_s(total) / 2 else [])
    out.study_s = time.monotonic() - t0
    save(out, run)
    return out


def _measure_all(store: PointStore, cfg: StudyConfig, out: LoadStudy) -> None:
    """The curve, the rate sweep and both capacity searches (with their intervals)."""
    concs = sorted({min(MAX_CONCURRENCY, int(c)) for c in cfg.concurrencies})
    for c in concs:
        store.get(Load.closed(c), "closed-loop curve")
    lo = (store.rows.get(f"c={concs[0]}") or {}).get("request_throughput")
    tops = [(store.rows.get(f"c={c}") or {}).get("request_throughput") for c in concs]   # the curve's own points
    tops = [x for x in tops if x is not None and math.isfinite(x)]
    hi = max(tops) if tops else None   # the highest throughput the curve reached (past a knee it can fall)
    if lo and hi and lo > 0 and hi > 0 and math.isfinite(lo) and math.isfinite(hi):
        for r in sorted(set(np.geomspace(lo, max(hi, lo), cfg.rate_points + 2)[1:-1].round(6))):
            store.get(Load.open(float(r)), "rate sweep")
    out.capacity_concurrency = _capacity(store, cfg, "closed", concs)
    out.capacity_rate = _capacity(store, cfg, "open", concs, lo, hi) if lo and hi else \
        {"capacity": float("nan"), "complete": False, "points": [], "why": "the curve's ends were not measured"}


def _capacity(store: PointStore, cfg: StudyConfig, kind: str, concs, lo=None, hi=None) -> dict:
    """A capacity search over `kind` loads seeded with the points measured, then its bootstrap interval."""
    def known():
        return [{**_slim(r), "load": r["load"]} for r in store.of_kind(kind) if r.get("good_share") is not None]

    def measure_at(x):
        load = Load.closed(int(x)) if kind == "closed" else Load.open(float(x))
        row = store.get(load, "capacity search")
        if row is None:
            raise TimeoutError("the study's time was spent")
        return _slim(row)

    left = max(0.0, store.deadline - time.monotonic())
    if kind == "closed":
        res = search(measure_at, concs[0], cfg.slo_share, limit=min(MAX_CONCURRENCY, max(concs) * 2),
                     time_limit_s=left, known=known())
    else:
        ks = known()
        low = min(ks, key=lambda k: k["load"], default=None)
        start = low["load"] if low and low["good_share"] >= cfg.slo_share else lo / 2
        res = search(measure_at, start, cfg.slo_share, limit=2 * max(lo, hi), integer=False, rel_tol=0.15,
                     time_limit_s=left, known=ks)
    res["points"] = [p for p in res["points"] if "error" not in p or "time was spent" not in p["error"]]
    pts = [(r["load"], meets_of(r, cfg.slo)) for r in store.of_kind(kind)]
    res["interval"] = list(capacity_interval(pts, cfg.slo_share))
    return res


#: the warm-up wave: requests in flight (at most the study's top concurrency)
WARMUP_CONCURRENCY = 4


def _warm_up(url, model, plan: LoadPlan, top: int) -> dict:
    """One closed-loop wave before the first point, excluded from every figure and counted: a launched server's
    first requests run kernels and allocations for the first time (on the H200, one request at a time on a cold
    server read TTFT 52 ms and TPOT 14 ms where the warm sweep read 13 and 7)."""
    c = max(1, min(WARMUP_CONCURRENCY, top))
    t0 = time.monotonic()
    try:
        row = measure(url, model, Load.closed(c), replace(plan, requests=1, ramp_s=0.0))
    except Exception as e:  # noqa: BLE001 - the first point will meet the same fault and keep it
        return {"concurrency": c, "requests": c, "error": f"{type(e).__name__}: {e}"[:200],
                "seconds": time.monotonic() - t0}
    done = sum(1 for r in row["records"] if r["ok"])
    return {"concurrency": c, "requests": len(row["records"]), "completed": done, "seconds": time.monotonic() - t0}


def export(points: list[dict], model: str, run: layout.Run) -> None:
    """Every point also as `vllm bench serve --save-result` JSON (vllm/<key>.json) and in AIPerf's export files
    (aiperf/<key>/profile_export.jsonl and profile_export_aiperf.json); helpers.serving.formats."""
    from .formats import aiperf_record, aiperf_summary, vllm_from_records

    vdir, adir = run.path("vllm_results"), run.path("aiperf_results")
    t0_ns = time.time_ns()
    for p in points:
        if not p.get("records"):
            continue
        name = p["key"].replace("=", "-").replace(":", "-")
        vdir.mkdir(parents=True, exist_ok=True)
        (vdir / f"{name}.json").write_text(json.dumps(vllm_from_records(p, model), default=str))
        (adir / name).mkdir(parents=True, exist_ok=True)
        (adir / name / "profile_export.jsonl").write_text("".join(
            json.dumps(aiperf_record(i, r, t0_ns)) + "\n" for i, r in enumerate(p["records"])))
        (adir / name / "profile_export_aiperf.json").write_text(json.dumps(aiperf_summary(p), default=str))


def save(study: LoadStudy, run: layout.Run) -> None:
    run.save("load_study", asdict(study))
