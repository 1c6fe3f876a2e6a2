"""The typed load description: bad input refused before any request, the seeded arrival schedule's
distribution, goodput counted against planted latencies."""
import numpy as np
import pytest

from helpers.serving.client import RequestResult, Workload
from helpers.serving.loadspec import (SLO, ClosedLoop, LoadSpec, LoadSpecError, OpenLoop, achieved_rate,
                                      arrival_schedule, goodput, meets, rate_short, tpot_s)

W = Workload(16, 8)


@pytest.mark.parametrize("burstiness", [1.0, 0.5])
def test_schedule_mean_gap_and_cv(burstiness):
    rate = 4.0
    t = arrival_schedule(OpenLoop(rate, burstiness), 20001, seed=7)
    gaps = np.diff(t)
    assert t[0] == 0.0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    # gamma with shape k has CV 1/sqrt(k): 1 for Poisson, sqrt(2) for burstiness 0.5
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.05)


@pytest.mark.parametrize("burstiness", [1.0, 0.5])
def test_a_short_schedule_sends_its_nominal_rate_whatever_the_seed(burstiness):
    """8 requests (a load-study point): every seed's schedule spans exactly 7 / rate, the gaps still differ."""
    for seed in range(20):
        t = arrival_schedule(OpenLoop(1.2, burstiness), 8, seed=seed)
        assert achieved_rate(t) == pytest.approx(1.2, rel=1e-9)
    a, b = (np.diff(arrival_schedule(OpenLoop(1.2, burstiness), 8, seed=s)) for s in (0, 1))
    assert not np.allclose(a, b) and a.std() > 0


def test_schedule_is_seeded():
    a = arrival_schedule(OpenLoop(2.0), 50, seed=3)
    assert np.array_equal(a, arrival_schedule(OpenLoop(2.0), 50, seed=3))
    assert not np.array_equal(a, arrival_schedule(OpenLoop(2.0), 50, seed=4))
    spec = LoadSpec(W, OpenLoop(2.0), num_requests=50, seed=3)
    assert np.array_equal(spec.schedule(), a)
    assert LoadSpec(W, ClosedLoop(2), num_requests=5).schedule() is None


def test_achieved_rate_and_shortfall_flag():
    assert achieved_rate([0.0, 0.5, 1.0, 1.5]) == pytest.approx(2.0)
    assert not rate_short(2.0, 1.85)      # 7.5 % short: inside the 10 % margin
    assert rate_short(2.0, 1.7)           # 15 % short
    assert rate_short(2.0, float("nan"))


def _req(ttft_ms, e2e_ms, out, ok=True):
    return RequestResult(ok=ok, ttft_s=ttft_ms / 1e3, e2e_s=e2e_ms / 1e3, output_tokens=out)


def test_goodput_against_planted_latencies():
    slo = SLO.parse("ttft:500 tpot:50")
    reqs = [_req(100, 100 + 9 * 40, 10),    # good: tpot 40 ms
            _req(600, 600 + 9 * 40, 10),    # ttft too slow
            _req(100, 100 + 9 * 60, 10),    # tpot 60 ms too slow
            _req(400, 400 + 4 * 50, 5),     # good: exactly on both limits
            _req(10, 20, 10, ok=False)]     # failed: never good
    assert tpot_s(reqs[0]) == pytest.approx(0.040)
    assert [meets(r, slo) for r in reqs] == [True, False, False, True, False]
    g = goodput(reqs, slo, duration_s=2.0)
    assert g["good_requests"] == 2 and g["good_share"] == pytest.approx(0.4)
    assert g["good_tokens_per_s"] == pytest.approx((10 + 5) / 2.0)
    # the output-speed floor: 40 ms/token is 25 tokens/s
    assert meets(reqs[0], SLO(min_tokens_per_s=25)) and not meets(reqs[0], SLO(min_tokens_per_s=26))
    assert SLO.parse("e2el:400").e2e_ms == 400 and not meets(reqs[0], SLO(e2e_ms=400))


@pytest.mark.parametrize("make, words", [
    (lambda: OpenLoop(0), "rate"),
    (lambda: OpenLoop(-1.5), "rate"),
    (lambda: OpenLoop(float("inf")), "rate"),
    (lambda: OpenLoop(1.0, burstiness=0), "burstiness"),
    (lambda: OpenLoop(1.0, max_concurrency=0), "OpenLoop.max_concurrency"),
    (lambda: ClosedLoop(0), "concurrency"),
    (lambda: SLO.parse("ttft=500"), "does not parse"),
    (lambda: SLO.parse("ttft:fast"), "not a number"),
    (lambda: SLO.parse("latency:500"), "unknown"),
    (lambda: SLO(ttft_ms=-1), "ttft_ms"),
    (lambda: LoadSpec(W, ClosedLoop(1), num_requests=4, search=True), "needs an SLO"),
    (lambda: LoadSpec(W, ClosedLoop(1), num_requests=0), "num_requests"),
    (lambda: LoadSpec(W, {"concurrency": 1}, num_requests=4), "ClosedLoop"),
    (lambda: LoadSpec(W, ClosedLoop(1), num_requests=4, good_share=1.5), "good_share"),
])
def test_bad_input_refused(make, words):
    with pytest.raises(LoadSpecError, match=words):
        make()


def test_search_with_slo_accepted():
    spec = LoadSpec(W, OpenLoop(2.0, 0.5, max_concurrency=8), num_requests=10, slo=SLO.parse("ttft:1000 tps:30"),
                    search=True)
    assert spec.slo.min_tokens_per_s == 30 and spec.load.max_concurrency == 8


# ------------------------------------------------------------------ folded from tests/test_serving_load.py
# (helpers.serving.load, a second description of the same load, was removed; its assertions that still apply)

def test_the_drawn_schedule_sends_its_rate_and_the_shortfall_is_flagged():
    t = arrival_schedule(OpenLoop(4.0, 1.0), 20000, seed=11)
    assert achieved_rate(t) == pytest.approx(4.0, rel=0.03)
    assert not rate_short(4.0, 3.9) and rate_short(4.0, 3.0)


def test_goodput_counts_only_requests_inside_every_slo_with_a_speed_floor():
    slo = SLO.parse("ttft:1000, tpot:50 speed:25")      # commas or spaces; speed is tokens/s per user
    assert slo.min_tokens_per_s == 25
    reqs = [_req(500, 2000, 65),             # tpot 23.4 ms, speed 42.7 tokens/s: good
            _req(1500, 2500, 65),            # ttft over 1 s
            _req(500, 4500, 65),             # tpot 62.5 ms, speed 16: over both
            _req(200, 1000, 65, ok=False),   # failed
            _req(900, 3100, 65)]             # tpot 34.4 ms, speed 29: good
    g = goodput(reqs, slo, duration_s=10.0)
    assert (g["requests"], g["good_requests"]) == (5, 2) and g["good_share"] == pytest.approx(0.4)
    assert g["good_tokens_per_s"] == pytest.approx(130 / 10.0)


@pytest.mark.parametrize("make, words", [
    (lambda: OpenLoop(0), r"rate \(requests/s\) = 0"),
    (lambda: OpenLoop(-2.0), r"rate \(requests/s\) = -2.0"),
    (lambda: SLO.parse("latency:5"), "'latency' is unknown"),
    (lambda: SLO.parse("ttft:500 ttft:600"), "given twice"),
    (lambda: goodput([_req(1, 2, 2)], SLO(), 1.0), "goodput needs at least one SLO"),
])
def test_each_bad_input_names_itself(make, words):
    with pytest.raises(LoadSpecError, match=words):
        make()
