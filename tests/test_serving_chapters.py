"""The serving chapters' modules (helpers.chapters.nan_crash, baselines_tuning, moe_runners): their
parameter specs against the notebooks' parameters cells, and their derived tables: the seeds'
disagreements settled from the recorded data."""
import dataclasses

import pandas as pd
import pytest

from helpers.chapters import baselines_tuning as bt, moe_runners as mr, nan_crash as nc
from helpers.core import params


def test_each_chapter_validates_its_parameters_cell_with_its_spec():
    import json

    from helpers import repo_root
    from papermill.translators import PythonTranslator

    for stem, specs in (("02_nan_crash", nc.PARAMS), ("03_baselines_tuning", bt.PARAMS),
                        ("04_moe_runners", mr.PARAMS)):
        nb = json.loads((repo_root() / "notebooks" / f"{stem}.ipynb").read_text())
        cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
        names = [p.name for p in PythonTranslator.inspect({"source": "".join(cell["source"])})]
        assert set(names) == set(specs), stem
        ns = {}
        exec("".join(cell["source"]), ns)
        params.validate({k: ns[k] for k in names}, specs)  # the committed defaults are valid


def test_total_disagreement_is_two_consistent_runs():
    t = bt.total_disagreement()
    assert set(t.experiment) == {"first_baseline", "sweep_256_256"}
    assert t["total_tok_s (recorded)"].nunique() == 2          # the two totals the seeds disagree on
    ratios = t["total/output (derived)"]
    assert ratios.max() / ratios.min() - 1 < 0.01                # each total agrees with its own output figure


def test_saturation_claims_tie_to_workloads():
    s = bt.saturation_claims()
    assert {"256/256", "128/512", "not stated"} <= set(s.workload)
    approx = s[(s.workload == "not stated") & s.value.notna()].value.iloc[0]
    wl, gap = bt.nearest_workload(float(approx), s)
    assert wl == "128/512" and gap < 0.05


def test_headline_uses_the_sweep_and_live_rows():
    rec = bt.recorded_points()
    live = pd.DataFrame({"variant": ["v"] * 3, "workload": ["8/8"] * 3, "concurrency": [1, 4, 16],
                         "output_throughput": [10.0, 35.0, 30.0]})
    h = bt.headline_table(rec, live, "here")
    sweep = rec[(rec.experiment == "sweep_256_256") & (rec.metric == "output_throughput") & (rec.concurrency == 64)]
    assert h.iloc[0].saturated_tok_s == pytest.approx(float(sweep.value.iloc[0]))
    m = h[h.who == "measured: here"].iloc[0]
    assert m.max_concurrency == 4 and m["scaling (derived)"] == pytest.approx(3.5)


def test_spread_and_verdicts():
    df = pd.DataFrame({"runner": ["a"] * 3 + ["b"] * 3 + ["c"] * 3, "workload": ["w"] * 9, "concurrency": [1] * 9,
                       "output_throughput": [100, 102, 98, 101, 99, 103, 150, 152, 149]})
    sp = mr.repeat_spread(df)
    v = mr.distinguishable(sp).set_index(["a", "b"])
    assert v.loc[("a", "b"), "verdict"] == "within noise"
    assert v.loc[("a", "c"), "verdict"] == "a real difference"


def _live_matrix():
    return pd.DataFrame({"name": ["healthy", "nan-weights"], "outcome": ["ok", "nan"], "wall_s": [5.0, 7.5],
                         "log_excerpt": ["", "a\nprobability tensor contains either inf, nan"],
                         "backend_lines": [[], ["attention backend: sdpa"]]})


def test_matrix_phrases_live_and_not():
    from helpers.core import recorded

    m = recorded.load("recorded/backend_matrix.csv")
    assert nc.matrix_status(None, "", "no GPU (details)") == "no live matrix: no GPU"
    live = _live_matrix()
    assert nc.matrix_status(live, "here", "") == ("2 configurations were launched live (here), ending in 2 "
                                                       "different outcomes in 12 s of attempts")
    # attempts run side by side (a GPU host): their walls add up past the chapter's own time, so the page gives
    # the elapsed time (first start to last end, derived) and the summed time apart
    side = live.assign(workers=6, finished_at=["2026-12-06T08:38:08", "2026-12-06T08:38:10"])
    assert nc.elapsed_s(side) == pytest.approx(7.5)      # starts 08:38:03 and 08:38:02.5; last end 08:38:10
    assert nc.matrix_status(side, "here", "").endswith("in about 8 s (derived from the attempts' end times, kept to "
                                                       "the second; up to 6 ran side by side, 12 s of attempts summed)")
    assert nc.elapsed_s(live) == 12.5                    # no end times: the summed time
    assert nc.matrix_live_facts(None, "") is None and nc.matrix_live_facts(live, "here").live_n == 2
    rows = nc.matrix_rows(m, live)
    assert len(rows) == len(m) + 2 and rows[-1] == ("nan-weights", "nan", "measured")
    lines = nc.failure_lines(live.assign(detail=["fine", "HTTP 500"], stands_for=["x", "y"])).set_index("attempt")
    assert lines.loc["nan-weights", "the line that shows it"] == "probability tensor contains either inf, nan"
    assert lines.loc["healthy", "the line that shows it"] == "fine"
    assert "attention backend: sdpa" in nc.backend_lines(live) and nc.backend_lines(None) == ""


def test_sweep_and_profile_phrases():
    live = pd.DataFrame({"variant": ["v", "v"], "workload": ["8/8", "8/8"], "concurrency": [1, 4],
                         "output_throughput": [10.0, 30.0], "failed": [0, 1], "duration_s": [2.0, 3.0]})
    assert bt.sweep_status(None, "", "why (details)") == "no live sweep: why"
    assert bt.sweep_status(live, "here", "") == "2 points were swept live on here, with 1 failed requests in 5 s of benchmarking"
    head = bt.headline_table(bt.recorded_points(), live, "here")
    assert bt.live_headline(head).live_scaling == pytest.approx(3.0)
    assert "scaled 3.0x" in bt.scaling_phrase(head, "") and "concurrency 4" in bt.scaling_phrase(head, "")
    recorded_only = bt.headline_table(bt.recorded_points(), None, "here")
    assert bt.live_headline(recorded_only) is None and bt.scaling_phrase(recorded_only, "x") == "no live sweep"
    assert bt.profile_phrase(None, "no NVML") == "none was sampled (no NVML)"
    prof = pd.DataFrame({"concurrency": [1, 16], "util_gpu_pct": [40.0, 97.0], "util_mem_pct": [10.0, 30.0],
                         "power_pct_of_limit": [30.0, 55.0], "n_samples": [5, 9]})
    assert bt.profile_phrase(prof, "").startswith("at concurrency 16 this machine's GPU was busy 97 %")


def test_runner_phrase():
    df = pd.DataFrame({"runner": ["a"] * 2 + ["b"] * 2, "workload": ["w"] * 4, "concurrency": [1] * 4,
                       "output_throughput": [100, 110, 200, 210]})
    sp = mr.repeat_spread(df)
    v = mr.distinguishable(sp)
    assert dataclasses.asdict(mr.runner_live_facts(sp, v)) == {"live_max_noise_pct": pytest.approx(100 * 10 / 105),
                                              "live_n_real": 1, "live_n_pairs": 1}
    assert "1 of 1 runner pairs differ" in mr.runner_phrase(sp, v, 2, "")
    assert mr.runner_phrase(None, None, 2, "no engine (details)") == "no live comparison: no engine"
    refused = pd.DataFrame({"runner": ["a"], "outcome": ["unsupported"], "detail": [""]})
    assert mr.runner_phrase(None, None, 2, "", refused) == "no runner served, so none was swept (a: unsupported)"


def test_serving_figures():
    from helpers.core import plotting
    from helpers.serving import classify

    rec = bt.recorded_points()
    live = pd.DataFrame({"variant": ["v"] * 2, "workload": ["8/8"] * 2, "concurrency": [1, 4],
                         "output_throughput": [10.0, 30.0]})
    for per_stream in (False, True):
        ax = plotting.serving_sweeps(rec, live, bt.server_log_point(), per_stream).axes[0]
        assert ax.get_xscale() == "log" and any("measured: this machine: v" in t.get_text()
                                                for t in ax.get_legend().get_texts())
    fig = plotting.outcome_matrix([("a", "ok", "recorded"), ("b", "nan", "measured")], classify.OUTCOMES)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["recorded: a", "measured: b"]
    with pytest.raises(ValueError, match="'exploded'"):
        plotting.outcome_matrix([("a", "exploded", "measured")], classify.OUTCOMES)
    rr = mr.recorded_runners(bt.recorded_serving())
    assert plotting.runner_spread(rr[rr.metric == "output_throughput"], None).axes[0].get_yscale() == "log"


def test_one_runner_has_no_pairs_and_the_run_keeps_its_tables(tmp_path):
    from helpers.core import layout

    df = pd.DataFrame({"runner": ["a"] * 2, "repeat": [0, 1], "workload": ["w"] * 2, "concurrency": [1] * 2,
                       "output_throughput": [100.0, 110.0]})
    sp = mr.repeat_spread(df)
    v = mr.distinguishable(sp)
    assert v.empty and list(v.columns) == mr.VERDICT_COLUMNS
    assert mr.runner_live_facts(sp, v) == mr.LiveRunners(pytest.approx(100 * 10 / 105), 0, 0)
    run = layout.Run(tmp_path, "04_moe_runners")
    for name, table in (("sweep", df), ("spread", sp), ("verdicts", v)):
        run.save(name, table)                       # declared in helpers.core.layout.RESULTS, columns checked
        assert list(run.load(name).columns) == list(table.columns)
    with pytest.raises(layout.LayoutError, match="lacks its declared columns"):
        run.save("spread", sp.drop(columns=["range_pct"]))


def test_a_slow_request_that_pulls_a_point_down_is_named_with_the_medians_throughput():
    live = pd.DataFrame({"variant": ["v", "v"], "workload": ["32/32", "32/32"], "concurrency": [1, 4],
                         "completed": [5, 20], "total_output_tokens": [160, 640],
                         "mean_e2e_latency_ms": [600.0, 1700.0], "median_e2e_latency_ms": [300.0, 2300.0]})
    said = bt.slow_phrase(live)
    assert said.startswith("at concurrency 1 a slow request pulls throughput down (mean E2E 600 ms, median 300 ms")
    assert "at the median it would be 107 tokens/s, derived" in said and "concurrency 4" not in said
    assert bt.slow_phrase(live.iloc[1:]) == "" and bt.slow_phrase(None) == ""
    line = bt.run_line(live, "status", "scaling", "profile")
    assert line == f"status; scaling; {said}; GPU profile: profile"
    assert bt.run_line(live.iloc[1:], "status", "scaling", "profile") == "status; scaling; GPU profile: profile"


def test_the_growth_rule_names_its_reference_and_labels_the_steps_derived():
    said = bt.step_growth_rule(3.3, 3.2, 64, 91.0, 19.8, bt.bare_metal_name())
    assert "(8x RTX PRO 6000 bare metal P2P on TP8 MTP off, a community figure)" in said
    assert "19.8 ms on bare metal (both derived as 1000 / one-stream tokens/s" in said and "cannot tell" in said
    assert "the VM's from its recorded 11.0, bare metal's from the reference 50.5)" in said   # 1000/91, 1000/19.8


def test_the_achieved_concurrency_growth_takes_the_first_baselines_own_output():
    """site-read4 L3: 34.89 in flight belongs to the first baseline (205 tokens/s), not to the sweep's 211."""
    f = bt.sweep_facts(bt.recorded_serving())
    assert f.rec_first_out == 205.0
    assert abs(f.rec_step_growth_achieved - f.rec_single / (205.0 / f.rec_achieved_conc)) < 1e-9
    assert round(f.rec_step_growth_achieved, 1) == 1.9


def test_glued_values_are_dataclasses_named_by_their_glue_keys():
    from helpers.core import recorded

    m = recorded.load("recorded/backend_matrix.csv")
    facts = nc.matrix_facts(m)
    assert dataclasses.is_dataclass(facts) and facts.rec_n_configs == len(m)
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.rec_n_nan = 0
    s = bt.recorded_serving()
    assert [f.name for f in dataclasses.fields(bt.sweep_facts(s))][:2] == ["rec_achieved_conc", "rec_single"]
    assert mr.runner_facts(s).rec_inside in ("inside", "outside")


def test_the_run_lines_scaling_and_median_figure_say_their_statistic():
    """Issue 47 item 14: the run line's scaling is in output throughput (output tokens over a point's duration) and
    the slow point's figure at the median request another statistic; each is named, and where the slow point is the
    scaling's base the scaling by the median statistic is given too. The committed H100 run's sweep: 3.4x in
    throughput, 115 tokens/s at the median request at one stream, 2.2x by medians at both ends."""
    from helpers import repo_root

    live = pd.read_csv(repo_root() / "runs" / "h100-20261206b" / "results" / "03_baselines_tuning" / "sweep.csv")
    head = bt.headline_table(bt.recorded_points(), live, "here")
    scaling = bt.scaling_phrase(head, "")
    assert "scaled 3.4x" in scaling and "in output throughput, each point's output tokens over its duration" in scaling
    slow = bt.slow_phrase(live)
    assert "at the median it would be 115 tokens/s, derived: concurrency x output tokens per request over the median E2E" in slow
    top = live.loc[live.output_throughput.idxmax()]
    one = live[live.concurrency == 1].iloc[0]
    ratio = bt.median_throughput(top) / bt.median_throughput(one)
    assert f"by that median statistic at both ends the scaling to concurrency 16 is {ratio:.1f}x" in slow
    assert f"{ratio:.1f}" == "2.2"


def test_a_range_of_saturated_figures_names_the_workload_of_each_end():
    """Issue 47 item 15: the investigation's "210-247" is two workloads' figures, not one workload's spread; the table
    names each end and the takeaway gives each end its workload, both chosen from data (nearest_workload)."""
    s = bt.saturation_claims()
    rng = s[s.experiment == "mem_fraction_cuda_graphs"].figure.iloc[0]
    assert rng == "210-247 (low end: the 256/256 sweep's 210.9; high end: the 128/512 sweep's 247)"
    f = bt.saturation_facts(bt.recorded_serving(), s)
    assert (f.sat_rng_lo_wl, f.sat_rng_hi_wl) == ("256 in / 256 out", "128 in / 512 out")
    import json

    from helpers import repo_root

    cells = json.loads((repo_root() / "notebooks" / "03_baselines_tuning.ipynb").read_text())["cells"]
    md = " ".join(" ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown").split())
    assert "`sat_rng_lo:.0f` tokens/s at {glue:text}`sat_rng_lo_wl` and {glue:text}`sat_rng_hi:.0f` at {glue:text}`sat_rng_hi_wl`" in md
    assert "tokens/s at 256 in / 256 out and" not in md
