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


def _live_matrix():
    return pd.DataFrame({"name": ["healthy", "nan-weights"], "outcome": ["ok", "nan"], "wall_s": [5.0, 7.5],
                         "log_excerpt": ["", "a\nprobability tensor contains either inf, nan"],
                         "backend_lines": [[], ["attention backend: sdpa"]]})


def test_matrix_phrases_live_and_not():
    from helpers.core import recorded

    m = recorded.load("recorded/backend_matrix.csv")
    assert report.matrix_status(None, "", "no GPU") == "no live matrix (no GPU)"
    live = _live_matrix()
    assert report.matrix_status(live, "here", "") == ("2 configurations were launched live (here), ending in 2 "
                                                       "different outcomes in 12 s")
    assert report.matrix_live_facts(None, "") == {} and report.matrix_live_facts(live, "here")["live_n"] == 2
    rows = report.matrix_rows(m, live)
    assert len(rows) == len(m) + 2 and rows[-1] == ("nan-weights", "nan", "measured")
    logs = report.failure_logs(live)
    assert "**nan-weights** (nan)" in logs and "healthy" not in logs and "attention backend: sdpa" in logs


def test_sweep_and_profile_phrases():
    live = pd.DataFrame({"variant": ["v", "v"], "workload": ["8/8", "8/8"], "concurrency": [1, 4],
                         "output_throughput": [10.0, 30.0], "failed": [0, 1], "duration_s": [2.0, 3.0]})
    assert report.sweep_status(None, "", "why") == "no live sweep (why)"
    assert report.sweep_status(live, "here", "") == "2 points were swept live on here, with 1 failed requests in 5 s of benchmarking"
    head = report.headline_table(report.recorded_points(), live, "here")
    assert report.live_headline(head)["live_scaling"] == pytest.approx(3.0)
    assert "scaled 3.0x" in report.scaling_phrase(head, "") and "concurrency 4" in report.scaling_phrase(head, "")
    recorded_only = report.headline_table(report.recorded_points(), None, "here")
    assert report.live_headline(recorded_only) == {} and report.scaling_phrase(recorded_only, "x") == "no live sweep (x)"
    assert report.profile_phrase(None, "no NVML") == "none was sampled (no NVML)"
    prof = pd.DataFrame({"concurrency": [1, 16], "util_gpu_pct": [40.0, 97.0], "util_mem_pct": [10.0, 30.0],
                         "power_pct_of_limit": [30.0, 55.0], "n_samples": [5, 9]})
    assert report.profile_phrase(prof, "").startswith("at concurrency 16 this machine's GPU was busy 97 %")


def test_runner_phrase():
    df = pd.DataFrame({"runner": ["a"] * 2 + ["b"] * 2, "workload": ["w"] * 4, "concurrency": [1] * 4,
                       "output_throughput": [100, 110, 200, 210]})
    sp = report.repeat_spread(df)
    v = report.distinguishable(sp)
    assert report.runner_live_facts(sp, v) == {"live_max_noise_pct": pytest.approx(100 * 10 / 105),
                                              "live_n_real": 1, "live_n_pairs": 1}
    assert "1 of 1 runner pairs differ" in report.runner_phrase(sp, v, 2, "")
    assert report.runner_phrase(None, None, 2, "no engine") == "no live comparison (no engine)"
    refused = pd.DataFrame({"runner": ["a"], "outcome": ["unsupported"], "detail": [""]})
    assert report.runner_phrase(None, None, 2, "", refused) == "no runner served, so none was swept (a: unsupported)"


def test_serving_figures():
    from helpers.core import plotting
    from helpers.serving import classify

    rec = report.recorded_points()
    live = pd.DataFrame({"variant": ["v"] * 2, "workload": ["8/8"] * 2, "concurrency": [1, 4],
                         "output_throughput": [10.0, 30.0]})
    for per_stream in (False, True):
        ax = plotting.serving_sweeps(rec, live, report.server_log_point(), per_stream).axes[0]
        assert ax.get_xscale() == "log" and any("measured: this machine: v" in t.get_text()
                                                for t in ax.get_legend().get_texts())
    fig = plotting.outcome_matrix([("a", "ok", "recorded"), ("b", "nan", "measured")], classify.OUTCOMES)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["recorded: a", "measured: b"]
    with pytest.raises(ValueError, match="'exploded'"):
        plotting.outcome_matrix([("a", "exploded", "measured")], classify.OUTCOMES)
    rr = report.recorded_runners(report.recorded_serving())
    assert plotting.runner_spread(rr[rr.metric == "output_throughput"], None).axes[0].get_yscale() == "log"
