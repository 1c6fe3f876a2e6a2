"""One typed description of the load a serving point sends, validated once before any request.

    ClosedLoop(concurrency)                        a fixed number of requests in flight (the existing sweeps)
    OpenLoop(rate, burstiness, max_concurrency)    requests arriving on their own schedule: gaps drawn from a
                                                   gamma distribution with shape `burstiness` and mean 1/rate
                                                   (burstiness 1 is Poisson, as `vllm bench serve --burstiness`)
    SLO(ttft_ms, tpot_ms, e2e_ms, min_tokens_per_s) the service level a request must meet to count as good
    LoadSpec(workload, load, slo, ...)             what one point (or a capacity search) takes

Bad input (a zero or negative rate, a burstiness of zero, an SLO string that does not parse, an unknown
metric, a capacity search without an SLO) raises LoadSpecError naming the input and the fix; so does a value past
the bounds the API keeps whatever a chapter allows (issue 47: rate 1e-300, 10^9 requests and burstiness 5e-324,
whose arrival times were NaN, were taken): a rate in [MIN_RATE, MAX_RATE], burstiness in [MIN_BURSTINESS,
MAX_BURSTINESS], at most MAX_REQUESTS requests a point.

A point's time: `time_limit_s` is the point's own limit (no request starts after it; those in flight run on
within the request time limit, `request_timeout_s`, which is `time_limit_s` where not given), so a point ends at
most one request time limit after its own limit (openloop.run_spec, client.Window).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence, Union

import numpy as np

from .client import BenchmarkError, RequestResult, Workload

SLO_METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_ms", "e2e": "e2e_ms",
               "tps": "min_tokens_per_s", "speed": "min_tokens_per_s"}   # speed: GuideLLM's and AIPerf's word


class LoadSpecError(BenchmarkError):
    pass


#: the bounds of an open-loop load the API takes (requests/s; the gamma shape), and the most requests a point sends
MIN_RATE, MAX_RATE = 1e-3, 1e5
MIN_BURSTINESS, MAX_BURSTINESS = 0.01, 100.0
MAX_REQUESTS = 100_000


def _within(name: str, v, lo: float, hi: float, what: str) -> None:
    if not lo <= v <= hi:
        raise LoadSpecError(f"{name} = {str(v)[:40]}: expected {what} from {lo:g} to {hi:g}")


def _positive(name: str, v, allow_none: bool = False) -> None:
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise LoadSpecError(f"{name} = {str(v)[:40]}: expected a positive finite number")


@dataclass(frozen=True)
class ClosedLoop:
    concurrency: int

    def __post_init__(self):
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise LoadSpecError(f"ClosedLoop.concurrency = {str(self.concurrency)[:40]}: "
                                "expected a whole number of requests in flight, 1 or more")


@dataclass(frozen=True)
class OpenLoop:
    rate: float                         # requests per second (nominal)
    burstiness: float = 1.0             # gamma shape: 1 Poisson, < 1 burstier, > 1 more regular
    max_concurrency: int | None = None  # optional cap on requests in flight

    def __post_init__(self):
        _positive("OpenLoop.rate (requests/s)", self.rate)
        _within("OpenLoop.rate", self.rate, MIN_RATE, MAX_RATE, "requests/s")
        if isinstance(self.burstiness, bool) or not isinstance(self.burstiness, (int, float)) \
                or not math.isfinite(self.burstiness) or self.burstiness <= 0:
            raise LoadSpecError(f"OpenLoop.burstiness = {str(self.burstiness)[:40]}: expected a positive gamma shape "
                                "(1 = Poisson arrivals, 0.5 = burstier, 2 = more regular); 0 has no distribution")
        _within("OpenLoop.burstiness", self.burstiness, MIN_BURSTINESS, MAX_BURSTINESS,
                "a gamma shape (1 = Poisson arrivals; below 0.01 the gaps are one long wait)")
        m = self.max_concurrency
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise LoadSpecError(f"OpenLoop.max_concurrency = {str(m)[:40]}: expected None (no cap) or a whole "
                                "number of requests in flight, 1 or more")


@dataclass(frozen=True)
class SLO:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    min_tokens_per_s: float | None = None  # output speed floor per user: 1000 / TPOT

    def __post_init__(self):
        for k in ("ttft_ms", "tpot_ms", "e2e_ms", "min_tokens_per_s"):
            _positive(f"SLO.{k}", getattr(self, k), allow_none=True)

    @property
    def empty(self) -> bool:
        return all(getattr(self, k) is None for k in ("ttft_ms", "tpot_ms", "e2e_ms", "min_tokens_per_s"))

    @classmethod
    def parse(cls, text: str) -> "SLO":
        """'ttft:500 tpot:50 e2el:8000 tps:20' (the `vllm bench serve --goodput` form, plus tps) -> SLO."""
        kw = {}
        for part in str(text).replace(",", " ").split():
            name, sep, value = part.partition(":")
            if not sep:
                raise LoadSpecError(f"SLO {part!r} in {str(text)[:80]!r} does not parse: write METRIC:VALUE, "
                                    f"e.g. 'ttft:500 tpot:50' (milliseconds; tps in tokens/s)")
            if name.lower() not in SLO_METRICS:
                raise LoadSpecError(f"SLO metric {name!r} is unknown: use one of {sorted(SLO_METRICS)}")
            if SLO_METRICS[name.lower()] in kw:
                raise LoadSpecError(f"SLO metric {name!r} is given twice in {str(text)[:80]!r}: give each once")
            try:
                kw[SLO_METRICS[name.lower()]] = float(value)
            except ValueError:
                raise LoadSpecError(f"SLO {part!r}: value {value!r} is not a number") from None
        return cls(**kw)


def tpot_s(r: RequestResult) -> float:
    """(E2E - TTFT) / (output tokens - 1); NaN with fewer than 2 output tokens."""
    if not r.ok or r.output_tokens < 2:
        return float("nan")
    return (r.e2e_s - r.ttft_s) / (r.output_tokens - 1)


def meets(r: RequestResult, slo: SLO) -> bool:
    """Whether one request meets every SLO that is set (a failed request meets none)."""
    if not r.ok:
        return False
    tp = tpot_s(r)
    checks = [(slo.ttft_ms, r.ttft_s * 1e3), (slo.e2e_ms, r.e2e_s * 1e3), (slo.tpot_ms, tp * 1e3)]
    if any(lim is not None and not (v <= lim) for lim, v in checks):  # NaN fails
        return False
    return slo.min_tokens_per_s is None or (tp > 0 and 1.0 / tp >= slo.min_tokens_per_s)


def goodput(results: Sequence[RequestResult], slo: SLO, duration_s: float) -> dict:
    """Share of requests meeting all SLOs, good requests/s and good output tokens/s over the point's span."""
    _positive("goodput duration_s", duration_s)
    if slo.empty:
        raise LoadSpecError("goodput needs at least one SLO: give e.g. SLO.parse('ttft:1000 tpot:50 tps:20')")
    good = [r for r in results if meets(r, slo)]
    n = len(results)
    return {"requests": n, "good_requests": len(good), "good_share": len(good) / n if n else float("nan"),
            "goodput_rps": len(good) / duration_s,
            "good_tokens_per_s": sum(r.output_tokens for r in good) / duration_s}


def arrival_schedule(load: OpenLoop, n: int, seed: int) -> np.ndarray:
    """Start offsets (s) of `n` requests, the first at 0: gamma gaps of shape `burstiness` (CV 1/sqrt(burstiness)),
    scaled so the n - 1 gaps span exactly (n - 1) / rate. A point of a few requests then sends its nominal rate:
    unscaled, 8 draws with one seed sent 1.53x the nominal rate at every point of an H200 sweep, and the
    capacity search reported rates the server never saw. For burstiness 1 this is a Poisson process conditioned
    on its count (uniform order statistics); scaling leaves the gaps' CV as drawn."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_REQUESTS:
        raise LoadSpecError(f"number of requests = {str(n)[:40]}: expected a whole number from 1 to {MAX_REQUESTS}")
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=load.burstiness, scale=1.0 / (load.rate * load.burstiness), size=n - 1)
    if n > 1 and gaps.sum() > 0:
        gaps *= (n - 1) / (load.rate * gaps.sum())
    return np.concatenate([[0.0], np.cumsum(gaps)])


def achieved_rate(starts_s: Sequence[float]) -> float:
    """Requests/s actually sent: (n - 1) / (last start - first start); NaN for fewer than 2 requests."""
    s = sorted(starts_s)
    return (len(s) - 1) / (s[-1] - s[0]) if len(s) > 1 and s[-1] > s[0] else float("nan")


RATE_SHORTFALL = 0.10  # a point whose achieved rate is more than 10 % under nominal is flagged


def rate_short(nominal: float, achieved: float, margin: float = RATE_SHORTFALL) -> bool:
    return not (achieved >= nominal * (1.0 - margin))


Load = Union[ClosedLoop, OpenLoop]


@dataclass(frozen=True)
class LoadSpec:
    workload: Workload
    load: Load
    num_requests: int
    slo: SLO = field(default_factory=SLO)
    seed: int = 0
    time_limit_s: float = 600.0  # the point's own limit: no request starts after it (see the module docstring)
    good_share: float = 0.9     # share of requests inside the SLO a capacity search must hold
    search: bool = False        # a capacity search (needs an SLO)
    request_timeout_s: float | None = None   # each request's time limit (None: time_limit_s)

    def __post_init__(self):
        if not isinstance(self.workload, Workload):
            raise LoadSpecError(f"LoadSpec.workload: expected a Workload (e.g. Workload.parse('256/256')), "
                                f"got {type(self.workload).__name__}")
        if not isinstance(self.load, (ClosedLoop, OpenLoop)):
            raise LoadSpecError(f"LoadSpec.load: expected ClosedLoop(concurrency) or OpenLoop(rate, ...), "
                                f"got {type(self.load).__name__}")
        n = self.num_requests
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_REQUESTS:
            raise LoadSpecError(f"LoadSpec.num_requests = {str(n)[:40]}: expected a whole number from 1 to "
                                f"{MAX_REQUESTS} (requests a point sends)")
        _positive("LoadSpec.time_limit_s", self.time_limit_s)
        _positive("LoadSpec.request_timeout_s", self.request_timeout_s, allow_none=True)
        if not (isinstance(self.good_share, (int, float)) and 0 < self.good_share <= 1):
            raise LoadSpecError(f"LoadSpec.good_share = {str(self.good_share)[:40]}: expected a share in (0, 1]")
        if self.search and self.slo.empty:
            raise LoadSpecError("a capacity search needs an SLO: give at least one of ttft_ms, tpot_ms, e2e_ms, "
                                "min_tokens_per_s (e.g. SLO.parse('ttft:1000 tps:30'))")

    @property
    def request_limit_s(self) -> float:
        """Each request's time limit: `request_timeout_s`, or the point's `time_limit_s` where it is not given."""
        return float(self.request_timeout_s if self.request_timeout_s is not None else self.time_limit_s)

    def schedule(self) -> np.ndarray | None:
        """The seeded arrival offsets for an open-loop point (saved with its rows); None for closed loop."""
        return arrival_schedule(self.load, self.num_requests, self.seed) if isinstance(self.load, OpenLoop) else None
