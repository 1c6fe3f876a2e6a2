"""The held-out calibration (helpers.model.verdict.calibration): percentiles read from the registered quantiles,
every holdout with a band registered by a commit before the comparison, and the summary's arithmetic."""
from __future__ import annotations

import pandas as pd
import pytest

from helpers.core import recorded
from helpers.model.verdict import calibration as cb
from helpers.model.verdict.ranges import VerdictInputError

Q = ";".join(str(v) for v in range(100, 121))      # 0 % at 100, 5 % at 101, ..., 100 % at 120


def test_percentile_reads_the_registered_quantiles():
    assert cb.percentile_in(Q, 99) == 0.0
    assert cb.percentile_in(Q, 130) == 100.0
    assert cb.percentile_in(Q, 110) == pytest.approx(50.0)
    assert cb.percentile_in(Q, 110.5) == pytest.approx(52.5)
    with pytest.raises(VerdictInputError, match="21"):
        cb.percentile_in("1;2;3", 2)


def test_every_holdout_has_a_band_registered_by_a_named_commit():
    b = recorded.load("reference/holdout_bands.csv")
    h = recorded.load("reference/holdouts.csv")
    assert set(b["key"]) == set(h["key"])
    assert b["registered"].str.match(r"commit [0-9a-f]{7} \(\d{4}-\d{2}-\d{2}\)").all()
    assert h["speculative"].str.startswith("off").all()
    assert h["system"].nunique() >= 2 and len(h) >= 8


def test_summary_counts_inside_and_errors():
    t = pd.DataFrame({"key": ["a", "b", "c"], "system": ["x", "x", "y"], "observed": [100.0, 100.0, 100.0],
                      "point": [110.0, 95.0, 150.0], "band_low": [90.0, 90.0, 140.0], "band_high": [120.0, 99.0, 160.0],
                      "rel_err": [0.10, -0.05, 0.50], "percentile": [30.0, 97.0, 0.0],
                      "inside": [True, False, False]})
    c = cb.calibration(t)
    assert (c["n"], c["n_systems"], c["n_inside"]) == (3, 2, 1)
    assert c["median_abs_err"] == pytest.approx(0.10)
    assert c["worst_key"] == "c" and c["worst_abs_err"] == pytest.approx(0.50)
    assert (c["n_below"], c["n_above"]) == (1, 1)
    assert list(cb.by_system(t)["n"]) == [2, 1]


def test_a_holdout_without_a_registered_band_is_refused(monkeypatch):
    real = recorded.load

    def fake(name):
        df = real(name)
        return df[df["key"] != "b200_c1"] if name.endswith("holdout_bands.csv") else df
    monkeypatch.setattr(cb.recorded, "load", fake)
    with pytest.raises(VerdictInputError, match="b200_c1"):
        cb.holdout_table()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_registered_bands_are_what_the_predictor_gives_today():
    """A change to the predictor after the comparison shows up here: then the page must show the band it replaced
    and why (house style), and this test is updated with that history, not silently."""
    from helpers.model.verdict import predictor as pr

    h = recorded.load("reference/holdouts.csv").set_index("key")
    for b in recorded.load("reference/holdout_bands.csv").itertuples():
        r = h.loc[b.key]
        s = pr.EngineSettings(**{**pr.as_dict(pr.deployment_settings(r["deployment"])), "checkpoint": r["checkpoint"]})
        p = pr.predict(r["model"], r["system"], 8, int(r["concurrency"]), int(r["context"]), s)
        scale = 1.0 / int(r["concurrency"]) if b.per == "stream" else 1.0
        assert p.tok_s * scale == pytest.approx(float(b.point), rel=1e-4), b.key
        assert (p.band[0] * scale, p.band[1] * scale) == pytest.approx((float(b.band_low), float(b.band_high)), rel=1e-4)
