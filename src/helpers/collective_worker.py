"""One rank of the collective sweep; launched by torchrun (see helpers.collectives.run_collectives).

Per size it follows nccl-tests' BenchTime: warm-up collectives, then a barrier, then `iters` back-to-back
collectives timed as one block (CUDA events on the GPU; perf_counter on CPU/gloo, where the call returns
when the work is done); the block time / iters is averaged over ranks (nccl-tests' default `-a 1`).
That is repeated `repeats` times for a spread. Before timing, each op is checked once for a correct
result. Rank 0 appends one JSON line per finished point to --out, so a killed run keeps what finished.

all_reduce through torch.distributed is in place (the API has no separate output buffer), so it is
compared with nccl-tests' in-place columns; all_to_all_single is out of place.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _parse(argv):
    ap = argparse.ArgumentParser(prog="python -m helpers.collective_worker")
    ap.add_argument("--backend", required=True, choices=["gloo", "nccl"])
    ap.add_argument("--ops", default="all_reduce,all_to_all")
    ap.add_argument("--sizes", required=True, help="comma-separated byte counts")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variant", default="default")
    ap.add_argument("--out", required=True)
    ap.add_argument("--hang-rank", type=int, default=-1,
                    help="testing only: this rank sleeps forever before the first collective")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    a = _parse(argv if argv is not None else sys.argv[1:])
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if a.backend == "nccl":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    dtype = getattr(torch, a.dtype)
    esize = torch.empty((), dtype=dtype).element_size()
    gpu = device.type == "cuda"

    def sync():
        if gpu:
            torch.cuda.synchronize(device)

    if a.hang_rank == rank:
        time.sleep(10**6)

    def run(op, x, y):
        if op == "all_reduce":
            dist.all_reduce(x)
        else:
            dist.all_to_all_single(y, x)

    def check(op, count):
        x = torch.full((count,), float(rank + 1), dtype=dtype, device=device)
        y = torch.empty_like(x)
        run(op, x, y)
        sync()
        if op == "all_reduce":
            ok = bool(torch.all(x == world * (world + 1) / 2))
        else:  # block j of rank r's output comes from rank j
            want = torch.arange(1, world + 1, dtype=dtype, device=device).repeat_interleave(count // world)
            ok = bool(torch.equal(y, want))
        if not ok:
            raise RuntimeError(f"{op} gave a wrong result on rank {rank} (count {count})")

    out = open(a.out, "a") if rank == 0 else None
    for op in a.ops.split(","):
        for size in [int(s) for s in a.sizes.split(",")]:
            count = size // esize
            if op == "all_to_all":
                count = (count // world) * world
            if count == 0:
                continue
            nbytes = count * esize
            check(op, count)
            x = torch.zeros(count, dtype=dtype, device=device)   # zeros: repeated sums stay finite
            y = torch.empty_like(x)
            for _ in range(a.warmup):
                run(op, x, y)
            sync()
            times = []
            for _ in range(a.repeats):
                dist.barrier()
                sync()
                if gpu:
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    for _ in range(a.iters):
                        run(op, x, y)
                    e.record()
                    e.synchronize()
                    t_us = s.elapsed_time(e) * 1e3 / a.iters
                else:
                    t0 = time.perf_counter()
                    for _ in range(a.iters):
                        run(op, x, y)
                    t_us = (time.perf_counter() - t0) * 1e6 / a.iters
                tt = torch.tensor([t_us], dtype=torch.float64, device=device)
                dist.all_reduce(tt)                        # mean over ranks, as nccl-tests reports
                times.append(float(tt.item()) / world)
            if out is not None:
                out.write(json.dumps({
                    "op": op, "backend": a.backend, "variant": a.variant, "world_size": world,
                    "dtype": a.dtype, "count": count, "size_bytes": nbytes, "iters": a.iters,
                    "repeats": a.repeats, "warmup": a.warmup, "times_us": times,
                    "placement": "in-place" if op == "all_reduce" else "out-of-place",
                    "device": torch.cuda.get_device_name(device) if gpu else "cpu",
                }) + "\n")
                out.flush()
            del x, y
    if out is not None:
        out.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
