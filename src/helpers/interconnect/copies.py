"""Copy microbenchmarks: how long one buffer copy takes, by path, size and harness.

Paths (`PATHS`):
  same_device  GPU buffer -> another buffer on the same GPU (the harness floor: no link is crossed)
  peer         GPU 0 -> GPU 1 directly (only where CUDA reports peer access)
  host_bounce  GPU -> pinned host buffer -> GPU (GPU 1 where there is one): what traffic does without P2P
  h2d, d2h     pinned host -> GPU, GPU -> pinned host
  cpu_memcpy   CPU tensor -> CPU tensor (the only path on a machine without a GPU)

Harnesses (`HARNESSES`), so that the cost of issuing a copy is kept apart from the cost of moving it:
  eager   copies issued one at a time from Python (`dst.copy_(src)`), host clock around N of them and a
          final synchronize: how the investigation measured, launch overhead included
  graph   N copies captured in one CUDA graph and replayed, CUDA events around the replay: launch
          overhead removed (one-GPU paths only: a copy that ends on a second GPU is skipped with the
          reason, `GRAPH_CROSS_DEVICE`)
  queued  the cuda-samples p2pBandwidthLatencyTest method: a spin kernel holds the stream while N copies
          are queued, CUDA events around the copies only

The peer path issues its copy two ways. Eager uses torch (`dst.copy_(src)`), as the investigation did:
torch fences a copy between GPUs with events in both directions (GPU 1's stream waits for the copy and
GPU 0's stream waits for GPU 1's previous work), and those fences are part of what eager code pays.
Queued issues `cudaMemcpyPeerAsync` through the CUDA runtime that torch loaded, on a non-blocking
stream of GPU 0 with peer access enabled both ways, exactly as p2pBandwidthLatencyTest does: no fence,
so it times the link. The queued harness always runs on a non-blocking stream, as the tool's does; on
two H200s a peer copy queued on the legacy default stream cost 12.3 us at 16 B against 2.3 us on a
non-blocking one (the driver orders it against the other GPU's default stream too).
The graph harness does not run for copies that end on another GPU (`GRAPH_CROSS_DEVICE`).

Each point runs `warmup` untimed copies, then `repeats` timed blocks of `iters` copies; the time of
one copy is block time / iters, and the spread is over blocks (median, p10, p90, min, max).
Bandwidth is size / median time in GB/s (10^9 B/s); a same-device copy reads and writes the size once
each, and p2pBandwidthLatencyTest counts both on its diagonal (`p2ptest_GBps` carries that figure).
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

PATHS = ("same_device", "peer", "host_bounce", "h2d", "d2h", "cpu_memcpy")
HARNESSES = ("eager", "graph", "queued")
CROSS_DEVICE_PATHS = ("peer", "host_bounce")   # with two GPUs these end on GPU 1
GRAPH_CROSS_DEVICE = ("a copy that ends on another GPU does not go into a one-device CUDA graph here: torch's "
                      "copy orders the two GPUs' streams with events, which the capture cannot hold, and a raw "
                      "cudaMemcpyAsync to the other GPU, captured, crashed the process at replay on the lent "
                      "H200s (driver 580, CUDA 13); the queued harness removes the launch overhead instead")
RAW_PEER_CALLS = {"queued": "cudaMemcpyPeerAsync"}   # how the peer path is issued where torch is not used
MAX_BYTES_LIMIT = 2**32          # 4 GiB: a sanity bound on one message
_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30}


class SizeError(ValueError):
    """A message size that is not a positive whole number of bytes."""


class PathUnavailable(RuntimeError):
    """A copy path or harness this machine cannot run; the message says why."""


# ----------------------------------------------------------------------------------------- sizes
def parse_size(value, name: str = "size") -> int:
    """A message size in bytes from an int or a string such as "4096", "12KiB", "256 MiB", "1G"
    (K/M/G are binary, as in nccl-tests). Raises SizeError naming the input otherwise."""
    if isinstance(value, bool):
        raise SizeError(f"{name} = {value!r} is not a size; give a positive number of bytes such as 4096 or '12KiB'")
    if isinstance(value, (int, np.integer)):
        n = int(value)
    elif isinstance(value, (float, np.floating)):
        if not math.isfinite(value) or not float(value).is_integer():
            raise SizeError(f"{name} = {value!r} is not a whole number of bytes; give an integer such as 4096")
        n = int(value)
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", value)
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS:
            raise SizeError(
                f"{name} = {value!r} cannot be parsed as a size; expected a number with an optional unit "
                f"B, K/KiB, M/MiB or G/GiB (binary), for example '4096', '12KiB' or '256MiB'"
            )
        x = float(m.group(1)) * _UNITS[unit]
        if not x.is_integer():
            raise SizeError(f"{name} = {value!r} is not a whole number of bytes ({x}); use a larger unit or an integer")
        n = int(x)
    else:
        raise SizeError(f"{name} = {value!r} ({type(value).__name__}) is not a size; give an int or a string like '12KiB'")
    if n <= 0:
        raise SizeError(f"{name} = {value!r} is not positive; message sizes must be at least 1 byte")
    if n > MAX_BYTES_LIMIT:
        raise SizeError(f"{name} = {value!r} is larger than {MAX_BYTES_LIMIT} bytes (4 GiB); pick a smaller message")
    return n


def parse_sizes(values: Iterable, name: str = "sizes") -> list[int]:
    if isinstance(values, (str, bytes)):
        values = [v for v in re.split(r"[,\s]+", values) if v]
    out = [parse_size(v, f"{name}[{i}]") for i, v in enumerate(values)]
    if not out:
        raise SizeError(f"{name} is empty; give at least one message size")
    return out


def decode_message_sizes(model: str = "glm5") -> pd.DataFrame:
    """The investigation's message sizes, derived: tokens (from the recorded copy sweep) x the model's
    hidden size x 2 bytes (bf16). Columns: tokens, hidden_size, size_bytes, label, kind."""
    from helpers.core import recorded

    hidden = int(recorded.model_config(model)["architecture"]["hidden_size"])
    rec = recorded.load("recorded/copy_sweep.csv")
    tokens = sorted(int(t) for t in rec["tokens"].dropna().unique())
    rows = [{"tokens": t, "hidden_size": hidden, "size_bytes": t * hidden * 2,
             "label": f"{t} token{'s' if t > 1 else ''} ({t * hidden * 2 / 1024:g} KiB)",
             "kind": "derived: tokens x hidden_size x 2 B (bf16)"} for t in tokens]
    return pd.DataFrame(rows)


def sweep_sizes(min_bytes, max_bytes, factor: int = 2, include: Iterable[int] = (), multiple_of: int = 1) -> list[int]:
    """Geometric sizes from min_bytes to max_bytes (x factor each step) plus `include`, each rounded
    down to a multiple of `multiple_of`, sorted and without repeats."""
    lo, hi = parse_size(min_bytes, "min_bytes"), parse_size(max_bytes, "max_bytes")
    if lo > hi:
        raise SizeError(f"min_bytes ({lo}) is larger than max_bytes ({hi}); swap them")
    if not isinstance(factor, (int, np.integer)) or isinstance(factor, bool) or factor < 2:
        raise SizeError(f"factor = {factor!r} must be an integer >= 2 (the step between sizes)")
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= int(factor)
    sizes += [parse_size(x, "include") for x in include if lo <= parse_size(x, "include") <= hi]
    sizes = sorted({(x // multiple_of) * multiple_of for x in sizes} - {0})
    if not sizes:
        raise SizeError(f"no size between {lo} and {hi} bytes is a multiple of {multiple_of}; widen the range")
    return sizes


def iterations_for(size: int, iters: int, budget_bytes: int, min_iters: int = 3) -> int:
    """Copies per timed block: `iters`, fewer for big messages so one block moves about `budget_bytes`."""
    return int(max(min_iters, min(iters, budget_bytes // max(size, 1))))


# ----------------------------------------------------------------------------------------- config
@dataclass
class CopyConfig:
    sizes: list[int]
    paths: Sequence[str] = PATHS
    harnesses: Sequence[str] = HARNESSES
    iters: int = 100              # copies per timed block (fewer for big messages, see budget_bytes)
    repeats: int = 5              # timed blocks per point: the spread is over these
    warmup: int = 5               # untimed copies before the blocks
    budget_bytes: int = 2**30     # bytes one timed block may move
    device: str = "auto"          # "auto" (cuda if present) | "cuda" | "cpu"

    def __post_init__(self):
        self.sizes = parse_sizes(self.sizes)
        bad = [p for p in self.paths if p not in PATHS]
        if bad:
            raise ValueError(f"unknown copy path(s) {bad}; choose from {PATHS}")
        bad = [h for h in self.harnesses if h not in HARNESSES]
        if bad:
            raise ValueError(f"unknown harness(es) {bad}; choose from {HARNESSES}")
        for k in ("iters", "repeats"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{k} = {v!r} must be an integer >= 1")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup = {self.warmup!r} must be an integer >= 0")
        if self.device not in ("auto", "cuda", "cpu"):
            raise ValueError(f"device = {self.device!r} must be 'auto', 'cuda' or 'cpu'")


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise PathUnavailable("device = 'cuda' but torch sees no CUDA GPU here; use device='cpu' or 'auto'")
    return device


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        n = torch.cuda.device_count()
        return f"{n}x {torch.cuda.get_device_name(0)}"
    import platform

    return f"CPU ({platform.processor() or platform.machine()})"


def p2p_matrix() -> pd.DataFrame:
    """Measured here: torch.cuda.can_device_access_peer for every GPU pair ("self" on the diagonal)."""
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    m = [["self" if i == j else ("yes" if torch.cuda.can_device_access_peer(i, j) else "no")
          for j in range(n)] for i in range(n)]
    return pd.DataFrame(m, index=[f"GPU {i}" for i in range(n)], columns=[f"GPU {j}" for j in range(n)])


def path_availability(device: str) -> dict[str, str | None]:
    """Path -> None when it can run here, else the reason it cannot."""
    import torch

    out: dict[str, str | None] = {}
    if device == "cpu":
        for p in PATHS:
            out[p] = None if p == "cpu_memcpy" else "no CUDA GPU on this machine: only CPU-to-CPU copies can be measured"
        return out
    n = torch.cuda.device_count()
    for p in PATHS:
        out[p] = None
    out["cpu_memcpy"] = "a GPU is present: the GPU paths are measured instead"
    if n < 2:
        out["peer"] = f"this machine has {n} GPU: a peer copy needs two"
    elif not torch.cuda.can_device_access_peer(0, 1):
        out["peer"] = ("CUDA reports no peer access between GPU 0 and GPU 1 (P2P not supported); "
                       "such copies go through host memory, which host_bounce measures")
    return out


def harness_availability(device: str) -> dict[str, str | None]:
    out = {h: None for h in HARNESSES}
    if device == "cpu":
        out["graph"] = "CUDA graphs need a GPU; on CPU only the eager (Python-issued) harness exists"
        out["queued"] = "queueing behind a spin kernel needs a GPU stream"
    return out


# ----------------------------------------------------------------------------------------- buffers
_CUDART = None


def cudart():
    """The CUDA runtime library that torch loaded, through ctypes, for cudaMemcpyPeerAsync (which torch
    does not expose without its cross-device fences). Raises PathUnavailable if it cannot be found."""
    global _CUDART
    if _CUDART is not None:
        return _CUDART
    import ctypes

    import torch

    from helpers.machine.cudalibs import load

    torch.cuda.init()
    lib = load("libcudart.so", ["libcudart.so.13", "libcudart.so.12", "libcudart.so"])
    if lib is None:
        raise PathUnavailable("the CUDA runtime library (libcudart) that torch uses could not be loaded, so "
                              "cudaMemcpyPeerAsync cannot be called; the eager harness (torch's copy) still runs")
    c = ctypes
    lib.cudaMemcpyPeerAsync.restype = c.c_int
    lib.cudaMemcpyPeerAsync.argtypes = [c.c_void_p, c.c_int, c.c_void_p, c.c_int, c.c_size_t, c.c_void_p]
    _CUDART = lib
    return lib


def _peer_memcpy(dst, src, size: int):
    """issue() that queues cudaMemcpyPeerAsync(dst, src), p2pBandwidthLatencyTest's call, on GPU src's
    current stream. dst and src are tensors on two GPUs; peer access must already be enabled."""
    import torch

    f = cudart().cudaMemcpyPeerAsync
    d_dev, s_dev = dst.device.index, src.device.index
    d_ptr, s_ptr = dst.data_ptr(), src.data_ptr()

    def issue():
        rc = f(d_ptr, d_dev, s_ptr, s_dev, size, torch.cuda.current_stream(s_dev).cuda_stream)
        if rc != 0:
            raise RuntimeError(f"cudaMemcpyPeerAsync returned CUDA error {rc} (copy GPU {s_dev} -> GPU {d_dev}, "
                               f"{size} B)")
    return issue


def issued_by(path: str, harness: str) -> str:
    """How one copy of `path` is issued under `harness`: the CUDA call (the peer path's queued harness,
    RAW_PEER_CALLS) or 'torch copy_'."""
    return RAW_PEER_CALLS.get(harness, "torch copy_") if path == "peer" else "torch copy_"


def _buffers(path: str, size: int, harness: str = "eager", reverse: bool = False):
    """(issue, stream_device) where issue() performs one copy of `size` bytes on `path`; reverse: the peer
    copy goes GPU 1 -> GPU 0, issued on GPU 1's stream."""
    import torch

    u8 = torch.uint8
    if path == "cpu_memcpy":
        src, dst = torch.ones(size, dtype=u8), torch.empty(size, dtype=u8)
        return (lambda: dst.copy_(src)), None
    d0 = torch.device("cuda", 0)
    if path == "same_device":
        src, dst = torch.ones(size, dtype=u8, device=d0), torch.empty(size, dtype=u8, device=d0)
        return (lambda: dst.copy_(src, non_blocking=True)), d0
    if path == "peer":
        d1 = torch.device("cuda", 1)
        if reverse:
            d0, d1 = d1, d0
        src, dst = torch.ones(size, dtype=u8, device=d0), torch.zeros(size, dtype=u8, device=d1)
        call = issued_by(path, harness)
        if call != "torch copy_":
            # torch enables peer access for the direction of its first copy: copy both ways once, so that
            # access is on in both directions, as p2pBandwidthLatencyTest sets it
            dst[:1].copy_(src[:1]), src[:1].copy_(dst[:1])
            torch.cuda.synchronize(d0), torch.cuda.synchronize(d1)
            src.fill_(1)
            issue = _peer_memcpy(dst, src, size)
        else:
            def issue():
                dst.copy_(src, non_blocking=True)
        issue.dst = dst
        return issue, d0
    if path == "h2d":
        src, dst = torch.ones(size, dtype=u8).pin_memory(), torch.empty(size, dtype=u8, device=d0)
        return (lambda: dst.copy_(src, non_blocking=True)), d0
    if path == "d2h":
        src, dst = torch.ones(size, dtype=u8, device=d0), torch.empty(size, dtype=u8).pin_memory()
        return (lambda: dst.copy_(src, non_blocking=True)), d0
    if path == "host_bounce":
        d1 = torch.device("cuda", 1 if torch.cuda.device_count() > 1 else 0)
        src = torch.ones(size, dtype=u8, device=d0)
        mid = torch.empty(size, dtype=u8).pin_memory()
        dst = torch.zeros(size, dtype=u8, device=d1)
        if d1 == d0:
            def issue():
                mid.copy_(src, non_blocking=True)  # same stream: the second copy waits for the first
                dst.copy_(mid, non_blocking=True)
            return issue, d0
        # Two GPUs: torch issues the host-to-GPU-1 copy on GPU 1's stream, so order the two halves with
        # events (GPU 1 waits for the copy out of GPU 0; GPU 0's stream then waits for the copy into
        # GPU 1), making one bounce a serial chain that ends on GPU 0's stream, where the timers sit.
        down, up = torch.cuda.Event(), torch.cuda.Event()

        def issue():
            s0, s1 = torch.cuda.current_stream(d0), torch.cuda.current_stream(d1)
            mid.copy_(src, non_blocking=True)      # GPU 0 -> pinned host, on GPU 0's stream
            down.record(s0)
            s1.wait_event(down)
            dst.copy_(mid, non_blocking=True)      # pinned host -> GPU 1, on GPU 1's stream
            up.record(s1)
            s0.wait_event(up)
        issue.dst = dst                            # for checking that the data arrives
        return issue, d0
    raise ValueError(f"unknown path {path!r}; choose from {PATHS}")


def _stats(per_copy_us: Sequence[float]) -> dict:
    a = np.asarray(per_copy_us, dtype=float)
    return {"time_us": float(np.median(a)), "time_us_p10": float(np.percentile(a, 10)),
            "time_us_p90": float(np.percentile(a, 90)), "time_us_min": float(a.min()),
            "time_us_max": float(a.max())}


def _time_eager(issue: Callable, sync: Callable, iters: int, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            issue()
        sync()
        out.append((time.perf_counter() - t0) * 1e6 / iters)
    return out


def _time_graph(issue: Callable, dev, iters: int, repeats: int) -> list[float]:
    import torch

    with torch.cuda.device(dev):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            issue()                                   # warm up on the side stream before capture
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(iters):
                issue()
        g.replay()
        torch.cuda.synchronize()
        out = []
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(repeats):
            start.record()
            g.replay()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1e3 / iters)
        del g
        return out


def _time_queued(issue: Callable, dev, iters: int, repeats: int) -> list[float]:
    """p2pBandwidthLatencyTest's method: hold the stream with a spin kernel, queue the copies, time them
    with events recorded after the spin. The spin is sized to outlast the queueing (checked on the host)."""
    import torch

    with torch.cuda.device(dev), torch.cuda.stream(torch.cuda.Stream()):   # non-blocking, as the tool's
        cycles_per_us = 2500                              # above any current GPU clock: the hold errs long
        out = []
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(repeats):
            torch.cuda.synchronize()
            hold_us = 2000 + 40 * iters                   # generous: Python issues a copy in ~10 us
            torch.cuda._sleep(int(hold_us * cycles_per_us))
            t0 = time.perf_counter()
            start.record()
            for _ in range(iters):
                issue()
            end.record()
            queued_us = (time.perf_counter() - t0) * 1e6
            end.synchronize()
            if queued_us > hold_us:
                raise PathUnavailable(f"queueing {iters} copies took {queued_us:.0f} us, longer than the "
                                      f"{hold_us} us hold: the timing would include launch gaps")
            out.append(start.elapsed_time(end) * 1e3 / iters)
        return out


def measure(path: str, size: int, harness: str, iters: int, repeats: int, warmup: int,
            reverse: bool = False) -> dict:
    """Time one (path, size, harness) point; returns the per-copy statistics in microseconds. reverse=True
    times the peer path the other way, GPU 1 -> GPU 0 (p2pBandwidthLatencyTest's other off-diagonal)."""
    import torch

    if reverse and path != "peer":
        raise ValueError(f"reverse=True is for the peer path only (GPU 1 -> GPU 0); path {path!r} has one direction")

    if path == "cpu_memcpy":  # one thread: a memcpy, not torch's parallel copy fighting other processes
        n_threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return _measure(path, size, harness, iters, repeats, warmup)
        finally:
            torch.set_num_threads(n_threads)
    return _measure(path, size, harness, iters, repeats, warmup, reverse)


def _measure(path: str, size: int, harness: str, iters: int, repeats: int, warmup: int,
             reverse: bool = False) -> dict:
    import torch

    if _graph_cross_device(path, harness):
        raise PathUnavailable(GRAPH_CROSS_DEVICE)
    issue, dev = _buffers(path, size, harness, reverse)
    sync = (lambda: torch.cuda.synchronize()) if dev is not None else (lambda: None)
    if path in CROSS_DEVICE_PATHS and _gpu_count() > 1:
        sync = lambda: (torch.cuda.synchronize(0), torch.cuda.synchronize(1))  # noqa: E731
    for _ in range(warmup):
        issue()
    sync()
    if harness == "eager":
        times = _time_eager(issue, sync, iters, repeats)
    elif harness == "graph":
        times = _time_graph(issue, dev, iters, repeats)
    elif harness == "queued":
        times = _time_queued(issue, dev, iters, repeats)
    else:
        raise ValueError(f"unknown harness {harness!r}; choose from {HARNESSES}")
    return _stats(times)


def run_copy_sweep(cfg: CopyConfig, progress: bool = False, token_of: dict[int, int] | None = None):
    """Run every available (path, harness, size) point. Returns (sweep, skipped): the tidy measurements
    and one row per path/harness that could not run, with the reason. A point that fails is recorded
    in `skipped` with its error and the sweep goes on."""
    device = resolve_device(cfg.device)
    paths_ok, harn_ok = path_availability(device), harness_availability(device)
    dev_label = device_name(device)
    token_of = token_of or {}
    rows, skipped = [], []
    for p in cfg.paths:
        if paths_ok[p]:
            if not (p == "cpu_memcpy" and device == "cuda"):
                skipped.append({"path": p, "harness": "all", "size_bytes": None, "reason": paths_ok[p]})
            continue
        for h in cfg.harnesses:
            if harn_ok[h]:
                skipped.append({"path": p, "harness": h, "size_bytes": None, "reason": harn_ok[h]})
                continue
            if device == "cuda" and _graph_cross_device(p, h):
                skipped.append({"path": p, "harness": h, "size_bytes": None, "reason": GRAPH_CROSS_DEVICE})
                continue
            sizes = cfg.sizes
            it = sizes
            if progress:
                from tqdm.auto import tqdm
                it = tqdm(sizes, desc=f"{p}/{h}", leave=False)
            for s in it:
                n = iterations_for(s, cfg.iters, cfg.budget_bytes)
                try:
                    st = measure(p, s, h, n, cfg.repeats, cfg.warmup)
                except Exception as e:  # a path that breaks at one size is reported, the sweep goes on
                    skipped.append({"path": p, "harness": h, "size_bytes": s, "reason": f"{type(e).__name__}: {e}"})
                    _reset_cuda_error_state()
                    continue
                bw = s / (st["time_us"] * 1e3)
                rows.append({
                    "path": p, "harness": h, "variant": "default", "device": dev_label,
                    "size_bytes": s, "tokens": token_of.get(s), "iters": n, "repeats": cfg.repeats,
                    "warmup": cfg.warmup, **st, "bandwidth_GBps": bw,
                    "p2ptest_GBps": 2 * bw if p == "same_device" else bw, "issued_by": issued_by(p, h),
                    "label": "cpu memcpy" if p == "cpu_memcpy" else p.replace("_", " "),
                    "kind": f"measured: this machine ({dev_label})",
                })
    cols = ["path", "harness", "variant", "device", "size_bytes", "tokens", "iters", "repeats", "warmup",
            "time_us", "time_us_p10", "time_us_p90", "time_us_min", "time_us_max", "bandwidth_GBps",
            "p2ptest_GBps", "issued_by", "label", "kind"]
    sweep = pd.DataFrame(rows, columns=cols)
    sweep["tokens"] = sweep["tokens"].astype("Int64")
    return sweep, pd.DataFrame(skipped, columns=["path", "harness", "size_bytes", "reason"])


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _graph_cross_device(path: str, harness: str) -> bool:
    """True where the graph harness is asked for a copy that ends on a second GPU (GRAPH_CROSS_DEVICE)."""
    return harness == "graph" and path in CROSS_DEVICE_PATHS and _gpu_count() > 1


def _reset_cuda_error_state() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except Exception:
        pass


# ----------------------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    from pathlib import Path

    ap = argparse.ArgumentParser(prog="python -m helpers.interconnect.copies", description=__doc__.split("\n")[0])
    ap.add_argument("--min-bytes", default="4")
    ap.add_argument("--max-bytes", default="256MiB")
    ap.add_argument("--factor", type=int, default=2)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--harnesses", default=",".join(HARNESSES))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", default="", help="folder for copy_sweep.csv and copy_skipped.csv")
    a = ap.parse_args(argv)
    dec = decode_message_sizes()
    sizes = sweep_sizes(a.min_bytes, a.max_bytes, a.factor, include=dec["size_bytes"])
    cfg = CopyConfig(sizes=sizes, paths=a.paths.split(","), harnesses=a.harnesses.split(","), iters=a.iters,
                     repeats=a.repeats, warmup=a.warmup, device=a.device)
    t0 = time.perf_counter()
    sweep, skipped = run_copy_sweep(cfg, token_of=dict(zip(dec["size_bytes"], dec["tokens"])))
    print(sweep.to_string(index=False, max_rows=400))
    if len(skipped):
        print(skipped.to_string(index=False))
    print(f"copy sweep: {len(sweep)} points in {time.perf_counter() - t0:.1f} s")
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        sweep.to_csv(out / "copy_sweep.csv", index=False)
        skipped.to_csv(out / "copy_skipped.csv", index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
