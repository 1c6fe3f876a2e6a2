import time

import pandas as pd
import pytest

from helpers.machine import gpumon


@pytest.mark.integration
def test_without_a_gpu_it_says_why_and_records_nothing():
    read, why = gpumon.nvml_reader()
    if read is not None:
        pytest.skip("this machine has NVML and a GPU")
    with gpumon.Sampler(interval_s=0.01) as mon:
        time.sleep(0.05)
    assert not mon.available and "NVML" in mon.reason and mon.frame().empty


@pytest.mark.integration
def test_sampling_thread_collects_and_stops():
    calls = []

    def read():
        calls.append(1)
        return [{"gpu": 0, "util_gpu_pct": 50.0, "util_mem_pct": 20.0, "power_w": 100.0,
                 "power_limit_w": 400.0, "sm_clock_mhz": 1980.0, "mem_used_gib": 1.0}]

    with gpumon.Sampler(interval_s=0.01, read=read) as mon:
        time.sleep(0.2)
    n = len(calls)
    time.sleep(0.05)
    assert n >= 5 and len(calls) == n  # stopped on exit
    assert list(mon.frame().columns) == gpumon.COLUMNS


@pytest.mark.integration
def test_errors_are_kept_and_sampling_goes_on():
    state = {"n": 0}

    def read():
        state["n"] += 1
        if state["n"] == 1:
            raise RuntimeError("driver hiccup")
        return []

    with gpumon.Sampler(interval_s=0.01, read=read) as mon:
        time.sleep(0.1)
    assert mon.errors == ["RuntimeError: driver hiccup"] and state["n"] > 2


def test_medians_per_window():
    s = pd.DataFrame({"t": [1.0, 2.0, 3.0, 11.0, 12.0], "gpu": 0, "util_gpu_pct": [10, 20, 30, 90, 100],
                      "util_mem_pct": [1, 2, 3, 4, 5], "power_w": [100, 100, 100, 300, 300],
                      "power_limit_w": 600.0, "sm_clock_mhz": 1000.0, "mem_used_gib": 1.0})
    w = pd.DataFrame({"point": ["a", "b", "c"], "start": [0.0, 10.0, 20.0], "end": [5.0, 15.0, 25.0]})
    out = gpumon.by_window(s, w).set_index("point")
    assert out.loc["a", "util_gpu_pct"] == 20 and out.loc["b", "power_pct_of_limit"] == pytest.approx(50.0)
    assert out.loc["c", "n_samples"] == 0 and pd.isna(out.loc["c", "util_gpu_pct"])
    with pytest.raises(ValueError, match="start"):
        gpumon.by_window(s, w.drop(columns=["start"]))
    with pytest.raises(ValueError, match="interval"):
        gpumon.Sampler(interval_s=0)


def test_point_windows_from_sweep_rows():
    rows = pd.DataFrame({"finished_at": [time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(1000000.0))],
                         "duration_s": [4.0]})
    w = gpumon.point_windows(rows)
    assert w.end.iloc[0] == pytest.approx(1000001.0) and w.start.iloc[0] == pytest.approx(999996.0)
