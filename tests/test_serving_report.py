"""The serving chapters' derived tables: the seeds' disagreements settled from the recorded data."""
import pandas as pd
import pytest

from helpers.serving import report


def test_total_disagreement_is_two_consistent_runs():
    t = report.total_disagreement()
    assert set(t.experiment) == {"first_baseline", "sweep_256_256"}
    assert t["total_tok_s (recorded)"].nunique() == 2          # the two totals the seeds disagree on
    ratios = t["total/output (derived)"]
    assert ratios.max() / ratios.min() - 1 < 0.01                # each total agrees with its own output figure


def test_saturation_claims_tie_to_workloads():
    s = report.saturation_claims()
    assert {"256/256", "128/512", "not stated"} <= set(s.workload)
    approx = s[(s.workload == "not stated") & s.value.notna()].value.iloc[0]
    wl, gap = report.nearest_workload(float(approx), s)
    assert wl == "128/512" and gap < 0.05


def test_headline_uses_the_sweep_and_live_rows():
    rec = report.recorded_points()
    live = pd.DataFrame({"variant": ["v"] * 3, "workload": ["8/8"] * 3, "concurrency": [1, 4, 16],
                         "output_throughput": [10.0, 35.0, 30.0]})
    h = report.headline_table(rec, live, "here")
    sweep = rec[(rec.experiment == "sweep_256_256") & (rec.metric == "output_throughput") & (rec.concurrency == 64)]
    assert h.iloc[0].saturated_tok_s == pytest.approx(float(sweep.value.iloc[0]))
    m = h[h.who == "measured: here"].iloc[0]
    assert m.max_concurrency == 4 and m["scaling (derived)"] == pytest.approx(3.5)


def test_spread_and_verdicts():
    df = pd.DataFrame({"runner": ["a"] * 3 + ["b"] * 3 + ["c"] * 3, "workload": ["w"] * 9, "concurrency": [1] * 9,
                       "output_throughput": [100, 102, 98, 101, 99, 103, 150, 152, 149]})
    sp = report.repeat_spread(df)
    v = report.distinguishable(sp).set_index(["a", "b"])
    assert v.loc[("a", "b"), "verdict"] == "within noise"
    assert v.loc[("a", "c"), "verdict"] == "a real difference"
