"""Timing the emulated decode step (helpers.model.step): whole step and per component, with CUDA graphs
(the step captured once and replayed) and eagerly, median of repeats with the 10th-90th percentile
spread; the per-kernel launch floor and a copy bandwidth of the device; and a sweep over batch and
context with progress per point, a time limit per point and resumable results.

On a GPU every repeat is timed with CUDA events around one step (or one component alone: only the ops of
that component, over every layer, captured in a graph of their own); on a CPU with perf_counter. The timing of one step (time_point and what it uses) lives in
helpers.model.step.timing, where the step package's two-rank check uses it too.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from helpers.core import results

from . import arith as ma
from . import fused as fz
from .step.accounting import component_bytes
from .step.build import build_rank, check_inputs, device_free_bytes, plan_memory, reserve_for
from .step.decode import DecodeStep
from .step.precision import check_precision
from .step.shapes import FP8_WEIGHTS, FUSIONS, PRECISIONS, SHARED_OVERLAP, StepError
from .step.timing import COUNT_ERRORS, TimeLimit, capture, graph_kernels, time_fn, time_point  # noqa: F401
from .step.timing import sync as _sync

TIMING_COLUMNS = ("model", "device", "tp", "dtype", "attention", "batch", "context", "mode", "what", "median_us",
                  "p10_us", "p90_us", "repeats", "time_limited", "kernels", "overlap", "fusion")


def launch_floor(device: str, n: int = 1000, repeats: int = 5) -> dict:
    """Per-kernel cost of a minimal kernel (a one-element add): replayed from a CUDA graph and launched
    eagerly from Python (measured)."""
    x = torch.zeros(1, device=device)

    def many():
        for _ in range(n):
            x.add_(1.0)
    out = {"n_kernels": n}
    e = time_fn(many, device, repeats, 1)
    out["eager_us_per_kernel"] = e["median_us"] / n
    if str(device).startswith("cuda"):
        g = capture(many, 1)
        r = time_fn(g.replay, device, repeats, 1)
        out["graph_us_per_kernel"] = r["median_us"] / n
        out["graph_kernels_counted"] = graph_kernels(g)   # a check of the counter: should be n
        del g
    return out


def copy_bandwidth(device: str, nbytes: int = 2 * 2**30, repeats: int = 5) -> dict:
    """Device-to-device copy of `nbytes` (measured): bytes read + bytes written per second, GB/s."""
    if not str(device).startswith("cuda"):
        nbytes = min(nbytes, 64 * 2**20)
    n = nbytes // 2
    a = torch.empty(n, dtype=torch.bfloat16, device=device).normal_()
    b = torch.empty_like(a)
    r = time_fn(lambda: b.copy_(a), device, repeats, 1)
    gbps = 2 * n * 2 / (r["median_us"] * 1e-6) / 1e9
    del a, b
    return {"copy_bytes": int(n * 2), "copy_us": r["median_us"], "copy_GBps": gbps}


@dataclass
class SweepConfig:
    model: str = "glm5"
    tp: int = 8
    batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    contexts: tuple[int, ...] = (384, 8192)
    modes: tuple[str, ...] = ("graph", "eager")
    dtype: str = "bf16"              # a precision of helpers.model.step.PRECISIONS
    shared_overlap: str = "auto"     # helpers.model.step.SHARED_OVERLAP
    fusion: str = "fused"            # helpers.model.step.FUSIONS
    compile: str = "auto"            # helpers.model.fused.COMPILE (torch.compile of the fused ops: CUDA only)
    attention: str = "dense"
    device: str = "cuda"
    repeats: int = 10
    eager_repeats: int = 3
    components: bool = True
    op_level: tuple[tuple[int, int], ...] = ((1, 384), (64, 384))   # (batch, context) points timed op by op
    sparse_points: tuple[tuple[int, int], ...] = ()   # (batch, context) also timed with DSA sparse attention
    time_limit_s: float = 60.0
    moe_held: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class SweepResult:
    """A decode-step sweep: the timings of every point (TIMING_COLUMNS), the bytes each component reads, and
    the sweep's metadata (device, plan, compile seconds, failures, ...)."""
    timings: pd.DataFrame
    bytes: pd.DataFrame
    meta: dict


def sweep(cfg: SweepConfig, out_dir: str | Path | None = None, progress: Callable[[str], None] = print,
          group=None) -> SweepResult:
    """Every (context, batch, mode) point of `cfg` on one rank, as a SweepResult. With `out_dir`, finished
    points are appended to timings.csv as they finish and a rerun skips them (resume).

    With `group` (a torch.distributed process group of cfg.tp processes, one per GPU or CPU rank), every
    process builds its own rank's shard and the step's all-reduces and logits all-gather run over the
    group inside the step; every rank times every point (the same points, no time limit, so that the
    collectives stay matched) and rank 0 alone writes and reports.

    `cfg.dtype` "fp8" is refused (StepError naming the device) where a trial scaled product fails; where
    only the grouped one fails, the experts run one product each and the sweep runs eagerly only.
    `cfg.shared_overlap` as DecodeStep's; the rows' `overlap` column says what each step ran."""
    m = _check_config(cfg)
    t_start = time.monotonic()
    cfg, rank, barrier, progress, out_dir = _join_group(cfg, group, progress, out_dir)
    out = Path(out_dir) if out_dir else None
    rows, done = _resume(out, cfg)
    rm, meta = _build(cfg, m, rank, progress)
    modes, moe_impl, first_runs = _first_step(cfg, rm, group, meta, progress)
    meta["finished"] = False          # until the last point: an interrupted sweep's meta says so
    if out is not None:
        results.save_json(out, "meta", meta)
    routing, byte_rows, failures = {}, [], []
    _time_points(cfg, m, rm, _points(cfg, modes), modes, moe_impl, group, barrier, done, rows, out, progress,
                 first_runs, routing, byte_rows, failures)
    return _finish(meta, routing, first_runs, failures, t_start, rows, byte_rows, out)


def _check_config(cfg: SweepConfig) -> ma.ModelConfig:
    """The sweep's model, after refusing a setting or point no step can run (before anything is allocated,
    naming the input and the fix)."""
    check_precision(cfg.dtype)
    if cfg.fusion not in FUSIONS:
        raise StepError(f"fusion {cfg.fusion!r}: expected one of {FUSIONS}")
    if cfg.shared_overlap not in SHARED_OVERLAP:
        raise StepError(f"shared_overlap {cfg.shared_overlap!r}: expected one of {SHARED_OVERLAP}")
    for mode in cfg.modes:
        if mode not in ("graph", "eager"):
            raise StepError(f"mode {mode!r}: expected 'graph' or 'eager'")
    if "graph" in cfg.modes and not str(cfg.device).startswith("cuda"):
        raise StepError("CUDA graphs need a CUDA device; on the CPU use modes ('eager',)")
    m = ma.load_model(cfg.model)
    for b in cfg.batches:          # refused before anything is allocated, naming the input and the fix
        for c in cfg.contexts:
            check_inputs(m, cfg.tp, cfg.dtype, b, c)
    return m


def _join_group(cfg: SweepConfig, group, progress, out_dir):
    """(cfg, rank, barrier, progress, out_dir) for this process: without a group, rank 0 as given; with one,
    this rank, a barrier over the group and no time limit, and on ranks other than 0 no progress and no
    out_dir (rank 0 alone writes and reports)."""
    rank, barrier = 0, None
    if group is not None:
        import torch.distributed as dist

        world = dist.get_world_size(group)
        if world != cfg.tp:
            raise StepError(f"a process group of {world} ranks runs TP{world}, not TP{cfg.tp}: set tp = {world}")
        rank = dist.get_rank(group)
        barrier = (lambda: dist.barrier(group=group))
        cfg = replace(cfg, time_limit_s=None)
        if rank:
            progress, out_dir = (lambda s: None), None
    return cfg, rank, barrier, progress, out_dir


def _resume(out: Path | None, cfg: SweepConfig) -> tuple[list[dict], set]:
    """The rows an earlier sweep into `out` finished, and their (batch, context, mode, attention) points; a
    folder holding another precision's or fusion path's timings is refused."""
    done = set()
    rows: list[dict] = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        p = out / "timings.csv"
        if p.exists():
            old = pd.read_csv(p)
            if "dtype" in old.columns and len(old) and set(old["dtype"]) != {cfg.dtype}:
                raise StepError(f"{p} holds {sorted(set(old['dtype']))} timings; this sweep is {cfg.dtype}: "
                                f"write it to another folder")
            old_fusion = set(old["fusion"]) if "fusion" in old.columns else {"unfused"}
            if len(old) and old_fusion != {cfg.fusion}:
                raise StepError(f"{p} holds {sorted(old_fusion)} timings; this sweep is {cfg.fusion}: "
                                f"write it to another folder")
            rows = old.to_dict("records")
            done = {(int(r["batch"]), int(r["context"]), r["mode"], r["attention"]) for r in rows}
    return rows, done


def one_rank(cfg: SweepConfig, progress: Callable[[str], None] = print) -> tuple:
    """(rank model, meta) of rank 0 for `cfg`, checked and built as a sweep builds it (for a tool that runs
    steps of its own: benchmarks/step_kernels.py)."""
    return _build(cfg, _check_config(cfg), 0, progress)


def _build(cfg: SweepConfig, m: ma.ModelConfig, rank: int, progress) -> tuple:
    """This rank's model for the largest point (memory planned first) and the sweep's meta: the config, the
    plan, the build time, the device, the launch floor and the copy bandwidth."""
    bmax, cmax = max(cfg.batches), max(cfg.contexts)
    free = device_free_bytes(cfg.device)
    plan = plan_memory(m, cfg.tp, cfg.dtype, bmax, cmax, free, cfg.moe_held, reserve_bytes=reserve_for(cfg.device))
    progress(f"memory: {plan.describe()}")
    t0 = time.monotonic()
    rm, _ = build_rank(m, cfg.tp, rank, bmax, cmax, cfg.device, cfg.dtype, cfg.seed, plan=plan)
    _sync(cfg.device)
    meta = {"config": asdict(cfg), "plan": asdict(plan), "build_s": time.monotonic() - t0,
            "torch": torch.__version__, "device_name": _device_name(cfg.device), "precision": cfg.dtype,
            "fp8_support": rm.fp8_support, "fp8_weights": sorted(FP8_WEIGHTS) if cfg.dtype == "fp8" else []}
    meta.update(launch_floor(cfg.device))
    meta.update(copy_bandwidth(cfg.device))
    progress(f"built one rank in {meta['build_s']:.1f} s; launch floor {meta.get('graph_us_per_kernel', float('nan')):.2f} "
             f"us/kernel (graph), {meta['eager_us_per_kernel']:.2f} us (eager); copy {meta['copy_GBps']:.0f} GB/s")
    return rm, meta


def _first_step(cfg: SweepConfig, rm, group, meta: dict, progress) -> tuple:
    """One eager step first: a device whose torch lacks torch._grouped_mm falls back to a loop over the
    experts (and then times eagerly only). Returns (modes, moe_impl, first_runs); notes in `meta`."""
    modes = tuple(cfg.modes)
    first = _new_step(cfg, rm, min(cfg.batches), min(cfg.contexts), group)
    meta["fusion"], meta["compiled"] = cfg.fusion, first.compiled
    first_runs = {}
    moe_impl = first.moe_impl      # "loop" already where the FP8 trial found no torch._scaled_grouped_mm
    try:   # one eager step first: a device whose torch lacks torch._grouped_mm falls back to a loop
        t_first = time.monotonic()
        first.run()
        _sync(cfg.device)
        first_runs[f"{first.b}x{first.c} {first.attention}"] = time.monotonic() - t_first
    except (RuntimeError, NotImplementedError) as e:
        if moe_impl == "loop":
            raise
        meta["grouped_mm_error"] = f"{moe_impl}: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
        moe_impl = "grouped_mm" if moe_impl == "triton" else "loop"   # the Triton kernel failed: torch's next
    if first.compiled and max(cfg.batches) > first.b and moe_impl == first.moe_impl:
        _tune_at_largest_batch(cfg, rm, group, moe_impl, meta, first_runs)
    if moe_impl == "loop" and "graph" in modes:
        modes = tuple(mo for mo in modes if mo != "graph")
        why = meta.get("grouped_mm_error") or (rm.fp8_support or {}).get("grouped_error")
        progress(f"no grouped GEMM here ({why}); experts run one product each, eager only")
    del first
    meta["moe_impl"] = moe_impl
    return modes, moe_impl, first_runs


def _tune_at_largest_batch(cfg: SweepConfig, rm, group, moe_impl: str, meta: dict, first_runs: dict) -> None:
    """One untimed step at the largest batch, right after the first step. The compiled functions take every
    batch and context above 1 as symbolic (helpers.model.fused.compiled), and Inductor picks each generated kernel's launch
    configuration by timing the candidates at the first size that graph meets. Met at batch 2, where every
    candidate takes a few microseconds, the pick can be many times slower at 64: measured on an H200
    (data/measured/step-run-h200-20261202e: book run h200-20261202e of commit 30868a4), the compiled
    combine took 17.9 ms a step at batch 64 against 0.77 ms in study step-fused-h200-20261202e of the same
    code, and the step 69.5 ms against 51.5. Met at the largest batch first, the candidates are told apart
    where they differ: book run h200-20261202f, with this, took 50.9 ms and combine 0.80 ms. The longest
    context first, then the others: the graphs are symbolic in the context too, so they are tuned where the
    attention reads the most (as they were when dynamo made the context symbolic at the sweep's second
    context, before issue 34)."""
    b = max(cfg.batches)
    for c in sorted(set(cfg.contexts), reverse=True):
        st = _new_step(cfg, rm, b, c, group, moe_impl=moe_impl)
        t0 = time.monotonic()
        st.run()
        _sync(cfg.device)
        first_runs[f"{b}x{c} {st.attention} (kernels tuned)"] = time.monotonic() - t0
        del st
    meta["kernels_tuned_at_batch"] = b


def _new_step(cfg: SweepConfig, rm, batch: int, context: int, group, **kw) -> DecodeStep:
    """A DecodeStep of `rm` at (batch, context) with the sweep's settings (attention, overlap, fusion,
    compile); `kw` adds or overrides (moe_impl, attention, seed)."""
    kw = {"attention": cfg.attention, "shared_overlap": cfg.shared_overlap, "fusion": cfg.fusion,
          "compile": cfg.compile, **kw}
    return DecodeStep(rm, batch, context, group=group, **kw)


def _points(cfg: SweepConfig, modes: tuple[str, ...]) -> list[tuple]:
    """(context, batch, mode, attention) of every point, in the order they are timed."""
    points = [(c, b, mode, cfg.attention) for c in cfg.contexts for b in cfg.batches for mode in modes]
    points += [(c, b, modes[0], "sparse") for b, c in cfg.sparse_points if cfg.attention != "sparse"]
    return points


def _time_points(cfg, m, rm, points, modes, moe_impl, group, barrier, done, rows, out, progress, first_runs,
                 routing, byte_rows, failures) -> None:
    """Each point: its step run once (routing and bytes recorded), then timed unless done before; finished
    rows written as they come (`rows`, `byte_rows`, `routing`, `failures` and `first_runs` grow in place)."""
    cuda = str(cfg.device).startswith("cuda")
    for i, (c, b, mode, att) in enumerate(points, 1):
        st = _untimed_step(cfg, m, rm, (c, b, mode, att), modes, moe_impl, group, first_runs, routing, byte_rows)
        label = f"batch {b} context {c} {mode}" + (" sparse" if att == "sparse" else "") + \
            (" overlap" if st.overlap else "")
        if (b, c, mode, att) in done:
            progress(f"[{i}/{len(points)}] {label}: done before, skipped")
            continue
        t1 = time.monotonic()
        try:
            new = time_point(st, mode == "graph", cfg.repeats if mode == "graph" else cfg.eager_repeats,
                             2 if mode == "graph" else 1, cfg.components and (mode == "graph" or not cuda),
                             cfg.time_limit_s, barrier,
                             ops=(b, c) in set(map(tuple, cfg.op_level)) and mode == modes[0] and att == cfg.attention)
        except TimeLimit as e:
            failures.append(str(e))
            progress(f"[{i}/{len(points)}] {e}")
            continue
        finally:
            del st
            if str(cfg.device).startswith("cuda"):
                torch.cuda.empty_cache()
        rows += new
        if out is not None:     # every finished point is on disk: an interrupted sweep keeps its rows
            _write(out, pd.DataFrame(rows), pd.DataFrame(byte_rows))
        s = next(r for r in new if r["what"] == "step")
        progress(f"[{i}/{len(points)}] {label}: step {s['median_us'] / 1e3:.2f} ms "
                 f"({s['p10_us'] / 1e3:.2f}-{s['p90_us'] / 1e3:.2f}), {b * 1e6 / s['median_us']:.0f} tok/s, "
                 f"point {time.monotonic() - t1:.1f} s")


def _untimed_step(cfg, m, rm, point, modes, moe_impl, group, first_runs, routing, byte_rows):
    """The point's DecodeStep after one untimed step (its time in `first_runs` for the first step of its
    shape), its distinct experts in `routing` and, for the first mode, its bytes per component in `byte_rows`."""
    c, b, mode, att = point
    st = _new_step(cfg, rm, b, c, group, attention=att, seed=cfg.seed + 1, moe_impl=moe_impl)
    st.record_routing = True
    t_first = time.monotonic()
    st.run()
    _sync(cfg.device)
    first_runs.setdefault(f"{b}x{c} {att}", time.monotonic() - t_first)
    st.record_routing = False
    if rm.m.moe_layers:
        routing[(b, c)] = st.distinct_experts()
    if mode == modes[0]:
        bt = component_bytes(m, cfg.tp, b, c, routing.get((b, c), 0.0), cfg.dtype, att)
        byte_rows += [{"batch": b, "context": c, "attention": att, "distinct_experts": routing.get((b, c), 0.0),
                       "dtype": cfg.dtype, **r} for r in bt.to_dict("records")]
    return st


def _finish(meta, routing, first_runs, failures, t_start, rows, byte_rows, out) -> dict:
    """The sweep's result (meta marked finished), written to `out` where there is one."""
    meta["distinct_experts"] = {f"{b}x{c}": v for (b, c), v in routing.items()}
    # the first step of each shape (compilation included where the fused ops compile), measured apart from
    # the timed steps; compile_s: the calls that compiled, summed (helpers.model.fused.COMPILE_LOG)
    meta["first_step_s"] = first_runs
    meta["compile_s"] = fz.compile_seconds()
    meta["compiles"] = len(fz.COMPILE_LOG)
    meta["kernel_count_errors"] = list(COUNT_ERRORS)
    meta["failures"] = failures
    meta["sweep_s"] = time.monotonic() - t_start
    meta["finished"] = True
    timings = pd.DataFrame(rows, columns=list(TIMING_COLUMNS))
    bytes_df = pd.DataFrame(byte_rows)
    if out is not None:
        _write(out, timings, bytes_df, meta)
    return SweepResult(timings, bytes_df, meta)


def _write(out: Path, timings: pd.DataFrame, bytes_df: pd.DataFrame, meta: dict | None = None) -> None:
    """A sweep folder's files, each written whole or not at all (a temporary file, then a rename: a kill
    mid-write leaves the last whole version for --resume; helpers.core.results)."""
    results.save_table(out, "timings", timings)
    results.save_table(out, "bytes", bytes_df)
    if meta is not None:
        results.save_json(out, "meta", meta)


def _device_name(device: str) -> str:
    if str(device).startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    import platform
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def merge_sweeps(folders: dict[str, str | Path], out_dir: str | Path | None = None) -> SweepResult:
    """Several sweeps (name -> the out_dir a sweep wrote) as one study: every timing row of each (their
    `dtype` and `overlap` columns tell them apart), the byte rows once per precision, and meta {name: its
    meta.json}. A folder without timings is left out and named in meta["missing"] (one failed sweep does
    not lose the others). With `out_dir`, writes timings.csv, bytes.csv and meta.json there."""
    times, byts, metas, missing, seen = [], [], {}, [], set()
    for name, folder in folders.items():
        f = Path(folder)
        if not (f / "timings.csv").exists():
            missing.append(name)
            continue
        t = pd.read_csv(f / "timings.csv")
        if "overlap" not in t.columns:
            t["overlap"] = False
        if "fusion" not in t.columns:       # studies from before the fused path ran the unfused step
            t["fusion"] = "unfused"
        times.append(t)
        if (f / "meta.json").exists():
            metas[name] = json.loads((f / "meta.json").read_text())
        if (f / "bytes.csv").exists():
            b = pd.read_csv(f / "bytes.csv")
            prec = str(b["dtype"].iloc[0]) if "dtype" in b.columns and len(b) else name
            if prec not in seen:
                seen.add(prec)
                byts.append(b)
    if not times:
        raise StepError(f"no sweep of {sorted(folders)} wrote timings.csv")
    timings = pd.concat(times, ignore_index=True)[list(TIMING_COLUMNS)]
    bytes_df = pd.concat(byts, ignore_index=True) if byts else pd.DataFrame()
    meta = {"sweeps": metas, "missing": missing}
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        _write(out, timings, bytes_df, meta)
    return SweepResult(timings, bytes_df, meta)


#: data/schema.yaml types of a merged study's timings.csv (TIMING_COLUMNS, then the `source` column)
_TIMING_TYPES = {"model": "str", "device": "str", "tp": "int", "dtype": "str", "attention": "str", "batch": "int",
                 "context": "int", "mode": "str", "what": "str", "median_us": "float", "p10_us": "float",
                 "p90_us": "float", "repeats": "int", "time_limited": "bool", "kernels": "int", "overlap": "bool",
                 "fusion": "str", "source": "str"}


def register_entries(study: str, device_name: str, date: str, commit: str, command: str,
                     role: str = "decode-step-fp8") -> dict:
    """What committing a merged study (merge_sweeps, with a `source` column) under data/measured/<study>/
    adds to data/sources.yaml (the key `study`) and data/schema.yaml (the keys measured/<study>/*.csv)."""
    if set(_TIMING_TYPES) != set(TIMING_COLUMNS) | {"source"}:
        raise StepError("steptime._TIMING_TYPES does not type every timing column")
    return {
        study: {"kind": "measured", "file": f"data/measured/{study}/",
                "title": (f"The emulated GLM-5 decode step (one TP8 rank, random weights), fused as an engine fuses it "
                          f"and unfused, in bf16 and FP8, on one {device_name}" if role == "decode-step-fused" else
                          f"The emulated GLM-5 decode step (one TP8 rank, random weights) in bf16 and FP8, the shared "
                          f"expert overlapped and not, on one {device_name}"),
                "machine": f"lent nvidia-h200: {device_name} (env.txt)", "date": date, "commit": commit,
                "command": command, "role": role},
        f"measured/{study}/timings.csv": {
            "columns": dict(_TIMING_TYPES),
            "required": ["model", "device", "tp", "dtype", "attention", "batch", "context", "mode", "what",
                         "median_us", "repeats", "overlap", "source"],
            "choices": {"mode": ["graph", "eager"], "attention": ["dense", "sparse"], "dtype": list(PRECISIONS),
                        "fusion": list(FUSIONS)}},
        f"measured/{study}/bytes.csv": {
            "columns": {"batch": "int", "context": "int", "attention": "str", "distinct_experts": "float",
                        "dtype": "str", "component": "str", "bytes_emulated": "float", "bytes_checkpoint": "float",
                        "source": "str"},
            "required": ["batch", "context", "attention", "dtype", "component", "bytes_emulated",
                         "bytes_checkpoint", "source"]},
    }
