"""This machine's GPU pairs checked four ways, and its all-reduce at the decode sizes timed as the decisive recipe
times it.

For every GPU pair, four ways P2P can be real or not (the four steps of the diagnosis's check, `WAYS`):

1. **grant**: the driver's answer (`nvidia-smi topo -p2p r`; the probe's NVML matrix, else CUDA's
   `can_device_access_peer`);
2. **bandwidth**: a 64 MiB copy from one GPU to the other against the same bytes staged through pinned host
   memory on the same pair, both timed here: a direct path is at least `DIRECT_RATIO` times faster;
3. **write**: the owner-side write check of helpers.interconnect.peercheck (GPU A writes, GPU B reads back
   locally: a false clique grant leaves B's own fill, NVIDIA/nccl#2335);
4. **nccl**: the transport NCCL chose between the two ranks, read from its `NCCL_DEBUG=INFO` log
   ("via P2P/..." against "via SHM/...": `transports`).

`measure(out_dir)` runs on the GPU host in a child process (`python -m helpers.interconnect.pairs --out DIR`,
under a keeper with a time limit, so a hung NCCL from a false grant cannot hang the book): the pair checks, then
ncclAllReduce from one process over every GPU at the decode sizes (helpers.interconnect.collectives.measure_direct,
eager, host timer, out of place, `WARMUP` and `ITERS` as `RECIPE`, nccl-tests' `-g N`), with `NCCL_DEBUG=INFO`
written to a file. Everything else here is pure: `pair_table` judges what was measured (or what a run has of it).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

#: the decisive recipe: nccl-tests all_reduce_perf from 1 to 64 tokens, one process on every GPU, eager
RECIPE = "./build/all_reduce_perf -b 12288 -e 786432 -f 4 -g {gpus} -d half -w 40 -n 100 -c 0"
WARMUP, ITERS, REPEATS = 40, 100, 5
#: a direct copy at least this many times faster than the same bytes through host memory counts as direct
DIRECT_RATIO = 1.5
COPY_BYTES = 64 << 20
WAYS = {"grant": "driver grant", "bandwidth": "bandwidth", "write": "owner-side write", "nccl": "NCCL transport"}
#: what to do where a way fails (the setting, and what it is predicted to move is the chapter's to say)
REMEDIES = {
    "grant": ("expose a GPUDirect clique to the guest (QEMU vfio-pci `x-nv-gpudirect-clique=N` on every GPU of the "
              "clique) or run on bare metal; on bare metal check ACS redirect (`lspci -vvv | grep ACSCtl`)"),
    "bandwidth": ("the direct copy runs no faster than through host memory: check the PCIe topology "
                  "(`nvidia-smi topo -m`) and ACS redirect on the bridges above the GPUs"),
    "write": ("the grant is false (the writes land in a private copy): keep P2P off in the engine "
              "(`NCCL_P2P_DISABLE=1`, custom all-reduce off) until the hypervisor's mapping is fixed"),
    "nccl": ("NCCL routes through host memory although P2P works: set `NCCL_P2P_LEVEL=SYS` (or give NCCL a "
             "topology file, `NCCL_TOPO_FILE`) and check the log again"),
}
OK, FAIL, NOT_MEASURED = "ok", "fails", "not measured"

_CHANNEL = re.compile(r"Channel\s+\d+/\d+\s*:\s*(\d+)\[[^\]]*\]\s*->\s*(\d+)\[[^\]]*\](?:\s*\[\w+\])?\s*via\s+(\S+)")
_VERSION = re.compile(r"NCCL version\s+([\w.+-]+)")


class PairsError(ValueError):
    """Pair measurements that do not fit together; the message names what."""


# ------------------------------------------------------------------------------------------ NCCL's log
def transports(log: str) -> dict[tuple[int, int], set[str]]:
    """(rank a, rank b) -> the transports NCCL's INFO log names for the connection a -> b
    ("P2P/CUMEM/read", "SHM/direct/direct", "NET/Socket/0", ...); with one process over every GPU (nccl-tests'
    -g N, measure_direct) rank i is GPU i."""
    out: dict[tuple[int, int], set[str]] = {}
    for m in _CHANNEL.finditer(log or ""):
        out.setdefault((int(m.group(1)), int(m.group(2))), set()).add(m.group(3))
    return out


def nccl_version(log: str) -> str | None:
    m = _VERSION.search(log or "")
    return m.group(1) if m else None


def transport_kind(names: set[str]) -> str:
    """'P2P' where every channel between the two goes GPU to GPU, 'SHM' where any goes through host memory,
    else the first name's prefix."""
    kinds = {n.split("/")[0] for n in names}
    return "P2P" if kinds == {"P2P"} else "SHM" if "SHM" in kinds else sorted(kinds)[0]


# ------------------------------------------------------------------------------------------ judging
@dataclass(frozen=True)
class Way:
    status: str        # OK, FAIL or NOT_MEASURED
    evidence: str


def _grant(code: str | None) -> Way:
    if code is None:
        return Way(NOT_MEASURED, "no P2P matrix in this run")
    return Way(OK if code == "OK" else FAIL, f"`{code}`")


def _bandwidth(peer: float | None, host: float | None) -> Way:
    if peer is None or host is None or not (np.isfinite(peer) and np.isfinite(host)) or host <= 0:
        return Way(NOT_MEASURED, "no copy of this pair timed both ways in this run")
    r = peer / host
    return Way(OK if r >= DIRECT_RATIO else FAIL,
               f"{peer:.1f} GB/s direct, {host:.1f} through host memory ({r:.1f}x; direct needs {DIRECT_RATIO:g}x)")


def _write(verdict: str | None, access=None) -> Way:
    if verdict is None or verdict == "skipped":
        return Way(NOT_MEASURED, "the owner-side write check did not run in this run")
    if access is not None and not bool(access) and verdict == "ok":
        return Way(NOT_MEASURED, "no grant: the copy went through host memory, so no P2P write was tested")
    return Way(OK if verdict == "ok" else FAIL, verdict)


def _nccl(names: set[str] | None, nccl_ran: bool) -> Way:
    if not nccl_ran:
        return Way(NOT_MEASURED, "no NCCL log in this run")
    if not names:
        return Way(NOT_MEASURED, "NCCL connected these two through other ranks (no direct channel)")
    kind = transport_kind(names)
    return Way(OK if kind == "P2P" else FAIL, ", ".join(sorted(names)))


def pair_table(gpus: int, grant: list[list[str]] | None = None, copies: pd.DataFrame | None = None,
               writes: pd.DataFrame | None = None, log: str | None = None) -> pd.DataFrame:
    """One row per unordered GPU pair: each way's status and evidence (both directions: the worse counts), and
    the remedy of the first way that fails. `grant`: the N x N legend-code matrix; `copies`: columns a, b,
    peer_GBps, host_GBps; `writes`: columns writer, owner, verdict; `log`: NCCL's INFO log (None: not run)."""
    if gpus < 2:
        return pd.DataFrame(columns=["pair", *WAYS, "first failing", "remedy"])
    cp = {(int(r.a), int(r.b)): r for r in copies.itertuples()} if copies is not None and len(copies) else {}
    wr = ({(int(r.writer), int(r.owner)): (str(r.verdict), getattr(r, "peer_access", None))
           for r in writes.dropna(subset=["writer", "owner"]).itertuples()} if writes is not None else {})
    tr = transports(log) if log is not None else {}
    rows = []
    for a in range(gpus):
        for b in range(a + 1, gpus):
            ways = {}
            for d in ((a, b), (b, a)):
                c = cp.get(d)
                got = {"grant": _grant(grant[d[0]][d[1]] if grant else None),
                       "bandwidth": _bandwidth(getattr(c, "peer_GBps", None), getattr(c, "host_GBps", None)),
                       "write": _write(*wr.get(d, (None, None))),
                       "nccl": _nccl(tr.get(d), log is not None)}
                for k, w in got.items():
                    if k not in ways or _worse(w, ways[k]):
                        ways[k] = w
            first = next((k for k in WAYS if ways[k].status == FAIL), None)
            rows.append({"pair": f"GPU {a} - GPU {b}", **{k: f"{w.status}: {w.evidence}" for k, w in ways.items()},
                         "first failing": WAYS[first] if first else "none", "remedy": REMEDIES[first] if first else ""})
    return pd.DataFrame(rows)


def _worse(w: Way, than: Way) -> bool:
    order = {FAIL: 2, OK: 1, NOT_MEASURED: 0}
    return order[w.status] > order[than.status]


def way_counts(table: pd.DataFrame) -> dict[str, dict[str, int]]:
    """way -> {status: how many pairs}."""
    return {k: {s: int(table[k].str.startswith(s + ":").sum()) for s in (OK, FAIL, NOT_MEASURED)} for k in WAYS}


# ------------------------------------------------------------------------------------------ measuring (GPU)
def _copy_GBps(src, dst, reps: int) -> float:
    import torch

    times = []
    for _ in range(reps):
        torch.cuda.synchronize(src.device)
        torch.cuda.synchronize(dst.device)
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize(src.device)
        torch.cuda.synchronize(dst.device)
        times.append(time.perf_counter() - t0)
    return src.numel() * src.element_size() / float(np.median(times)) / 1e9


def _bounce_GBps(src, dst, host, reps: int) -> float:
    import torch

    times = []
    for _ in range(reps):
        torch.cuda.synchronize(src.device)
        t0 = time.perf_counter()
        host.copy_(src)
        dst.copy_(host)
        torch.cuda.synchronize(dst.device)
        times.append(time.perf_counter() - t0)
    return src.numel() * src.element_size() / float(np.median(times)) / 1e9


def measure_pairs(gpus: int, copy_bytes: int = COPY_BYTES, reps: int = 5) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every ordered pair: the direct copy and the host-staged copy (GB/s, median of `reps`, one warm-up each),
    and the owner-side write check. Returns (copies, writes)."""
    import torch

    from helpers.interconnect import peercheck

    n = copy_bytes // 4
    host = torch.empty(n, dtype=torch.int32, pin_memory=True)
    copies, writes = [], []
    for a in range(gpus):
        src = torch.ones(n, dtype=torch.int32, device=f"cuda:{a}")
        for b in range(gpus):
            if a == b:
                continue
            dst = torch.empty(n, dtype=torch.int32, device=f"cuda:{b}")
            _copy_GBps(src, dst, 1), _bounce_GBps(src, dst, host, 1)
            copies.append({"a": a, "b": b, "bytes": copy_bytes,
                           "grant": bool(torch.cuda.can_device_access_peer(a, b)),
                           "peer_GBps": _copy_GBps(src, dst, reps), "host_GBps": _bounce_GBps(src, dst, host, reps)})
            writes.append(peercheck.peer_write_readback(a, b).row())
            del dst
        del src
    return pd.DataFrame(copies), pd.DataFrame(writes)


def measure_allreduce(gpus: int, sizes) -> pd.DataFrame:
    """ncclAllReduce from one process over GPUs 0..gpus-1 at `sizes` bytes of half precision, as `RECIPE`
    (eager, host timer, out of place, buffers rotating within the largest size): the tidy table of
    helpers.interconnect.collectives (its `time_us` is the median of REPEATS blocks of ITERS calls)."""
    from helpers.interconnect import collectives
    from helpers.interconnect.method import Method

    m = Method.direct(timer="host", placement="out-of-place", rotate_bytes=int(max(sizes)))
    r = collectives.measure_direct(list(sizes), method=m, warmup=WARMUP, iters=ITERS, repeats=REPEATS,
                                   dtype="float16", gpus=gpus)
    return collectives.tidy([r])


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m helpers.interconnect.pairs",
                                 description="Check every GPU pair four ways and time the decode-size all-reduce "
                                             "over every GPU (writes pairs_copies.csv, pairs_writes.csv, "
                                             "allreduce.csv and meta.json into --out; run with NCCL_DEBUG=INFO "
                                             "NCCL_DEBUG_FILE=<out>/nccl.log for the transports).")
    ap.add_argument("--out", required=True, help="the folder to write into")
    ap.add_argument("--sizes", default="12288,49152,196608,786432", help="all-reduce sizes in bytes, comma-separated")
    a = ap.parse_args(argv)
    import torch

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    meta = {"gpus": gpus, "device": torch.cuda.get_device_name(0) if gpus else None, "recipe": RECIPE.format(gpus=gpus)}
    if gpus >= 2:   # one GPU has no pair, and a one-rank all-reduce moves nothing between GPUs
        copies, writes = measure_pairs(gpus)
        copies.to_csv(out / "pairs_copies.csv", index=False)
        writes.to_csv(out / "pairs_writes.csv", index=False)
        measure_allreduce(gpus, [int(s) for s in a.sizes.split(",")]).to_csv(out / "allreduce.csv", index=False)
    (out / "meta.json").write_text(json.dumps(meta))
    return 0


#: the files `measure` leaves in its folder
FILES = ("pairs_copies.csv", "pairs_writes.csv", "allreduce.csv", "meta.json", "nccl.log")


def measure(out_dir: str | Path, sizes, timeout_s: float = 300.0) -> dict:
    """Run the checks and the all-reduce in a child process under a keeper (a hung NCCL is ended at
    `timeout_s`), with NCCL's INFO log written to out_dir/nccl.log. Returns the keeper's report plus what
    the child printed (its error, where it failed)."""
    from helpers.core import procs

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT", "NCCL_DEBUG_FILE": str(out / "nccl.log")}
    argv = [sys.executable, "-m", "helpers.interconnect.pairs", "--out", str(out),
            "--sizes", ",".join(str(int(s)) for s in sizes)]
    p = procs.popen(argv, timeout_s=timeout_s, report=out / "keeper.json", env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text, _ = p.communicate()
    rep = procs.read_report(out / "keeper.json")
    return {**rep, "returncode": p.returncode, "output": (text or "")[-2000:]}


def gpu_count() -> int:
    """The GPUs torch sees here (0 without torch or CUDA)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def load(out_dir: str | Path) -> dict:
    """What `measure` left in out_dir: copies, writes, allreduce (DataFrames or None), meta (dict or None) and
    the NCCL log (text or None)."""
    out = Path(out_dir)
    csv = lambda f: pd.read_csv(out / f) if (out / f).exists() else None  # noqa: E731
    return {"copies": csv("pairs_copies.csv"), "writes": csv("pairs_writes.csv"), "allreduce": csv("allreduce.csv"),
            "meta": json.loads((out / "meta.json").read_text()) if (out / "meta.json").exists() else None,
            "log": (out / "nccl.log").read_text(errors="replace") if (out / "nccl.log").exists() else None}


if __name__ == "__main__":
    sys.exit(_main())
