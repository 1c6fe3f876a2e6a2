"""Compare our interconnect harness with nccl-tests and cuda-samples on this GPU host (issue 4, Fidelity).

    python3 benchmarks/fidelity.py --ext .ext --out OUTDIR            # on a GPU host

Builds nccl-tests' all_reduce_perf and cuda-samples' p2pBandwidthLatencyTest for sm_90 with
benchmarks/fidelity/build.sh (their sources must be under --ext: nccl-tests/src/{common.cu, common.h,
all_reduce.cu, timer.cc, timer.h, nccl1_compat.h} and cuda-samples/p2pBandwidthLatencyTest/
p2pBandwidthLatencyTest.cu; they are never committed), runs them, runs our harness on the same sizes
(NCCL all-reduce with one rank through helpers.collectives; same-device copies through
helpers.copybench; ncclAllReduce called directly through torch.cuda.nccl, which isolates the
timing method from torch.distributed's own per-call cost), and writes to OUTDIR:

  fidelity.csv                       the comparison (helpers.fidelity.COLUMNS)
  nccl_tests_all_reduce.txt          all_reduce_perf -b 8 -e 256M -f 2 -g 1, stdout
  nccl_tests_all_reduce_graph.txt    the same with -G 1 (CUDA graph)
  p2pBandwidthLatencyTest.txt        p2pBandwidthLatencyTest, stdout
  ours_collectives.csv, ours_copies.csv   our raw points
A tool that fails to build or run is reported and the rest still runs.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from helpers import collectives, copybench, fidelity  # noqa: E402

ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
       "NCCL_DEBUG": "VERSION"}
MAX_BYTES = 256 * 2**20
SIZES = [8 * 2**k for k in range(26)]      # 8 B .. 256 MiB, x2: all_reduce_perf -b 8 -e 256M -f 2


def sh(cmd: list[str], log: Path, timeout: float) -> tuple[int, str]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **ENV})
        text, rc = p.stdout + (("\n[stderr]\n" + p.stderr) if p.stderr.strip() else ""), p.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = f"{(e.stdout or b'')!s}\n[timeout after {timeout} s]", 124
    except OSError as e:
        text, rc = f"[could not start {cmd[0]}: {e}]", 127
    log.write_text(text)
    print(f"$ {' '.join(cmd)}  -> rc {rc} in {time.perf_counter() - t0:.1f} s", flush=True)
    return rc, text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ext", default=str(ROOT / ".ext"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--build", default="/tmp/fidelity-build")
    ap.add_argument("--skip-build", action="store_true")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    if not torch.cuda.is_available():
        print("fidelity: torch sees no CUDA GPU here; run this on a GPU host", file=sys.stderr)
        return 2
    device = f"1x {torch.cuda.get_device_name(0)}"
    t_all = time.perf_counter()
    build = Path(a.build)
    ar_bin, p2p_bin = build / "nccl-tests" / "all_reduce_perf", build / "p2p" / "p2pBandwidthLatencyTest"
    if not a.skip_build:
        rc, text = sh(["bash", str(ROOT / "benchmarks" / "fidelity" / "build.sh"), a.ext, str(build)],
                      out / "build.log", 400)
        print(text[-3000:])

    # ---- the tools
    tool_txt = {}
    for name, cmd in (("nccl_tests_all_reduce", [str(ar_bin), "-b", "8", "-e", "256M", "-f", "2", "-g", "1"]),
                      ("nccl_tests_all_reduce_graph",
                       [str(ar_bin), "-b", "8", "-e", "256M", "-f", "2", "-g", "1", "-G", "1"]),
                      ("p2pBandwidthLatencyTest", [str(p2p_bin)])):
        rc, text = sh(cmd, out / f"{name}.txt", 180)
        print(text[-2500:], flush=True)
        tool_txt[name] = text if rc == 0 else ""

    # ---- ours: collectives (one rank), the existing method and nccl-tests' method
    runs = [  # (harness, timer, placement, rotate)
        ("eager", "events", "in-place", 0),
        ("eager", "host", "in-place", MAX_BYTES), ("eager", "host", "out-of-place", MAX_BYTES),
        ("graph", "host", "in-place", MAX_BYTES), ("graph", "host", "out-of-place", MAX_BYTES),
    ]
    results = []
    for h, tm, pl, rot in runs:
        t0 = time.perf_counter()
        r = collectives.run_collectives("nccl", 1, SIZES, ops=("all_reduce",), warmup=5, iters=20, repeats=5,
                                        timeout_s=180, harness=h, timer=tm, placement=pl, rotate_bytes=rot,
                                        env={"NCCL_DEBUG": "VERSION"}, workdir="/tmp/fidelity-points")
        print(f"ours {h}/{tm}/{pl}/rotate={rot}: {r.status} {len(r.rows)} points in "
              f"{time.perf_counter() - t0:.1f} s {r.message[-800:]}", flush=True)
        if r.status != "ok":
            print(r.log[-3000:])
        results.append(r)
    # ---- ours: ncclAllReduce called directly (torch.cuda.nccl), the same timing options
    for h, tm, pl, rot in runs[1:]:
        t0 = time.perf_counter()
        try:
            r = collectives.measure_direct(SIZES, placement=pl, harness=h, timer=tm, rotate_bytes=rot)
            print(f"ours direct {h}/{tm}/{pl}: {len(r.rows)} points in {time.perf_counter() - t0:.1f} s", flush=True)
            results.append(r)
        except Exception as e:  # reported, the rest goes on
            print(f"ours direct {h}/{tm}/{pl}: {type(e).__name__}: {e}", flush=True)
    coll = collectives.tidy(results, device_label=device)
    coll.to_csv(out / "ours_collectives.csv", index=False)
    torch_nccl = fidelity.nccl_tests_version("\n".join(r.log for r in results))

    # ---- ours: copies, at p2pBandwidthLatencyTest's sizes and repeat counts
    copies = []
    for size, iters in ((fidelity.P2P_LARGE_BYTES, 5), (fidelity.P2P_SMALL_BYTES, 100)):
        for h in copybench.HARNESSES:
            try:
                st = copybench.measure("same_device", size, h, iters=iters, repeats=7, warmup=3)
            except Exception as e:  # reported, the rest goes on
                print(f"copy {h} {size}: {type(e).__name__}: {e}")
                continue
            bw = size / (st["time_us"] * 1e3)
            copies.append({"path": "same_device", "harness": h, "size_bytes": size, "iters": iters, "repeats": 7,
                           **st, "bandwidth_GBps": bw, "p2ptest_GBps": 2 * bw, "device": device})
    cp = pd.DataFrame(copies)
    cp.to_csv(out / "ours_copies.csv", index=False)

    # ---- comparison
    rows = []
    labels = {"eager": "torch.distributed eager, CUDA events, one buffer (our default)",
              "eager+host_timer+rotate": "torch.distributed eager, host timer, rotating buffers",
              "graph+host_timer+rotate": "torch.distributed in one CUDA graph, host timer, rotating buffers",
              "direct eager": "ncclAllReduce direct (torch.cuda.nccl), eager, host timer, rotating buffers",
              "direct graph": "ncclAllReduce direct (torch.cuda.nccl) in one CUDA graph, host timer, rotating buffers"}
    direct = coll[coll.backend == "nccl-direct"]
    coll = coll[coll.backend != "nccl-direct"]
    if tool_txt["nccl_tests_all_reduce"]:
        nt = fidelity.parse_nccl_tests(tool_txt["nccl_tests_all_reduce"])
        rows += fidelity.compare_all_reduce(nt, coll, "-g 1", "eager+host_timer+rotate",
                                            labels["eager+host_timer+rotate"], True, device)
        rows += fidelity.compare_all_reduce(nt, coll, "-g 1", "eager", labels["eager"], False, device,
                                            placements=("in-place",))
        rows += fidelity.compare_all_reduce(nt, direct, "-g 1", "eager+host_timer+rotate",
                                            labels["direct eager"], True, device)
    if tool_txt["nccl_tests_all_reduce_graph"]:
        ng = fidelity.parse_nccl_tests(tool_txt["nccl_tests_all_reduce_graph"])
        rows += fidelity.compare_all_reduce(ng, coll, "-g 1 -G 1", "graph+host_timer+rotate",
                                            labels["graph+host_timer+rotate"], True, device)
        rows += fidelity.compare_all_reduce(ng, direct, "-g 1 -G 1", "graph+host_timer+rotate",
                                            labels["direct graph"], True, device)
    if tool_txt["p2pBandwidthLatencyTest"] and len(cp):
        m = fidelity.parse_p2p(tool_txt["p2pBandwidthLatencyTest"])
        big = cp[cp.size_bytes == fidelity.P2P_LARGE_BYTES].set_index("harness")
        small = cp[cp.size_bytes == fidelity.P2P_SMALL_BYTES].set_index("harness")
        hl = {"queued": "copybench queued (spin kernel holds the stream, CUDA events)",
              "graph": "copybench graph (copies in one CUDA graph, CUDA events)",
              "eager": "copybench eager (Python-issued, host clock)"}
        for h in big.index:
            rows.append(fidelity.row("same-device copy bandwidth, read+write counted", "p2pBandwidthLatencyTest",
                                     "unidirectional, P2P=Disabled, diagonal", fidelity.P2P_LARGE_BYTES, "GB/s",
                                     m["bw_uni_p2p_off"][0][0], float(big.loc[h, "p2ptest_GBps"]), hl[h],
                                     h == "queued", fidelity.TOLERANCES["copy_bandwidth"], device))
        for h in small.index:
            rows.append(fidelity.row("same-device 16 B copy, GPU time per copy", "p2pBandwidthLatencyTest",
                                     "latency, P2P=Disabled, GPU, diagonal", fidelity.P2P_SMALL_BYTES, "us",
                                     m["lat_p2p_off_gpu"][0][0], float(small.loc[h, "time_us"]), hl[h],
                                     h == "queued", None, device))
        if "eager" in small.index and m.get("lat_p2p_off_cpu"):
            rows.append(fidelity.row("same-device 16 B copy, host time per copy", "p2pBandwidthLatencyTest",
                                     "latency, P2P=Disabled, CPU, diagonal", fidelity.P2P_SMALL_BYTES, "us",
                                     m["lat_p2p_off_cpu"][0][0], float(small.loc["eager", "time_us"]),
                                     hl["eager"] + "; includes the copy and a final synchronize", False, None,
                                     device))
    table = pd.DataFrame(rows, columns=fidelity.COLUMNS)
    table["nccl_version"] = fidelity.nccl_tests_version(tool_txt.get("nccl_tests_all_reduce", "")) or ""
    table["torch_nccl_version"] = torch_nccl
    table["torch_version"] = torch.__version__
    table.to_csv(out / "fidelity.csv", index=False)
    pd.set_option("display.width", 250)
    print(table.drop(columns=["kind", "ours_method"]).to_string(index=False))
    print(fidelity.verdict(table).to_string(index=False))
    print(f"fidelity: {len(table)} rows in {time.perf_counter() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
