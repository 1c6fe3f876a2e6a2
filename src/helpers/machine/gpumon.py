"""A GPU profile under load, sampled through NVML while something else runs.

    with gpumon.Sampler(interval_s=0.2) as mon:
        run_the_sweep()
    prof = gpumon.by_window(mon.frame(), windows)   # median per benchmark point

Each sample holds, per GPU: SM utilisation (% of time a kernel ran), memory utilisation (% of time
device memory was read or written), power draw and limit (W), SM clock (MHz) and memory used (GiB), with
the host time it was taken. These are the quantities the investigation read from nvidia-smi (100 %
busy at about half the power). On a machine without NVML the sampler records nothing and says why.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

COLUMNS = ["t", "gpu", "util_gpu_pct", "util_mem_pct", "power_w", "power_limit_w", "sm_clock_mhz",
           "mem_used_gib"]


def nvml_reader() -> tuple[Callable[[], list[dict]] | None, str]:
    """A function returning one reading per GPU, or (None, why not)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
    except Exception as exc:  # noqa: BLE001 - no driver, no library, no GPU: all mean "nothing to sample"
        return None, f"NVML unavailable ({type(exc).__name__}): no NVIDIA GPU or driver on this machine"
    if n == 0:
        return None, "NVML sees no GPU"
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]

    def read() -> list[dict]:
        out = []
        for i, h in enumerate(handles):
            u = pynvml.nvmlDeviceGetUtilizationRates(h)
            out.append({"gpu": i, "util_gpu_pct": float(u.gpu), "util_mem_pct": float(u.memory),
                        "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                        "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
                        "sm_clock_mhz": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                        "mem_used_gib": pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**30})
        return out

    return read, ""


@dataclass
class Sampler:
    """Sample `read` every `interval_s` seconds on a daemon thread between __enter__ and __exit__."""

    interval_s: float = 0.2
    read: Callable[[], list[dict]] | None = None
    reason: str = ""
    samples: list = field(default_factory=list)
    errors: list = field(default_factory=list)

    def __post_init__(self):
        if self.interval_s <= 0:
            raise ValueError(f"interval_s = {self.interval_s!r}: the sampling interval must be positive seconds")
        if self.read is None:
            self.read, self.reason = nvml_reader()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self.read is not None

    def _loop(self):
        while not self._stop.is_set():
            t = time.time()
            try:
                for r in self.read():
                    self.samples.append({"t": t, **r})
            except Exception as exc:  # noqa: BLE001 - keep sampling; report what failed
                if len(self.errors) < 5:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(self.interval_s)

    def start(self) -> "Sampler":
        if self.available and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="gpumon", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval_s + 5)

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.samples, columns=COLUMNS)


def by_window(samples: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """Median readings of all GPUs within each window.

    `windows` needs columns `start` and `end` (epoch seconds); its other columns are kept. Windows
    with no sample get NaN (n_samples 0)."""
    if not {"start", "end"} <= set(windows.columns):
        raise ValueError("windows need 'start' and 'end' columns (epoch seconds)")
    rows = []
    for w in windows.to_dict("records"):
        s = samples[(samples.t >= w["start"]) & (samples.t <= w["end"])] if len(samples) else samples
        row = dict(w)
        row["n_samples"] = int(len(s))
        for c in ("util_gpu_pct", "util_mem_pct", "power_w", "sm_clock_mhz", "mem_used_gib"):
            row[c] = float(s[c].median()) if len(s) else float("nan")
        row["power_pct_of_limit"] = (100.0 * float((s.power_w / s.power_limit_w).median())) if len(s) else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def point_windows(sweep_rows: pd.DataFrame) -> pd.DataFrame:
    """Time windows of benchmark points from a sweep table (`finished_at` local time to the second,
    `duration_s`); the first second of a window may belong to the previous point."""
    out = sweep_rows.copy()
    end = out["finished_at"].map(lambda s: time.mktime(time.strptime(str(s), "%Y-%m-%dT%H:%M:%S")) + 1.0)
    out["end"] = end
    out["start"] = end - out["duration_s"].astype(float) - 1.0
    return out
