"""One rank of the collective sweep; launched by torchrun (see helpers.interconnect.collectives.run_collectives).

Per size it follows nccl-tests' BenchTime: warm-up collectives, then a barrier, then `iters` back-to-back
collectives timed as one block (CUDA events on the GPU; perf_counter on CPU/gloo, where the call returns
when the work is done); the block time / iters is averaged over ranks (nccl-tests' default `-a 1`).
That is repeated `repeats` times for a spread. Before timing, each op is checked once for a correct
result. Rank 0 appends one JSON line per finished point to --out, so a killed run keeps what finished.

all_reduce through torch.distributed is in place (the API has no separate output buffer), so it is
compared with nccl-tests' in-place columns; all_to_all_single is out of place.

The timing method is helpers.interconnect.method.Method: its options below are written by Method.cli_args
and read back by Method.from_args, and every point carries the method's label and fields (Method.as_row).
Options that make the timing match nccl-tests' own (benchmarks/fidelity.py compares the two):
  --harness graph      the `iters` collectives are captured in one CUDA graph and the graph is replayed
                       (nccl-tests -G 1): torch's per-call dispatch cost is left out
  --timer host         a host clock from the first launch to the end of a stream synchronize, as
                       nccl-tests' BenchTime does, instead of CUDA events around the block
  --placement out-of-place   all_reduce into a second buffer: a copy of the input, then the in-place
                       all_reduce on it (torch.distributed has no out-of-place all_reduce; on one rank
                       this moves what NCCL's out-of-place call moves, a copy of the message)
  --rotate-bytes N     iteration i uses the buffers at offset size x (i mod N/size) inside an N-byte
                       pool, as nccl-tests does with its max size, so a repeated call does not find its
                       data in the L2 cache
  --rank-start aligned after the barrier, every rank waits for one deadline on the host's monotonic clock
                       (rank 0 picks it, --start-lead-us ahead, and sends it to all) and launches then, instead
                       of launching as soon as its own barrier call returns. torch.distributed's barrier
                       releases ranks tens of us apart; a rank that starts early times its wait for the
                       others, which nccl-tests' in-process thread barrier mostly avoids. One host only.
  --api nccl           issue each collective as ncclAllReduce (all_to_all: grouped ncclSend/ncclRecv) on a
                       communicator of its own, through helpers.interconnect.nccl, instead of through
                       torch.distributed: the call sglang's decode makes (its pynccl binding) and the one
                       nccl-tests times. torch.distributed still does the barriers and gathers the times.
                       out-of-place is then NCCL's own out-of-place call, as in nccl-tests.
  --stream legacy      issue the GPU work on the legacy default stream, as a torch program does unless it
                       picks a stream. The default (side) is a stream created non-blocking, as nccl-tests
                       creates its own. Measured on two H200s (NCCL 2.28.9): a CUDA graph of 200 captured
                       all-reduces launched on the legacy stream cost 17 us per all-reduce below 16 KiB,
                       on a non-blocking stream 6 us (nccl-tests: 6.2 us); NCCL_GRAPH_MIXING_SUPPORT=0
                       removed most of the difference.
  --control gloo       with --api nccl: barriers, the start deadline and the timings go through a gloo
                       group, so the process holds no NCCL communicator but ours (nccl-tests' shape: its
                       control plane is MPI).

Past one node (helpers.interconnect.nodes): torchrun's c10d rendezvous joins the nodes. The book's node
launches this worker with the whole sweep on its command line; every other node launches it with `--join`
and nothing else. The book's node's local rank 0 publishes its command line (without --out) in torchrun's
store, with a hash of this worker's source, and each joining rank runs exactly that, after setting the
`--env` variables it names (a variant's NCCL settings) before its backend starts: the nodes cannot disagree
about the sweep, and a joining node with other code is refused. The ranks check that torchrun started as
many nodes as the method says (--nodes) and as many processes on each. The book's node's local rank 0
writes the points (torchrun, not the book, numbers the nodes). Across nodes the ranks share no clock, so
they are released by a barrier (the Method refuses an aligned start there).

Every point also records `start_skew_us`: per repeat, the spread of the ranks' launch instants on the
host's monotonic clock (max - min), where all ranks share one host (else null), `late_starts`: the
number of repeats in which some rank passed the aligned start's deadline before it could wait for it,
and `hosts`: how many distinct hosts (by host name) the ranks ran on.
COLLECTIVE_WORKER_STACKS_AFTER_S=<s> in the environment dumps every thread's stack after s seconds.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.interconnect.launchlog import JOINED_PREFIX
from helpers.interconnect.method import Method, MethodError

#: torchrun's store keys: the book's node's command line, and each rank's host name
PLAN_KEY = "helpers.interconnect.worker/plan"
HOST_KEY = "helpers.interconnect.worker/host/"
#: how long a joining rank waits for the book's node's plan (it is published as its workers start)
PLAN_WAIT_S = 120


def _now_ns() -> int:
    """The host's monotonic clock: one clock for every process on a host (CLOCK_MONOTONIC)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m helpers.interconnect.worker")
    ap.add_argument("--backend", choices=["gloo", "nccl"], help="required unless --join")
    ap.add_argument("--ops", default="all_reduce,all_to_all")
    ap.add_argument("--sizes", help="comma-separated byte counts (required unless --join)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variant", default="default")
    Method.add_arguments(ap)   # --api, --harness, --timer, --placement, --rotate-bytes, --rank-start, ...
    ap.add_argument("--out", help="where the book's node's local rank 0 appends the points (required unless --join)")
    ap.add_argument("--hang-rank", type=int, default=-1,
                    help="testing only: this rank sleeps forever before the first collective")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="set in every rank's environment before its backend starts (a variant's NCCL settings; "
                         "how they reach a joining node)")
    ap.add_argument("--join", action="store_true",
                    help="a node joining another's sweep: every other option comes from the book's node")
    a = ap.parse_args(argv)
    if not a.join and (a.backend is None or a.sizes is None or a.out is None):
        ap.error("--backend, --sizes and --out are required (or --join, on a node that joins another node's sweep)")
    bad = [e for e in a.env if "=" not in e or not e.split("=", 1)[0]]
    if bad:
        ap.error(f"--env {bad[0]!r}: expected NAME=VALUE")
    return a


def source_hash() -> str:
    """What the nodes must share: the code that times the sweep (this worker, the method, the NCCL binding)."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha1()
    for name in ("worker.py", "method.py", "nccl.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


def _without_out(argv: list[str]) -> list[str]:
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
        elif x == "--out":
            skip = True
        elif not x.startswith("--out="):
            out.append(x)
    return out


def _store():
    """A client of torchrun's store for this launch (its MASTER_ADDR and MASTER_PORT)."""
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=timedelta(seconds=PLAN_WAIT_S))


class Refused(Exception):
    """This rank cannot run the sweep; across nodes every rank is told why before any of them leaves."""


def _share_plan(a, argv: list[str], store, local: int, local_world: int, nodes: int):
    """The book's node publishes its command line; a joining node reads it and parses it as its own."""
    if not a.join:
        if local == 0:
            store.set(PLAN_KEY, json.dumps({"argv": _without_out(argv), "source": source_hash(),
                                            "local_world": local_world, "nodes": nodes}))
        return a
    try:
        plan = json.loads(store.get(PLAN_KEY).decode())
    except Exception as e:  # noqa: BLE001 - name what did not come
        raise Refused(f"helpers.interconnect.worker --join: no sweep from the book's node within {PLAN_WAIT_S} s "
                      f"({type(e).__name__}: {e}); is the node that hosts the rendezvous running the book's "
                      "collective sweep?") from None
    if plan["source"] != source_hash():
        raise Refused(f"helpers.interconnect.worker --join: this node's worker code ({source_hash()}) differs from "
                      f"the book's node's ({plan['source']}): check out the same commit on every node")
    if plan["local_world"] != local_world:
        raise Refused(f"helpers.interconnect.worker --join: {local_world} process(es) on this node, "
                      f"{plan['local_world']} on the book's node: run the join command with --nproc-per-node "
                      f"{plan['local_world']}")
    try:
        joined = parse_args(plan["argv"] + ["--join"])
    except SystemExit:
        raise Refused("helpers.interconnect.worker --join: the book's node's sweep options do not parse here "
                      f"({plan['argv']}): check out the same commit on every node") from None
    joined.out = None
    return joined


def _handshake(store, rank: int, world: int, problem: str | None) -> int:
    """Across nodes, before the backend starts: every rank posts its host name and what it refuses, if
    anything, and reads every other rank's; a refusal anywhere ends every rank with its reason (a rank
    that never posts ends them after PLAN_WAIT_S). Returns how many hosts the ranks are on."""
    store.set(f"{HOST_KEY}{rank}", json.dumps({"host": socket.gethostname(), "problem": problem or ""}))
    if problem:
        raise SystemExit(problem)
    posts = []
    for r in range(world):
        try:
            posts.append(json.loads(store.get(f"{HOST_KEY}{r}").decode()))
        except Exception as e:  # noqa: BLE001 - name the rank that did not answer
            raise SystemExit(f"helpers.interconnect.worker: rank {r} did not start within {PLAN_WAIT_S} s "
                             f"({type(e).__name__}); see its node's output") from None
    bad = [(r, p) for r, p in enumerate(posts) if p["problem"]]
    if bad:
        r, p = bad[0]
        raise SystemExit(f"helpers.interconnect.worker: rank {r} (on {p['host']}) cannot run the sweep: {p['problem']}")
    return len({p["host"] for p in posts})


@dataclass
class _Rank:
    """This rank of the launch, once its backend has started: who it is, where its tensors live, how it
    issues a collective (torch.distributed, or `comm`: a communicator of our own) and what it times with."""
    a: argparse.Namespace
    method: Method
    rank: int
    world: int
    local: int
    local_world: int
    nodes: int
    hosts: int | None
    device: object = None
    ctrl: object = None          # where the barriers' and timings' tensors live
    comm: object = None
    dtype: object = None

    @property
    def gpu(self) -> bool:
        return self.device.type == "cuda"

    def sync(self):
        import torch

        if self.gpu:
            torch.cuda.synchronize(self.device)

    def run(self, op, x, y, placement="in-place"):
        import torch
        import torch.distributed as dist

        if self.comm is not None:  # the stream is looked up per call: under capture it is the capture stream
            stream = torch.cuda.current_stream(self.device).cuda_stream
            if op == "all_reduce":
                self.comm.all_reduce(x, y if placement == "out-of-place" else x, stream)
            else:
                self.comm.all_to_all(x, y, stream)
            return
        if op == "all_reduce":
            if placement == "out-of-place":
                y.copy_(x)
                dist.all_reduce(y)
            else:
                dist.all_reduce(x)
        else:
            dist.all_to_all_single(y, x)

    def check(self, op, count, placement="in-place"):
        import torch

        rank, world, dtype, device = self.rank, self.world, self.dtype, self.device
        x = torch.full((count,), float(rank + 1), dtype=dtype, device=device)
        y = torch.empty_like(x)
        self.run(op, x, y, placement)
        self.sync()
        if op == "all_reduce":
            ok = bool(torch.all((y if placement == "out-of-place" else x) == world * (world + 1) / 2))
        else:  # block j of rank r's output comes from rank j
            want = torch.arange(1, world + 1, dtype=dtype, device=device).repeat_interleave(count // world)
            ok = bool(torch.equal(y, want))
        if not ok:
            raise RuntimeError(f"{op} gave a wrong result on rank {rank} (count {count})")


def _settle(argv: list[str]) -> _Rank:
    """Parse the options, take the sweep from the book's node where this node joins, set the variant's
    environment, build the method and check it against what torchrun started; across nodes every rank
    hears every rank's refusal (the handshake) before any of them leaves."""
    a = parse_args(argv)
    stacks_after = float(os.environ.get("COLLECTIVE_WORKER_STACKS_AFTER_S", "0") or 0)
    if stacks_after > 0:  # diagnosing a hang: every thread's stack goes to stderr after this many seconds
        import faulthandler

        faulthandler.dump_traceback_later(stacks_after, repeat=False)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", 1))   # torchrun's node count for this launch
    store = _store() if nodes > 1 or a.join else None
    problem = None
    try:
        if store is not None:
            a = _share_plan(a, argv, store, local, local_world, nodes)
        for item in a.env:   # before the backend starts: NCCL reads its settings when a communicator is made
            k, v = item.split("=", 1)
            os.environ[k] = v
        try:   # the method is built once, from the options collectives.run_collectives wrote (Method.cli_args)
            method = Method.from_args(a)
            method.check_backend(a.backend)
        except MethodError as e:
            raise Refused(f"helpers.interconnect.worker: {e}") from None
        if method.nodes != nodes:
            raise Refused(f"helpers.interconnect.worker: the method says nodes = {method.nodes}, but torchrun started "
                          f"{nodes} node(s) (GROUP_WORLD_SIZE): launch with as many nodes as the method names")
        if nodes > 1 and world != nodes * local_world:
            raise Refused(f"helpers.interconnect.worker: {world} ranks on {nodes} nodes, {local_world} of them on "
                          f"this one: every node must start {local_world} process(es), as this one does (the join "
                          f"command's --nproc-per-node {local_world})")
    except Refused as e:
        problem = str(e)
    if store is not None:
        hosts = _handshake(store, rank, world, problem)
    elif problem:
        raise SystemExit(problem)
    else:
        hosts = 1 if local_world == world else None
    if a.join and local == 0:
        print(f"{JOINED_PREFIX} the {a.variant!r} sweep timed by {method.label}, {world} ranks on {nodes} nodes",
              flush=True)
    return _Rank(a, method, rank, world, local, local_world, nodes, hosts)


def _start(r: _Rank) -> None:
    """Start the backend (and, with --api nccl, our own communicator) and pick the stream."""
    import torch
    import torch.distributed as dist

    method = r.method
    if r.a.backend == "nccl":
        torch.cuda.set_device(r.local)
        r.device = torch.device("cuda", r.local)
        if method.control == "gloo":   # no NCCL communicator of torch's in the process: ours is the only one
            dist.init_process_group("gloo")
        else:
            dist.init_process_group("nccl", device_id=r.device)
    else:
        r.device = torch.device("cpu")
        dist.init_process_group("gloo")
    r.ctrl = torch.device("cpu") if method.control == "gloo" else r.device
    # The control plane uses all-reduces only (barrier, sums, maxima): the NCCL variants' environment
    # applies to torch's communicator too, and NCCL_ALGO=Tree leaves NCCL no algorithm for an all-gather
    # or a broadcast (measured on two H200s: "no algorithm/protocol available for function AllGather").
    if method.start == "aligned" and r.local_world != r.world:
        raise SystemExit(f"--rank-start aligned needs every rank on one host (they share its monotonic clock); "
                         f"{r.local_world} of the {r.world} ranks are on this one: use --rank-start barrier")
    if method.api == "nccl":  # a communicator of our own, as sglang's pynccl makes: rank 0's id goes to every rank
        from helpers.interconnect import nccl as ncclbind

        lib = ncclbind.library()
        uid = torch.zeros(ncclbind.UNIQUE_ID_BYTES, dtype=torch.int32, device=r.ctrl)
        if r.rank == 0:
            uid.copy_(torch.tensor(list(lib.unique_id()), dtype=torch.int32))
        dist.all_reduce(uid)                     # only rank 0's is non-zero: the sum is its id, everywhere
        r.comm = lib.init_rank(r.world, bytes(uid.cpu().tolist()), r.rank)
    r.dtype = getattr(torch, r.a.dtype)
    if r.a.hang_rank == r.rank:
        time.sleep(10**6)
    if r.gpu and method.stream == "side":
        # every op, event and graph launch from here on goes to a stream created non-blocking, as
        # nccl-tests creates its streams, not to the legacy default stream, which the driver also orders
        # against the device's other blocking streams (see --stream in the module docstring)
        torch.cuda.set_stream(torch.cuda.Stream(r.device))


def _capture(r: _Rank, block, iters: int):
    """The `iters` collectives captured in one CUDA graph (after one call on a side stream) and replayed once."""
    import torch

    side = torch.cuda.Stream(r.device)
    side.wait_stream(torch.cuda.current_stream(r.device))
    with torch.cuda.stream(side):
        block(1)
    torch.cuda.current_stream(r.device).wait_stream(side)
    r.sync()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        block(iters)
    graph.replay()
    r.sync()
    return graph


def _timed_block(r: _Rank, m: Method, issue, one_host: bool) -> tuple[float, float | None, int]:
    """One timed block: barrier, (aligned: wait for rank 0's deadline), issue, time; returns the time per
    call averaged over ranks, the ranks' launch skew in us (one host, several ranks; else None) and whether
    a rank started late."""
    import torch
    import torch.distributed as dist

    rank, world, ctrl = r.rank, r.world, r.ctrl
    dist.barrier()
    r.sync()
    was_late = 0
    if m.start == "aligned":
        dl = torch.tensor([_now_ns() + m.start_lead_us * 1000 if rank == 0 else 0], dtype=torch.int64,
                          device=ctrl)
        dist.all_reduce(dl, op=dist.ReduceOp.MAX)   # rank 0's deadline; the others sent 0
        deadline = int(dl.item())
        was_late = int(_now_ns() > deadline)
        while _now_ns() < deadline:
            pass
    launched_ns = _now_ns()
    if r.gpu and m.timer == "events":
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        issue()
        e.record()
        e.synchronize()
        t_us = s.elapsed_time(e) * 1e3 / r.a.iters
    else:  # host clock from the first launch to the end of a synchronize (nccl-tests)
        t0 = time.perf_counter()
        issue()
        r.sync()
        t_us = (time.perf_counter() - t0) * 1e6 / r.a.iters
    tt = torch.tensor([t_us], dtype=torch.float64, device=ctrl)
    dist.all_reduce(tt)                        # mean over ranks, as nccl-tests reports
    skew = None
    if one_host and world > 1:                 # how far apart the ranks launched, and whether any was late
        lt = torch.tensor([launched_ns, -launched_ns, was_late], dtype=torch.int64, device=ctrl)
        dist.all_reduce(lt, op=dist.ReduceOp.MAX)
        skew = (int(lt[0]) + int(lt[1])) / 1e3
        was_late = int(lt[2])
    return float(tt.item()) / world, skew, was_late


def _point(r: _Rank, op: str, count: int, one_host: bool) -> dict:
    """One size of one op: checked once, warmed up, (graph: captured), then `repeats` timed blocks."""
    import torch

    a, esize = r.a, torch.empty((), dtype=r.dtype).element_size()
    nbytes = count * esize
    m = r.method.for_op(op)               # all_to_all is always out of place
    placement = m.placement
    r.check(op, count, placement)
    # nccl-tests' offsets: iteration i at (i mod rotate/size) x size; only the first
    # max(iters, warmup) offsets are ever used, so only those are allocated
    steps = max(1, m.rotate_bytes // nbytes) if m.rotate_bytes > 0 else 1
    steps = min(steps, max(a.iters, a.warmup, 1))
    pool_x = torch.zeros(count * steps, dtype=r.dtype, device=r.device)   # zeros: repeated sums stay finite
    pool_y = torch.zeros_like(pool_x)
    views = [(pool_x[k * count:(k + 1) * count], pool_y[k * count:(k + 1) * count]) for k in range(steps)]

    def block(n):
        for i in range(n):
            x, y = views[i % steps]
            r.run(op, x, y, placement)

    for i in range(a.warmup):
        x, y = views[i % steps]
        r.run(op, x, y, placement)
    r.sync()
    graph = _capture(r, block, a.iters) if m.harness == "graph" else None
    issue = graph.replay if graph is not None else (lambda: block(a.iters))
    times, skews, late = [], [], 0
    for _ in range(a.repeats):
        t, skew, was_late = _timed_block(r, m, issue, one_host)
        times.append(t)
        if skew is not None:
            skews.append(skew)
        late += was_late
    del pool_x, pool_y, views, graph
    return {"op": op, "backend": a.backend, "variant": a.variant, "world_size": r.world,
            "dtype": a.dtype, "count": count, "size_bytes": nbytes, "iters": a.iters,
            "repeats": a.repeats, "warmup": a.warmup, "times_us": times,
            **m.as_row(),                                  # the method: its label and every field
            "start_skew_us": skews if skews else None, "late_starts": late, "hosts": r.hosts,
            "device": torch.cuda.get_device_name(r.device) if r.gpu else "cpu"}


def _sweep(r: _Rank) -> None:
    """Every op at every size; the book's node's first rank appends each finished point to --out."""
    import torch

    esize = torch.empty((), dtype=r.dtype).element_size()
    # torchrun tells each rank how many ranks share its node: all of them share one host when that is all;
    # across nodes, the ranks' host names (the handshake) say whether they share one (two nodes in a test)
    one_host = r.hosts == 1
    out = r.a.out if not r.a.join and r.local == 0 else None   # the book's node's first rank appends the points
    for op in r.a.ops.split(","):
        for size in [int(s) for s in r.a.sizes.split(",")]:
            count = size // esize
            if op == "all_to_all":
                count = (count // r.world) * r.world
            if count == 0:
                continue
            row = _point(r, op, count, one_host)
            if out is not None:
                from helpers.core.results import append_row   # whole or absent, fsynced

                append_row(out, row)


def _teardown(r: _Rank) -> int:
    import torch.distributed as dist

    dist.barrier()
    if r.method.harness == "graph" and r.gpu:
        # Measured on two H200s (torch 2.11, NCCL 2.28): after NCCL collectives were captured in CUDA
        # graphs, destroy_process_group never returns on either rank, though every point is written; on
        # one H200 with one rank, ncclCommAbort of our own communicator never returns after captured
        # grouped ncclSend/ncclRecv (all_to_all). The results are on disk and the barrier above has
        # passed, so leave without the teardown.
        r.sync()
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(0)
    if r.comm is not None:
        r.sync()
        r.comm.abort()
    dist.destroy_process_group()
    return 0


def main(argv=None) -> int:
    r = _settle(list(argv if argv is not None else sys.argv[1:]))
    _start(r)
    _sweep(r)
    return _teardown(r)


if __name__ == "__main__":
    raise SystemExit(main())
