"""helpers.serving.load (issue 38, its first part): the load description checked before any request, the
arrival schedule's distribution, goodput against planted latencies, the capacity search against a stand-in
whose service level breaks at a known load."""
import numpy as np
import pytest

from helpers.serving import load as ld


@pytest.mark.parametrize("burstiness,cv", [(1.0, 1.0), (0.5, 2 ** 0.5)])
def test_the_arrival_schedule_has_the_rate_and_the_burstiness_asked(burstiness, cv):
    spec = ld.LoadSpec.parse(mode="rate", rate=4.0, burstiness=burstiness, seed=11)
    t = ld.arrival_times(spec, 20000)
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert gaps.mean() == pytest.approx(0.25, rel=0.03)                 # 1 / rate
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)      # gamma: 1 / sqrt(shape)
    assert np.array_equal(t, ld.arrival_times(spec, 20000))              # drawn from the recorded seed
    assert ld.achieved_rate(t) == pytest.approx(4.0, rel=0.03)
    assert ld.rate_shortfall(4.0, 3.9) is None and "short" in ld.rate_shortfall(4.0, 3.0)


def _rec(ttft, e2e, tokens=65, ok=True):
    tpot = (e2e - ttft) / (tokens - 1)
    return {"ok": ok, "ttft_ms": ttft, "e2e_ms": e2e, "tpot_ms": tpot, "itl_ms": tpot, "output_tokens": tokens}


def test_goodput_counts_only_requests_inside_every_slo():
    slos = ld.parse_slos("ttft:1000, tpot:50 speed:25")
    records = [_rec(500, 2000),            # tpot 23.4 ms, speed 42.7 tok/s: good
               _rec(1500, 2500),           # ttft over 1 s
               _rec(500, 4500),            # tpot 62.5 ms, speed 16: over both
               _rec(200, 1000, ok=False),  # failed
               _rec(900, 3100)]            # tpot 34.4 ms, speed 29: good
    g = ld.goodput(records, slos, duration_s=10.0)
    assert (g["requests"], g["good"]) == (5, 2) and g["good_share"] == pytest.approx(0.4)
    assert g["good_tok_s"] == pytest.approx(130 / 10.0)


def test_the_capacity_search_finds_where_a_stand_in_breaks_its_slo():
    """A stand-in whose requests all meet the SLO up to 37 users and none above: ramp 1, 2, 4 ... 64, then
    bisection to 37, every point kept."""
    measured = []

    def share(users):
        measured.append(users)
        return 1.0 if users <= 37 else 0.2
    cap = ld.capacity(share, 0.9, lo=1, hi=256, integer=True, resolution=0.0)
    assert cap.load == 37 and (64.0, 0.2) in cap.points and "held at 37, not at 38" in cap.why
    assert [p[0] for p in cap.points] == measured and len(measured) <= 16
    coarse = ld.capacity(lambda u: 1.0 if u <= 37 else 0.2, 0.9, lo=1, hi=256)      # to 10 %: fewer points
    assert 37 / 1.1 <= coarse.load <= 37 and len(coarse.points) < len(cap.points)
    assert ld.capacity(lambda u: 0.0, 0.9, 1, 256).load is None
    assert ld.capacity(lambda u: 1.0, 0.9, 1, 8).load == 8


@pytest.mark.parametrize("kwargs,match", [
    ({"mode": "rate", "rate": 0}, "request rate 0"),
    ({"mode": "rate", "rate": -2.0}, "request rate -2.0"),
    ({"mode": "rate", "rate": 2.0, "burstiness": 0}, "burstiness 0"),
    ({"mode": "rate", "rate": 2.0, "slo": "ttft=1000"}, "does not parse"),
    ({"mode": "rate", "rate": 2.0, "slo": "latency:5"}, "unknown"),
    ({"mode": "closed", "concurrency": 0}, "concurrency 0"),
    ({"mode": "open"}, "load mode 'open'"),
])
def test_each_bad_load_input_is_refused_before_any_request(kwargs, match):
    with pytest.raises(ld.LoadSpecError, match=match):
        ld.LoadSpec.parse(**kwargs)


def test_a_capacity_search_or_goodput_without_an_slo_is_refused():
    spec = ld.LoadSpec.parse(mode="closed", concurrency=4)
    with pytest.raises(ld.LoadSpecError, match="capacity search needs at least one SLO"):
        spec.needs_slos("a capacity search")
    with pytest.raises(ld.LoadSpecError, match="goodput needs at least one SLO"):
        ld.goodput([_rec(1, 2)], (), 1.0)
