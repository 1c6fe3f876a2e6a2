"""Chapter 03 section 4's phrases and tables from a LoadStudy built in the test (no server): what was measured,
the counts and the rule, one row per load, the phases, why section 3 and the study may differ."""
import pandas as pd
import pytest

from helpers.chapters import serving_load as sl
from helpers.serving.loadstudy import LoadStudy
from helpers.serving.target import Target


def rec(ttft, e2e, ramp=False, ok=True):
    return {"start_s": 0.0, "ok": ok, "ramp": ramp, "ttft_s": ttft, "e2e_s": e2e, "tpot_s": (e2e - ttft) / 7,
            "input_tokens": 8, "output_tokens": 8, "connected_s": 0.001, "written_s": 0.0012, "first_byte_s": 0.002,
            "itl_s": [], "error_kind": "", "error": ""}


def point(key, kind, load, ttft, share, n=10, ramp=1):
    return {"key": key, "kind": kind, "load": load, "role": "closed-loop curve", "requests_measured": n,
            "ramp_requests": ramp, "request_throughput": 5.0, "output_throughput": 40.0, "median_ttft_ms": ttft * 1e3,
            "median_tpot_ms": 20.0, "per_user_tokens_per_s": 50.0, "good_share": share, "point_s": 2.0,
            "records": [rec(ttft, ttft + 0.14, ramp=True)] * ramp + [rec(ttft, ttft + 0.14)] * n}


def study(kind="full"):
    s = LoadStudy(kind, Target("the server at http://h:1 (vLLM 0.31.0, model m, hardware: unknown)", "vLLM 0.31.0",
                               "m", "unknown", "asked from the server", True), "ttft:250", 0.9, 10, 10, "32/32", 60.0)
    s.points = [point("c=1", "closed", 1, 0.05, 1.0), point("c=4", "closed", 4, 0.06, 1.0, ramp=4),
                point("r=3", "open", 3.0, 0.05, 0.8), point("again:c=1", "closed", 1, 0.05, 1.0)]
    s.capacity_concurrency = {"capacity": 4, "first_failed": None, "complete": True, "hit_limit": True,
                              "points": [{}], "interval": [4, 4]}
    s.warmup = {"requests": 5, "completed": 5}
    return s


def test_the_facts_say_what_was_measured_the_counts_and_the_rule():
    f = sl.facts(study())
    assert f["ld_what"].startswith("the server at http://h:1") and "Its figures are that server's" in f["ld_can"]
    assert f["ld_counts"] == "4 points, 40 requests measured and 7 ramp requests excluded"
    assert "at least 10 so that 90 % inside allows one request outside" in f["ld_rule"]
    assert f["ld_cap_c"] == "4 in flight (90 % interval 4-4, bootstrapped over each load's requests; it held at the search's top)"
    assert f["ld_warm"] == "a warm-up wave of 5 requests (5 completed), not counted"
    check = sl.facts(study("check"))
    assert check["ld_can"].startswith("Section 3 launched only a tiny random-weight model") and "harness" in check["ld_slo"]
    # the check's own settings (loadstudy.CHECK and what the study recorded), not the parameters cell's
    assert check["ld_can"].endswith("for the study in full. It used its own settings, not the parameters cell's "
                                    "(those apply in full): concurrencies 1, 2, 4 and 8, 2 open-loop rates, the 32/32 "
                                    "workload, SLO ttft:250 and a 1 s ramp")
    assert "own settings" not in f["ld_can"]
    assert set(sl.facts(None).values()) == {"n/a"}


def test_one_row_per_load_and_the_repeat_named():
    v = sl.points_view(study())
    assert list(v["load"]) == ["1 in flight", "4 in flight", "3/s arriving", "1 in flight (again, at the end)"]
    assert v.loc[1, "requests (ramp excluded)"] == "10 (+4)" and v.loc[2, "inside SLOs (%)"] == pytest.approx(80)
    assert [p["key"] for p in sl.curve_points(study())] == ["c=1", "c=4", "r=3"]


def test_the_phases_are_medians_at_the_lowest_and_highest_concurrency():
    ph = sl.phases_view(study()).set_index("phase")
    assert ph.loc["connect", "1 in flight (ms)"] == pytest.approx(1.0)
    assert ph.loc["first token", "4 in flight (ms)"] == pytest.approx(58.0)
    assert ph.loc["receive", "1 in flight (ms)"] == pytest.approx(140.0)


def test_section_3_and_the_study_are_set_side_by_side_with_the_reason():
    sweep = pd.DataFrame({"concurrency": [1], "workload": ["32/32"], "median_ttft_ms": [40.0], "num_requests": [5]})
    said = sl.vs_sweep(study(), sweep)
    assert "section 3's sweep read a median TTFT of 40.0 ms and the study 50.0 ms (+25 %)" in said
    assert "5 requests after one warm-up request" in said
    assert "not section 3's" in sl.vs_sweep(study("check"), sweep)
