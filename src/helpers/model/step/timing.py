"""Timing one emulated decode step (a DecodeStep): the whole step and each component or op alone, with
CUDA graphs (the step captured once and replayed) or eagerly, median of repeats with the 10th-90th
percentile spread. On a GPU every repeat is timed with CUDA events; on a CPU with perf_counter.

helpers.model.steptime builds its sweep on these; the two-rank check (step.checks) times its rank 0 with
time_point. They live inside the step package so that the check needs nothing above it."""
from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .decode import DecodeStep
from .shapes import StepError


class TimeLimit(RuntimeError):
    """A point ran past its time limit."""


def sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def _summary(ts_us: list[float]) -> dict:
    a = np.asarray(ts_us, dtype=float)
    return {"median_us": float(np.median(a)), "p10_us": float(np.percentile(a, 10)),
            "p90_us": float(np.percentile(a, 90)), "repeats": int(a.size)}


def capture(fn: Callable[[], None], warmup: int = 2):
    """A CUDA graph of `fn` (warmed up on a side stream first, as CUDA graph capture requires). The
    graph is kept after instantiation (keep_graph) so that its kernels can be counted."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(max(1, warmup)):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    try:
        g = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:                 # older torch: no keep_graph; debug mode keeps it instead
        g = torch.cuda.CUDAGraph()
        try:
            g.enable_debug_mode()
        except Exception:  # noqa: BLE001
            pass
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


COUNT_ERRORS: list[str] = []   # why kernel counting failed, where it did (kept for the run's meta)


def graph_kernels(g) -> int | None:
    """Kernel nodes in a captured graph: through cuda-bindings (cudaGraphGetNodes) where installed, else
    from the graph's debug dump; None (and the reason in COUNT_ERRORS) where neither works."""
    try:
        from cuda.bindings import runtime as rt

        handle = rt.cudaGraph_t(init_value=g.raw_cuda_graph())
        err, _, n = rt.cudaGraphGetNodes(handle, 0)
        err, nodes, n = rt.cudaGraphGetNodes(handle, n)
        if err != rt.cudaError_t.cudaSuccess:
            raise RuntimeError(str(err))
        count = 0
        for node in nodes[:n]:
            e2, t = rt.cudaGraphNodeGetType(node)
            count += int(t == rt.cudaGraphNodeType.cudaGraphNodeTypeKernel)
        return count
    except Exception as e:  # noqa: BLE001 - fall back to the dump
        if len(COUNT_ERRORS) < 4:
            COUNT_ERRORS.append(f"cuda-bindings: {type(e).__name__}: {str(e)[:200]}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            p = os.path.join(tmp, "g.dot")
            g.debug_dump(p)
            return len(re.findall(r"\bKERNEL\b", Path(p).read_text(errors="replace")))
    except Exception as e:  # noqa: BLE001 - a missing debug facility only loses the count
        if len(COUNT_ERRORS) < 8:
            COUNT_ERRORS.append(f"debug_dump: {type(e).__name__}: {str(e)[:200]}")
        return None


def time_fn(fn: Callable[[], None], device: str, repeats: int, warmup: int = 1, deadline: float | None = None,
            barrier: Callable[[], None] | None = None) -> dict:
    """Median and spread of `repeats` calls of `fn` (after `warmup`), stopping early at `deadline`
    (time.monotonic()) with at least one repeat."""
    if repeats < 1:
        raise StepError(f"repeats = {repeats}: expected at least 1")
    for _ in range(warmup):
        fn()
    sync(device)
    ts, limited = [], False
    cuda = str(device).startswith("cuda")
    for i in range(repeats):
        if barrier is not None:
            barrier()
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) * 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e6)
        if deadline is not None and time.monotonic() > deadline and i + 1 < repeats:
            limited = True
            break
    out = _summary(ts)
    out["time_limited"] = limited
    return out


def time_point(st: DecodeStep, graphs: bool, repeats: int = 10, warmup: int = 2, components: bool = True,
               time_limit_s: float | None = None, barrier: Callable[[], None] | None = None,
               ops: bool = False) -> list[dict]:
    """Rows for one (batch, context): the whole step; with `components`, each component alone (what =
    the component); with `ops`, each op alone over every layer (what = "op:<name>")."""
    rm = st.rm
    dev = rm.device
    deadline = time.monotonic() + time_limit_s if time_limit_s else None
    mode = "graph" if graphs else "eager"
    base = {"model": rm.m.name, "device": dev, "tp": rm.tp, "dtype": rm.dtype, "attention": st.attention,
            "batch": st.b, "context": st.c, "mode": mode, "overlap": bool(st.overlap), "fusion": st.fusion}
    what = [("step", None, None)] + ([(c, [c], None) for c in st.components_present()] if components else [])
    what += [(f"op:{o}", None, [o]) for o in st.op_names()] if ops else []
    rows, keep = [], []
    for name, comps, names in what:
        if deadline is not None and time.monotonic() > deadline:
            raise TimeLimit(f"batch {st.b} x context {st.c} ({mode}) ran past its {time_limit_s:.0f} s limit "
                            f"before timing '{name}'")
        fn = (lambda c=comps, n=names: st.run(c, n))
        kernels = None
        if graphs:
            g = capture(fn, warmup)
            keep.append(g)
            kernels = graph_kernels(g)
            fn = g.replay
        r = time_fn(fn, dev, repeats, 0 if graphs else warmup, deadline, barrier)
        rows.append({**base, "what": name, **r, "kernels": kernels})
    del keep
    return rows
