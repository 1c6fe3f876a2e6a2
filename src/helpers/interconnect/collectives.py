"""Collective sweeps (all-reduce, all-to-all) through torch.distributed, one process per device.

`run_collectives` launches helpers.interconnect.worker with torchrun in a subprocess with a timeout: a
worker that hangs is killed (its whole process tree) and reported, and a failed run comes back as a
result with its error instead of an exception, so one NCCL variant failing does not stop the others.
torchrun runs under a keeper (helpers.core.procs): it and its workers die with the process that
launched them, also on kill -9. `resume_collectives` keeps the points an earlier launch with the same
settings wrote into a work folder and launches only for the points still missing.
How the collectives are timed is one helpers.interconnect.method.Method, which every result row carries.
Past one node, `nodes=Nodes(count, endpoint)` (helpers.interconnect.nodes) launches torchrun with its c10d
rendezvous instead of --standalone: this process's node hosts it and records the points, the other nodes
run the join command, and the method must say how many nodes (Method(nodes=count)).

The figures follow nccl-tests (doc/PERFORMANCE.md and src/common.cu): time is the mean over ranks of
(block time / iterations); algbw = S / t with S the message size in bytes per rank; busbw = algbw x
2(n-1)/n for all-reduce and algbw x (n-1)/n for all-to-all. GB/s is 10^9 B/s.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from helpers.core import procs
from helpers.interconnect.copies import parse_sizes
from helpers.interconnect.method import COLUMNS as METHOD_COLUMNS, Method, MethodError
from helpers.interconnect.launchlog import failure_message
from helpers.interconnect.nodes import Nodes
from helpers.interconnect.settings import BASE_ENV

OPS = ("all_reduce", "all_to_all")
BACKENDS = ("gloo", "nccl")

class CollectiveConfigError(ValueError):
    """A collective sweep that cannot run as asked (bad sizes, too many ranks, no such backend)."""


# ------------------------------------------------------------------------------------ arithmetic
def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' correction from algorithm to bus bandwidth for `op` on `world_size` ranks."""
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise ValueError(f"world_size = {world_size!r} must be an integer >= 1")
    n = int(world_size)
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_to_all", "all_gather", "reduce_scatter"):
        return (n - 1) / n
    if op in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"no bus-bandwidth factor for op {op!r}; known: all_reduce, all_to_all, all_gather, "
                     "reduce_scatter, broadcast, reduce")


def algbw_GBps(size_bytes, time_us):
    """Algorithm bandwidth S/t in GB/s (10^9 B/s)."""
    return np.asarray(size_bytes, dtype=float) / (np.asarray(time_us, dtype=float) * 1e3)


def busbw_GBps(op: str, size_bytes, time_us, world_size: int):
    return algbw_GBps(size_bytes, time_us) * bus_factor(op, world_size)


# ------------------------------------------------------------------------------------ launching
@dataclass
class RunResult:
    variant: str
    backend: str
    world_size: int
    status: str                     # ok | failed | timeout
    returncode: int | None
    wall_s: float
    message: str
    rows: list = field(default_factory=list)
    log: str = ""                   # the launcher's and workers' combined output
    method: Method = field(default_factory=Method)   # how the run was timed (every row says so too)

    def summary(self) -> dict:
        return {"variant": self.variant, "backend": self.backend, "world_size": self.world_size,
                "nodes": self.method.nodes, "method": self.method.label, "status": self.status,
                "returncode": self.returncode,
                "wall_s": round(self.wall_s, 2), "points": len(self.rows), "message": self.message}


#: The columns of RunResult.summary, in order (the suite's run table).
SUMMARY_COLUMNS = ["variant", "backend", "world_size", "nodes", "method", "status", "returncode", "wall_s", "points",
                   "message"]


def per_node(world_size: int, nodes: Nodes) -> int:
    """Processes each node starts: world_size over the node count, which must divide it."""
    if world_size % nodes.count:
        raise CollectiveConfigError(f"world_size = {world_size} is not a multiple of nnodes = {nodes.count}: every node "
                                    f"starts the same number of processes; use a multiple of {nodes.count}, or 0 for "
                                    "one per GPU on every node")
    return world_size // nodes.count


def check_request(backend: str, world_size, ops: Sequence[str], nodes: Nodes = Nodes()) -> None:
    """Raise CollectiveConfigError for a sweep that cannot run here, naming the input and the fix. Across
    nodes, this node's share of the ranks is checked against this node's devices (the others are
    assumed alike; a node that starts another count is refused by the workers)."""
    import torch
    import torch.distributed as dist

    if backend not in BACKENDS:
        raise CollectiveConfigError(f"backend = {backend!r} is not supported; choose one of {BACKENDS}")
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise CollectiveConfigError(f"world_size = {world_size!r} must be an integer >= 1 (processes to launch)")
    if not isinstance(nodes, Nodes):
        raise CollectiveConfigError(f"nodes = {nodes!r} must be a helpers.interconnect.nodes.Nodes")
    total, world_size = world_size, per_node(int(world_size), nodes)
    asked = (f"world_size = {total} is more ranks than" if not nodes.multi else
             f"world_size = {total} puts {world_size} ranks on each of the {nodes.count} nodes, more ranks than")
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise CollectiveConfigError(f"ops = {list(ops)!r}: choose one or more of {OPS}")
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise CollectiveConfigError("backend 'nccl' is unavailable: torch sees no CUDA GPU here; "
                                        "use backend='gloo' to measure CPU processes")
        if not dist.is_nccl_available():
            raise CollectiveConfigError("backend 'nccl' is unavailable: this torch build has no NCCL; "
                                        "install a CUDA build of torch or use backend='gloo'")
        n = torch.cuda.device_count()
        if world_size > n:
            raise CollectiveConfigError(f"{asked} the {n} GPU(s) here; NCCL needs one GPU per rank: use "
                                        f"world_size <= {n * nodes.count}")
    else:
        if not dist.is_gloo_available():
            raise CollectiveConfigError("backend 'gloo' is unavailable in this torch build; use 'nccl' on a GPU machine")
        n = os.cpu_count() or 1
        if world_size > n:
            raise CollectiveConfigError(f"{asked} the {n} CPU core(s) here; the processes would share cores and "
                                        f"time the scheduler: use world_size <= {n * nodes.count}")


def run_collectives(backend: str, world_size: int, sizes, ops: Sequence[str] = OPS, variant: str = "default",
                    env: dict[str, str] | None = None, warmup: int = 5, iters: int = 20, repeats: int = 3,
                    dtype: str = "float32", timeout_s: float = 120, hang_rank: int = -1,
                    workdir: str | Path | None = None, method: Method = Method(),
                    points: str | Path | None = None, nodes: Nodes = Nodes()) -> RunResult:
    """Launch one sweep with torchrun and collect its points, timed by `method` (default: the eager
    harness with CUDA events through torch.distributed, in place, one buffer; see
    helpers.interconnect.method.Method for nccl-tests' method and the others). Bad requests raise
    CollectiveConfigError (a method that cannot run on `backend`: MethodError); a run that fails or hangs
    returns a RunResult with status 'failed' or 'timeout' and the error text.

    `nodes` (helpers.interconnect.nodes.Nodes) spans several nodes: `world_size` ranks in all, an equal
    share on each, through torchrun's c10d rendezvous, which this node hosts; the other nodes run
    `nodes.join_command(...)`. `method.nodes` must be `nodes.count`. The launch's limit is then `timeout_s`
    plus `nodes.join_timeout_s` (the other nodes' join), and a launch whose other nodes never join returns
    status 'timeout' about `nodes.join_timeout_s` after it started, saying which command they should run."""
    if not isinstance(method, Method):
        raise CollectiveConfigError(f"method = {method!r} must be a helpers.interconnect.method.Method")
    check_request(backend, world_size, ops, nodes)
    if method.nodes != nodes.count:
        raise CollectiveConfigError(f"method {method.label!r} says nodes = {method.nodes}, but the launch spans "
                                    f"{nodes.count}: use method.but(nodes={nodes.count}) (with start='barrier' across "
                                    "nodes)")
    method.check_backend(backend)
    sizes = parse_sizes(sizes)
    for k, v in (("warmup", warmup), ("iters", iters), ("repeats", repeats)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if k == "warmup" else 1):
            raise CollectiveConfigError(f"{k} = {v!r} must be an integer >= {0 if k == 'warmup' else 1}")
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise CollectiveConfigError(f"timeout_s = {timeout_s!r} must be a positive number of seconds")
    wd = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="collectives-"))
    wd.mkdir(parents=True, exist_ok=True)
    out = Path(points) if points else wd / f"points-{backend}-{world_size}-{slug(variant)}-{os.getpid()}-{time.time_ns()}.jsonl"
    nproc = per_node(world_size, nodes)
    cmd = ([sys.executable, "-m", "torch.distributed.run"] + nodes.torchrun_args(nproc) +
           ["-m", "helpers.interconnect.worker", "--backend", backend, "--ops", ",".join(ops),
            "--sizes", ",".join(str(s) for s in sizes), "--dtype", dtype, "--warmup", str(warmup),
            "--iters", str(iters), "--repeats", str(repeats), "--variant", variant, "--out", str(out),
            "--hang-rank", str(hang_rank)] + method.cli_args())
    if nodes.multi:   # the variant's settings reach the joining nodes' workers through the plan they receive
        cmd += [x for k, v in {**BASE_ENV, **(env or {})}.items() for x in ("--env", f"{k}={v}")]
    full_env = {**os.environ, **BASE_ENV, **(env or {})}
    # the workers import helpers.interconnect.worker: make sure they find this package even where it is
    # used from a source tree that is on the parent's sys.path only (benchmarks/fidelity.py, a notebook)
    pkg_root = str(Path(__file__).resolve().parents[1])
    paths = [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if pkg_root not in paths:
        full_env["PYTHONPATH"] = os.pathsep.join([pkg_root] + paths)
    limit = timeout_s + (nodes.join_timeout if nodes.multi else 0)   # the other nodes' join, then the sweep
    t0 = time.perf_counter()
    proc = procs.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
                       timeout_s=limit + 30)   # the keeper's own limit, should this process freeze
    try:
        text, _ = proc.communicate(timeout=limit)
        status = "ok" if proc.returncode == 0 else "failed"
        msg = "" if status == "ok" else failure_message(text)
        if nodes.multi and status == "failed" and "RendezvousTimeoutError" in (text or ""):
            status, msg = "timeout", nodes.not_joined(nproc)
    except subprocess.TimeoutExpired:
        procs.stop(proc)
        text = _drain(proc)
        status = "timeout"
        msg = (f"no result within {limit:g} s: torchrun and its workers were killed (a rank hung or "
               f"the backend stalled); points finished before that are kept")
    except BaseException:   # an interrupt: nothing of this launch outlives it
        procs.stop(proc, grace_s=2)
        raise
    wall = time.perf_counter() - t0
    rows = _read_points(out)
    return RunResult(variant, backend, world_size, status, proc.returncode, wall, msg, rows, text or "", method)


def slug(s: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in s)


def _drain(proc: subprocess.Popen) -> str:
    try:
        text, _ = proc.communicate(timeout=5)
        return text or ""
    except Exception:
        return ""


def _read_points(path: Path) -> list[dict]:
    from helpers.core.results import read_rows  # JSON lines; a torn last line is ignored

    return read_rows(path)


#: tidy's columns: the point, its method (label and fields), the time spread and the derived bandwidths.
TIDY_COLUMNS = (["op", "backend", "variant", "world_size"] + list(METHOD_COLUMNS)
                + ["dtype", "count", "size_bytes", "iters", "repeats", "warmup", "time_us", "time_us_p10",
                   "time_us_p90", "time_us_min", "time_us_max", "algbw_GBps", "busbw_GBps", "start_skew_us",
                   "late_starts", "hosts", "device", "kind"])


def tidy(results: Sequence[RunResult], device_label: str = "") -> pd.DataFrame:
    """One row per op x size x variant (x backend x world size) x method: the method's label and fields
    (as the worker recorded them with the point), the time spread over repeats, algbw, busbw; for an
    aligned start also how many timed blocks a rank started late; `hosts`, how many hosts the ranks ran on
    (blank for points from before the worker counted them)."""
    rows = []
    for r in results:
        for p in r.rows:
            t = np.asarray(p["times_us"], dtype=float)
            med = float(np.median(t))
            skew = p.get("start_skew_us")
            n = int(p["world_size"])
            dev = device_label or p.get("device", "")
            m = Method.from_row(p)
            if m != r.method.for_op(p["op"]):
                raise MethodError(f"a point of the {r.variant} run was timed by {m.label!r}, not by the run's "
                                  f"method {r.method.for_op(p['op']).label!r}: its points file is not this run's")
            rows.append({
                "op": p["op"], "backend": p["backend"], "variant": p["variant"], "world_size": n, **m.as_row(),
                "dtype": p["dtype"], "count": p["count"], "size_bytes": p["size_bytes"], "iters": p["iters"],
                "repeats": p["repeats"], "warmup": p["warmup"],
                "time_us": med, "time_us_p10": float(np.percentile(t, 10)), "time_us_p90": float(np.percentile(t, 90)),
                "time_us_min": float(t.min()), "time_us_max": float(t.max()),
                "algbw_GBps": float(algbw_GBps(p["size_bytes"], med)),
                "busbw_GBps": float(busbw_GBps(p["op"], p["size_bytes"], med, n)),
                "start_skew_us": float(np.median(skew)) if skew else np.nan,
                "late_starts": p.get("late_starts", np.nan),
                "hosts": p["hosts"] if p.get("hosts") is not None else np.nan,
                "device": dev, "kind": measured_kind(p["backend"], n, m.nodes, p.get("hosts")),
            })
    return pd.DataFrame(rows, columns=TIDY_COLUMNS)


def measured_kind(backend: str, world_size: int, nodes: int = 1, hosts=None) -> str:
    """The tidy table's `kind`: where a point was measured."""
    if nodes <= 1:
        return f"measured: this machine ({backend}, {world_size} processes)"
    where = f"{nodes} nodes" + (f" on {int(hosts)} host{'s' if int(hosts) != 1 else ''}" if hosts else "")
    return f"measured: {where}, recorded on this machine ({backend}, {world_size} processes)"


def measure_direct(sizes, method: Method = Method.direct(timer="host"), warmup: int = 5, iters: int = 20,
                   repeats: int = 5, dtype: str = "float32", gpus: int = 1) -> RunResult:
    """ncclAllReduce called directly (torch.cuda.nccl, one process driving GPUs 0..gpus-1 in one NCCL
    group call), as nccl-tests -g <gpus> calls it: no torch.distributed process group, the legacy default
    stream, a real out-of-place call. `method` is a Method.direct(...) (api 'direct'): the same timing
    options as the torchrun worker; with several GPUs the host timer, which waits for every GPU, is used
    and recorded whatever was asked. The graph harness needs gpus=1 (one capture cannot hold several
    devices' streams). Returns a RunResult whose rows `tidy` reads (backend 'nccl-direct'). This isolates
    the timing method from torch.distributed's own per-call cost."""
    import torch

    method = _direct_method(method, gpus)
    sizes = parse_sizes(sizes)
    devs = [torch.device("cuda", i) for i in range(gpus)]
    dt = getattr(torch, dtype)
    es = torch.empty((), dtype=dt).element_size()
    t_start, rows = time.perf_counter(), []
    with torch.cuda.device(devs[0]):
        for size in sizes:
            count = size // es
            if count == 0:
                continue
            times = _direct_times(devs, count, dt, method, warmup, iters, repeats)
            rows.append({"op": "all_reduce", "backend": "nccl-direct", "variant": "default", "world_size": gpus,
                         "dtype": dtype, "count": count, "size_bytes": count * es, "iters": iters, "repeats": repeats,
                         "warmup": warmup, "times_us": times, **method.as_row(),
                         "device": torch.cuda.get_device_name(devs[0])})
    return RunResult("default", "nccl-direct", gpus, "ok", 0, time.perf_counter() - t_start, "", rows, "", method)


def _direct_method(method: Method, gpus) -> Method:
    """measure_direct's checks of its request; the method it records (several GPUs: the host timer)."""
    import torch

    if not isinstance(method, Method):
        raise CollectiveConfigError(f"method = {method!r} must be a helpers.interconnect.method.Method")
    method.check_backend("nccl-direct")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise CollectiveConfigError(f"gpus = {gpus!r} must be an integer >= 1")
    if method.harness == "graph" and gpus > 1:
        raise CollectiveConfigError("measure_direct: harness='graph' needs gpus=1 (one CUDA graph capture holds "
                                    "one device's stream); use harness='eager' or the torchrun worker")
    method = method if gpus == 1 else method.but(timer="host")
    if not torch.cuda.is_available():
        raise CollectiveConfigError("measure_direct needs a CUDA GPU: torch sees none here; "
                                    "use run_collectives('gloo', ...) on a CPU machine")
    if gpus > torch.cuda.device_count():
        raise CollectiveConfigError(f"gpus = {gpus} is more than the {torch.cuda.device_count()} GPU(s) torch "
                                    "sees here; use gpus <= that")
    return method


def _direct_times(devs, count: int, dt, method: Method, warmup: int, iters: int, repeats: int) -> list[float]:
    """One size of measure_direct: checked once, warmed up, (graph: captured), then `repeats` timed blocks
    of `iters` calls; the time per call of each block in us."""
    import torch
    import torch.cuda.nccl as tnccl

    harness, timer, placement, rotate_bytes = method.harness, method.timer, method.placement, method.rotate_bytes
    gpus, dev = len(devs), devs[0]
    nbytes = count * torch.empty((), dtype=dt).element_size()
    steps = max(1, rotate_bytes // nbytes) if rotate_bytes > 0 else 1
    steps = min(steps, max(iters, warmup, 1))
    px = [torch.zeros(count * steps, dtype=dt, device=d) for d in devs]
    py = [torch.zeros_like(x) for x in px]
    views = [([x[k * count:(k + 1) * count] for x in px], [y[k * count:(k + 1) * count] for y in py])
             for k in range(steps)]

    def sync_all():
        for d in devs:
            torch.cuda.synchronize(d)

    def call(i):
        xs, ys = views[i % steps]
        if placement == "out-of-place":
            tnccl.all_reduce(xs, ys)
        else:
            tnccl.all_reduce(xs)

    chk_x = [torch.full((count,), 3.0, dtype=dt, device=d) for d in devs]
    chk_y = [torch.zeros_like(x) for x in chk_x]
    tnccl.all_reduce(chk_x, chk_y if placement == "out-of-place" else None)
    sync_all()
    got = chk_y if placement == "out-of-place" else chk_x
    if not all(bool(torch.all(g == 3.0 * gpus)) for g in got):
        raise RuntimeError(f"direct ncclAllReduce gave a wrong result (count {count}, {placement}, "
                           f"{gpus} GPU(s))")
    for i in range(warmup):
        call(i)
    sync_all()
    graph = _direct_graph(dev, call, iters) if harness == "graph" else None

    def block():
        if graph is not None:
            graph.replay()
        else:
            for i in range(iters):
                call(i)

    times = []
    for _ in range(repeats):
        sync_all()
        if timer == "events" and gpus == 1:
            s0, e0 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s0.record()
            block()
            e0.record()
            e0.synchronize()
            times.append(s0.elapsed_time(e0) * 1e3 / iters)
        else:  # several GPUs: the host clock, which waits for all of them (nccl-tests' BenchTime)
            t0 = time.perf_counter()
            block()
            sync_all()
            times.append((time.perf_counter() - t0) * 1e6 / iters)
    del px, py, views, graph
    return times


def _direct_graph(dev, call, iters: int):
    """`iters` calls captured in one CUDA graph on `dev` (after one call on a side stream), replayed once."""
    import torch

    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        call(0)
    torch.cuda.current_stream(dev).wait_stream(side)
    torch.cuda.synchronize(dev)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(iters):
            call(i)
    graph.replay()
    torch.cuda.synchronize(dev)
    return graph


def resume_collectives(backend: str, world_size: int, sizes, ops: Sequence[str] = OPS,
                       workdir: str | Path | None = None, **kw) -> RunResult:
    """`run_collectives` that resumes: the points of every launch with the same settings (everything but
    the sizes, the ops and the time limit) go to one file in `workdir`, named by those settings; points
    already there are kept and only the missing (op, size) points are launched, once per group of ops
    missing the same sizes. Points made under other settings are in other files and never mixed in. A
    point that failed was never written, so it is launched again. The result holds every requested point.
    Without a workdir it is `run_collectives` (nothing to resume from)."""
    import hashlib
    import json

    from helpers.core.results import read_rows

    if not workdir:
        return run_collectives(backend, world_size, sizes, ops, **kw)
    sizes = parse_sizes(sizes)
    ops = list(ops)
    method = kw.get("method", Method())
    settings = {k: v for k, v in kw.items() if k not in ("timeout_s", "workdir", "points", "method", "nodes")}
    settings.update(backend=backend, world_size=world_size, base_env=BASE_ENV, method=method.as_row())
    key = hashlib.sha1(json.dumps(settings, sort_keys=True, default=repr).encode()).hexdigest()[:12]
    wd = Path(workdir)
    wd.mkdir(parents=True, exist_ok=True)
    path = wd / f"points-{backend}-{world_size}-{slug(str(kw.get('variant', 'default')))}-{key}.jsonl"
    if not path.with_suffix(".settings.json").exists():
        path.with_suffix(".settings.json").write_text(json.dumps(settings, indent=1, sort_keys=True, default=repr))
    import torch

    esize = torch.empty((), dtype=getattr(torch, str(kw.get("dtype", "float32")))).element_size()

    def nbytes(op, size):   # the worker's own rounding (helpers.interconnect.worker)
        count = size // esize
        if op == "all_to_all":
            count = (count // world_size) * world_size
        return count * esize

    def missing():
        done = {(r.get("op"), int(r.get("size_bytes", -1))) for r in read_rows(path)}
        return {op: tuple(s for s in sizes if nbytes(op, s) > 0 and (op, nbytes(op, s)) not in done) for op in ops}

    groups: dict[tuple, list[str]] = {}
    for op, todo in missing().items():
        if todo:
            groups.setdefault(todo, []).append(op)
    launches = [run_collectives(backend, world_size, list(todo), group_ops, points=path, workdir=wd, **kw)
                for todo, group_ops in groups.items()]
    wanted = {(op, nbytes(op, s)) for op in ops for s in sizes}
    rows = {}
    for r in read_rows(path):   # one row per point: a repeat written by a launch that was killed late is dropped
        k = (r.get("op"), int(r.get("size_bytes", -1)))
        if k in wanted and k not in rows:
            rows[k] = r
    left = {op: todo for op, todo in missing().items() if todo}
    bad = [x for x in launches if x.status != "ok"]
    if not launches:
        status, msg, rc = "ok", f"resumed: all {len(rows)} points were already in {path.name}", 0
    elif bad:
        status, msg, rc = bad[0].status, bad[0].message, bad[0].returncode
    else:
        status, msg, rc = ("ok", "", 0) if not left else ("failed", f"points still missing after the launch: {left}", 1)
    return RunResult(str(kw.get("variant", "default")), backend, world_size, status, rc,
                     sum(x.wall_s for x in launches), msg, list(rows.values()),
                     "\n".join(x.log for x in launches), method)
