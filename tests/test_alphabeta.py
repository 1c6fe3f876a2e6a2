"""The alpha-beta fit recovers known parameters from synthetic sweeps and rejects bad input."""
import math

import numpy as np
import pytest

from helpers.interconnect import fits as alphabeta


def sweep(alpha_us, beta_GBps, sizes):
    return np.asarray(sizes, float), alpha_us + np.asarray(sizes, float) / (beta_GBps * 1e3)


@pytest.mark.parametrize("alpha,beta", [(2.0, 25.0), (12.5, 30.0), (0.4, 900.0)])
def test_exact_data_recovers_alpha_and_beta(alpha, beta):
    s, t = sweep(alpha, beta, 2.0 ** np.arange(4, 28))
    f = alphabeta.fit(s, t)
    assert f.alpha_us == pytest.approx(alpha, rel=1e-6)
    assert f.beta_GBps == pytest.approx(beta, rel=1e-6)
    assert f.max_rel_err < 1e-9 and f.n_points == len(s)
    assert f.time_us(s) == pytest.approx(t, rel=1e-9)


def test_noisy_data_within_noise_and_error_reported():
    rng = np.random.default_rng(0)
    s, t = sweep(10.0, 40.0, 2.0 ** np.arange(6, 27))
    noisy = t * (1 + rng.normal(0, 0.02, len(t)))
    f = alphabeta.fit(s, noisy)
    assert f.alpha_us == pytest.approx(10.0, rel=0.05)
    assert f.beta_GBps == pytest.approx(40.0, rel=0.05)
    assert 0.001 < f.median_rel_err < 0.05
    assert f.max_rel_err >= f.median_rel_err


def test_pure_latency_gives_infinite_bandwidth():
    f = alphabeta.fit([8, 64, 512], [5.0, 5.0, 5.0])
    assert math.isinf(f.beta_GBps) and f.alpha_us == pytest.approx(5.0)


def test_a_curve_the_line_cannot_follow_shows_a_large_error():
    s = 2.0 ** np.arange(4, 24)
    t = 1.0 + (s / 1e4) ** 2          # quadratic: not alpha-beta
    assert alphabeta.fit(s, t).max_rel_err > 0.3


@pytest.mark.parametrize("sizes,times,msg", [
    ([1], [1.0], "at least 2"),
    ([1, 2], [1.0], "same length"),
    ([0, 2], [1.0, 2.0], "positive"),
    ([4, 4], [1.0, 2.0], "distinct"),
    ([1, float("nan")], [1.0, 2.0], "finite"),
])
def test_bad_input_is_named(sizes, times, msg):
    with pytest.raises(ValueError, match=msg):
        alphabeta.fit(sizes, times)


def test_bandwidth_units():
    # 1e9 bytes in 1e6 us (one second) is 1 GB/s
    assert alphabeta.bandwidth_GBps(1e9, 1e6) == pytest.approx(1.0)
