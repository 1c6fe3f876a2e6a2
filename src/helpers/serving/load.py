"""How load is offered to a server, described once and checked before any request (issue 38): closed-loop
concurrency or an open-loop request rate (Poisson arrivals, or gamma-distributed gaps for burstiness, as
`vllm bench serve --request-rate R --burstiness B` draws them), an optional cap on requests in flight, and
service levels (SLOs) against which each request is good or not.

    spec = LoadSpec.parse(mode="rate", rate=4.0, burstiness=0.5, max_concurrency=16,
                          slo="ttft:1000 tpot:50 e2e:20000 speed:30", seed=7)
    times = arrival_times(spec, n=200)            # seconds after the start, drawn from spec.seed
    good = goodput(records, spec.slos, duration_s)
    cap = capacity(measure, spec.slos, share=0.9, lo=1, hi=256)   # ramp, then bisection

SLOs are milliseconds for `ttft`, `tpot`, `itl` and `e2e` (ceilings), tokens/s per user for `speed` (a floor:
output tokens over the time after the first token, as GuideLLM and AIPerf's output-speed SLO). A request meets
the SLOs when it succeeded and every given one holds. Goodput is the good requests' output tokens per second
of the measured window, and the share of requests that were good (vLLM's `--goodput`, AIPerf's goodput).

The capacity search raises the load point by point (doubling) until the share of good requests falls below
`share`, then bisects between the last point that held and the first that did not, to `resolution`: the
highest load that holds the SLOs, with every point it measured.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

#: the SLO names a spec takes: name -> (unit, kind): "max" a ceiling, "min" a floor
SLO_METRICS = {"ttft": ("ms", "max"), "tpot": ("ms", "max"), "itl": ("ms", "max"), "e2e": ("ms", "max"),
               "speed": ("tokens/s per user", "min")}
MODES = ("closed", "rate")


class LoadSpecError(ValueError):
    """A load description that cannot be offered; the message names the input and what to give instead."""


@dataclass(frozen=True)
class Slo:
    metric: str
    value: float

    @property
    def unit(self) -> str:
        return SLO_METRICS[self.metric][0]

    def holds(self, record: dict) -> bool:
        """Whether a request record (ttft_ms, tpot_ms, itl_ms, e2e_ms, output_tokens, ok) meets this SLO."""
        if self.metric == "speed":
            tokens, e2e, ttft = record.get("output_tokens"), record.get("e2e_ms"), record.get("ttft_ms")
            if not tokens or e2e is None or ttft is None or e2e <= ttft:
                return False
            return (tokens - 1) / ((e2e - ttft) / 1e3) >= self.value if tokens > 1 else False
        v = record.get(f"{self.metric}_ms")
        return v is not None and not math.isnan(v) and v <= self.value


def parse_slos(text: str) -> tuple[Slo, ...]:
    """'ttft:1000 tpot:50 speed:30' (spaces or commas between) as SLOs; LoadSpecError naming a bad item."""
    out = []
    for item in [x for x in re.split(r"[\s,]+", str(text).strip()) if x]:
        m = re.fullmatch(r"([a-z0-9]+):([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)", item)
        if not m:
            raise LoadSpecError(f"SLO {item!r} does not parse: write METRIC:VALUE, e.g. 'ttft:1000 tpot:50' "
                                f"(metrics {', '.join(SLO_METRICS)})")
        name, value = m.group(1), float(m.group(2))
        if name not in SLO_METRICS:
            raise LoadSpecError(f"SLO metric {name!r} is unknown: use one of {', '.join(SLO_METRICS)} "
                                f"(ms for the latencies, tokens/s per user for speed)")
        if value <= 0:
            raise LoadSpecError(f"SLO {item!r}: the value must be above 0")
        if any(s.metric == name for s in out):
            raise LoadSpecError(f"SLO metric {name!r} is given twice in {text!r}")
        out.append(Slo(name, value))
    return tuple(out)


@dataclass(frozen=True)
class LoadSpec:
    """One way of offering load, validated: `closed` keeps `concurrency` requests in flight; `rate` sends
    requests at `rate` per second on average, gaps drawn from a gamma distribution of shape `burstiness`
    (1: Poisson; below 1 burstier; above 1 steadier), at most `max_concurrency` in flight (None: no cap)."""

    mode: str = "closed"
    concurrency: int | None = None
    rate: float | None = None
    burstiness: float = 1.0
    max_concurrency: int | None = None
    slos: tuple[Slo, ...] = field(default_factory=tuple)
    seed: int = 0

    @classmethod
    def parse(cls, mode: str = "closed", concurrency=None, rate=None, burstiness=1.0, max_concurrency=None,
              slo: str = "", seed: int = 0) -> "LoadSpec":
        if mode not in MODES:
            raise LoadSpecError(f"load mode {mode!r}: expected one of {MODES}")
        if mode == "closed":
            if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
                raise LoadSpecError(f"concurrency {concurrency!r}: closed-loop load needs a whole number of "
                                    f"requests in flight, 1 or more")
        else:
            if rate is None or isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0 \
                    or not math.isfinite(rate):
                raise LoadSpecError(f"request rate {rate!r}: give requests per second above 0 (e.g. 2.5)")
        if isinstance(burstiness, bool) or not isinstance(burstiness, (int, float)) or not burstiness > 0 \
                or not math.isfinite(burstiness):
            raise LoadSpecError(f"burstiness {burstiness!r}: give a number above 0 (1 is Poisson arrivals; "
                                f"below 1 burstier, above 1 steadier)")
        if max_concurrency is not None and (not isinstance(max_concurrency, int) or max_concurrency < 1):
            raise LoadSpecError(f"max_concurrency {max_concurrency!r}: give a whole number of 1 or more, or none")
        return cls(mode, concurrency, None if rate is None else float(rate), float(burstiness), max_concurrency,
                   parse_slos(slo), int(seed))

    def needs_slos(self, what: str) -> None:
        """Refuse `what` (a capacity search, a goodput figure) without SLOs, naming how to give them."""
        if not self.slos:
            raise LoadSpecError(f"{what} needs at least one SLO: give slo='ttft:MS tpot:MS e2e:MS speed:TOK_S'")


def arrival_times(spec: LoadSpec, n: int) -> np.ndarray:
    """`n` arrival times in seconds from the start for a rate spec: gamma gaps of shape `burstiness` and mean
    1 / rate (exponential, a Poisson process, at burstiness 1), drawn from the spec's seed."""
    if spec.mode != "rate":
        raise LoadSpecError("arrival times belong to a rate spec; a closed-loop spec sends the next request when "
                            "one finishes")
    rng = np.random.default_rng(spec.seed)
    shape = spec.burstiness
    gaps = rng.gamma(shape, 1.0 / (spec.rate * shape), size=int(n))
    return np.cumsum(gaps)


def achieved_rate(sent_at_s: np.ndarray) -> float:
    """Requests per second actually sent: (n - 1) over the span between the first and the last send."""
    t = np.sort(np.asarray(sent_at_s, dtype=float))
    return float((len(t) - 1) / (t[-1] - t[0])) if len(t) > 1 and t[-1] > t[0] else float("nan")


def rate_shortfall(nominal: float, achieved: float, margin: float = 0.10) -> str | None:
    """Why a point did not send the rate it reports (achieved below nominal by more than `margin`), or None."""
    if not math.isfinite(achieved) or achieved < (1 - margin) * nominal:
        return (f"sent {achieved:.2f} requests/s against the nominal {nominal:.2f} (more than {100 * margin:.0f} % "
                f"short): the client, a concurrency cap or the server held the rate back; read the point at the "
                f"achieved rate")
    return None


def goodput(records: list[dict], slos: tuple[Slo, ...], duration_s: float) -> dict:
    """Good requests (succeeded and every SLO held): their share of all requests and their output tokens per
    second over the measured window."""
    if not slos:
        raise LoadSpecError("goodput needs at least one SLO")
    if duration_s <= 0:
        raise LoadSpecError(f"goodput over {duration_s} s: the measured window must be longer than 0 s")
    good = [r for r in records if r.get("ok") and all(s.holds(r) for s in slos)]
    return {"requests": len(records), "good": len(good), "good_share": len(good) / len(records) if records else 0.0,
            "good_tok_s": sum(int(r.get("output_tokens") or 0) for r in good) / duration_s}


@dataclass(frozen=True)
class Capacity:
    """The highest load that held `share` of requests inside the SLOs, and every point measured to find it."""
    load: float | None
    share: float
    points: tuple[tuple[float, float], ...]     # (load, good share), in the order measured
    why: str


def capacity(measure: Callable[[float], float], share: float, lo: float, hi: float, resolution: float = 0.1,
             integer: bool = True, budget: int = 16) -> Capacity:
    """Ramp the load from `lo` (doubling) until `measure(load)` (the share of good requests there) falls below
    `share` or `hi` is reached, then bisect between the last load that held and the first that did not, until
    they are within `resolution` (relative) or `budget` points were measured."""
    if not 0 < share <= 1:
        raise LoadSpecError(f"share {share!r}: the share of requests inside the SLOs to hold, in (0, 1]")
    if not 0 < lo <= hi:
        raise LoadSpecError(f"capacity search from {lo!r} to {hi!r}: expected 0 < lo <= hi")
    points: list[tuple[float, float]] = []

    def at(x: float) -> bool:
        x = float(round(x)) if integer else x
        s = float(measure(x))
        points.append((x, s))
        return s >= share

    if not at(lo):
        return Capacity(None, share, tuple(points), f"even {lo:g} did not hold {100 * share:.0f} % inside the SLOs")
    good, bad = lo, None
    while bad is None and len(points) < budget:
        nxt = min(hi, good * 2)
        if nxt <= good:
            return Capacity(good, share, tuple(points), f"held up to the search's top, {hi:g}")
        if at(nxt):
            good = nxt
        else:
            bad = nxt
    while bad is not None and len(points) < budget and (bad - good) / good > resolution and \
            (not integer or bad - good > 1):
        mid = (good + bad) / 2
        if integer:
            mid = float(round(mid))
            if mid in (good, bad):
                break
        if at(mid):
            good = mid
        else:
            bad = mid
    why = (f"held at {good:g}, not at {bad:g}" if bad is not None else f"held at {good:g}; the point budget "
           f"({budget}) ended the ramp")
    return Capacity(good, share, tuple(points), why)
