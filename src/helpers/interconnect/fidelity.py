"""Fidelity of the interconnect harness: our figures against nccl-tests and cuda-samples on one machine.

Issue 4 asks that helpers.interconnect.collectives and helpers.interconnect.copies measure as nccl-tests' all_reduce_perf and
cuda-samples' p2pBandwidthLatencyTest do, so that on the same machine all-reduce times agree within
`TOLERANCES["all_reduce_time"]` at every size and large-copy bandwidth within
`TOLERANCES["copy_bandwidth"]`. benchmarks/fidelity.py runs both tools and our harness on a GPU host;
this module parses the tools' printed output and builds the comparison table (`COLUMNS`): every row
names the tool's setting and our method, as a helpers.interconnect.method.Method (its label and fields)
for an all-reduce and as a copy harness for a copy. helpers.interconnect.studies loads the registered
comparisons; benchmarks/allreduce_gap.py's table is summarised by `gap_summary`.

How the tools count (read from their sources):
- all_reduce_perf: per size, one untimed call, then `iters` (20) calls timed by a host clock from the
  first launch to the end of a stream synchronize; time = elapsed / iters, averaged over ranks; both
  out-of-place and in-place; buffers rotate through the max size; with -G N the iters calls are
  captured in one CUDA graph launched N times. algbw = S / t, busbw = algbw x 2(n-1)/n.
- p2pBandwidthLatencyTest: bandwidth = 5 copies of 40,000,000 ints queued behind a spin kernel,
  timed by CUDA events; on the diagonal (same GPU) the bytes are counted twice (read and write).
  Latency = 100 copies of 16 bytes queued the same way: GPU time / 100; the CPU figure is the host
  time to enqueue them / 100.
"""
from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import tempfile
import time
from typing import Iterable

import numpy as np
import pandas as pd

from helpers.interconnect.method import COLUMNS as METHOD_COLUMNS, Method

TOLERANCES = {"all_reduce_time": 0.10, "copy_bandwidth": 0.05}

#: Every comparison table has these (files written before methods were objects: these only).
BASE_COLUMNS = ["quantity", "tool", "tool_setting", "size_bytes", "unit", "tool_value", "ours_value", "ours_method",
                "same_method", "ratio", "tolerance", "within_tolerance", "kind"]
#: ... and today also the setup, the copy harness of a copy row and the method of an all-reduce row.
COLUMNS = BASE_COLUMNS + ["setup", "copy_harness"] + list(METHOD_COLUMNS)

P2P_LARGE_BYTES = 40_000_000 * 4    # p2pBandwidthLatencyTest's default numElems ints
P2P_SMALL_BYTES = 4 * 4             # its latency copy: one int4

_NCCL_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+" + r"\s+".join([r"(\S+)"] * 8) + r"\s*$")


class ToolOutputError(ValueError):
    """Tool output that does not have the expected shape; the message names the tool and what was missing."""


def run_processes(cmd: list[str], n: int, timeout: float, env: dict) -> tuple[int, str]:
    """Run `cmd` (nccl-tests built against benchmarks/fidelity/mpishim) as n processes on this host that
    meet through one shared memory file, as `mpirun -np n` would start them. Returns the worst exit
    status and rank 0's output (every rank's where one failed); a rank that outlives `timeout` is killed
    with all the others."""
    shm_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
    fd, shm = tempfile.mkstemp(prefix="nccltests-shim-", dir=shm_dir)
    os.close(fd)
    outs = [tempfile.TemporaryFile(mode="w+") for _ in range(n)]
    procs = []
    try:
        for r in range(n):
            procs.append(subprocess.Popen(cmd, stdout=outs[r], stderr=subprocess.STDOUT, text=True,
                                          start_new_session=True,
                                          env={**env, "NCCLTESTS_SHIM_RANK": str(r), "NCCLTESTS_SHIM_SIZE": str(n),
                                               "NCCLTESTS_SHIM_FILE": shm}))
        deadline, rcs = time.monotonic() + timeout, []
        for p in procs:
            try:
                rcs.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                rcs.append(124)
        if 124 in rcs:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        texts = []
        for f in outs:
            f.seek(0)
            texts.append(f.read())
        rc = max(rcs, key=lambda x: x != 0)
        if rc == 0:
            return 0, texts[0]
        return rc, "\n".join(f"[rank {r}, exit {c}]\n{t}" for r, (c, t) in enumerate(zip(rcs, texts))) + (
            f"\n[timeout after {timeout} s]" if 124 in rcs else "")
    finally:
        for f in outs:
            f.close()
        os.unlink(shm)


def parse_nccl_tests(text: str) -> pd.DataFrame:
    """The result table of an nccl-tests binary's stdout: one row per size with out-of-place and
    in-place time (us), algbw and busbw (GB/s) and #wrong. Raises ToolOutputError if there is none."""
    rows = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _NCCL_ROW.match(line)
        if not m:
            continue
        g = m.groups()
        try:
            vals = [float(x) for x in g[5:]]
        except ValueError:
            continue
        rows.append({"size_bytes": int(g[0]), "count": int(g[1]), "type": g[2], "redop": g[3],
                     "oop_time_us": vals[0], "oop_algbw_GBps": vals[1], "oop_busbw_GBps": vals[2],
                     "oop_wrong": vals[3], "ip_time_us": vals[4], "ip_algbw_GBps": vals[5],
                     "ip_busbw_GBps": vals[6], "ip_wrong": vals[7]})
    if not rows:
        raise ToolOutputError("nccl-tests output has no result rows (lines of size, count, type, redop, root "
                              "and two time/algbw/busbw/#wrong groups); did the binary fail? Its output "
                              f"began: {text[:300]!r}")
    return pd.DataFrame(rows)


def nccl_tests_version(text: str) -> str:
    """The NCCL version line that NCCL_DEBUG=VERSION prints ('' if absent)."""
    m = re.search(r"NCCL version (\S+)", text)
    return m.group(1) if m else ""


_P2P_TITLES = {
    "bw_uni_p2p_off": "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)",
    "bw_uni_p2p_on": "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)",
    "bw_bi_p2p_off": "Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)",
    "bw_bi_p2p_on": "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)",
    "lat_p2p_off": "P2P=Disabled Latency Matrix (us)",
    "lat_p2p_on": "P2P=Enabled Latency (P2P Writes) Matrix (us)",
}


def _matrix_after(lines: list[str], start: int, header: str) -> tuple[list[list[float]], int]:
    """The numeric rows following the first line at or after `start` that begins with `header`."""
    i = start
    while i < len(lines) and not lines[i].strip().startswith(header):
        i += 1
    if i == len(lines):
        return [], i
    rows, i = [], i + 1
    while i < len(lines):
        parts = lines[i].split()
        if not parts or not re.fullmatch(r"\d+", parts[0]):
            break
        rows.append([float(x) for x in parts[1:]])
        i += 1
    return rows, i


def parse_p2p(text: str) -> dict[str, list[list[float]]]:
    """p2pBandwidthLatencyTest's matrices by name (`_P2P_TITLES`); latency blocks give '<name>_gpu' and
    '<name>_cpu'. Raises ToolOutputError when the unidirectional bandwidth or the latency is missing."""
    lines = text.splitlines()
    out: dict[str, list[list[float]]] = {}
    for key, title in _P2P_TITLES.items():
        try:
            at = next(i for i, ln in enumerate(lines) if ln.strip() == title)
        except StopIteration:
            continue
        if key.startswith("lat"):
            gpu, nxt = _matrix_after(lines, at + 1, "GPU")
            cpu, _ = _matrix_after(lines, nxt, "CPU")
            out[key + "_gpu"], out[key + "_cpu"] = gpu, cpu
        else:
            out[key], _ = _matrix_after(lines, at + 1, "D\\D")
    for need in ("bw_uni_p2p_off", "lat_p2p_off_gpu"):
        if not out.get(need):
            raise ToolOutputError(f"p2pBandwidthLatencyTest output has no {need!r} matrix (section "
                                  f"{_P2P_TITLES[need.replace('_gpu', '')]!r}); did the binary fail? "
                                  f"Its output began: {text[:300]!r}")
    return out


def median_p2p(runs: list[dict]) -> dict[str, list[list[float]]]:
    """Cell by cell, the median of several p2pBandwidthLatencyTest runs' matrices (parse_p2p output); a
    matrix whose shape differs between runs is taken from the first run alone."""
    import numpy as np

    out = {}
    for key, first in runs[0].items():
        ms = [r.get(key) for r in runs]
        try:
            a = np.array(ms, dtype=float)
        except ValueError:
            a = None
        out[key] = np.median(a, axis=0).tolist() if a is not None and a.ndim == 3 else first
    return out


def p2p_self_rows(runs: list[dict], device: str) -> list[dict]:
    """p2pBandwidthLatencyTest against itself: each run's large-copy bandwidth (the same-GPU copy and, with
    two GPUs, each peer direction with P2P on) over the median of the runs. The tool times each of these
    once per run (5 copies), so only its repeats show how far one of its figures moves."""
    med = median_p2p(runs)
    cells = [("bw_uni_p2p_off", 0, 0, "P2P=Disabled, diagonal"),
             ("bw_uni_p2p_on", 0, 1, "P2P=Enabled (writes), GPU 0 -> GPU 1"),
             ("bw_uni_p2p_on", 1, 0, "P2P=Enabled (writes), GPU 1 -> GPU 0")]
    out = []
    for k, r in enumerate(runs):
        for key, i, j, setting in cells:
            m, mm = r.get(key) or [], med.get(key) or []
            if len(m) > i and len(m[i]) > j and len(mm) > i and len(mm[i]) > j:
                out.append(row("copy bandwidth, p2pBandwidthLatencyTest against its own runs", "p2pBandwidthLatencyTest",
                               f"unidirectional, {setting}", P2P_LARGE_BYTES, "GB/s", mm[i][j], m[i][j],
                               f"p2pBandwidthLatencyTest run {k + 1} of {len(runs)} (tool: median of the runs)", True,
                               TOLERANCES["copy_bandwidth"], device))
    return out


def row(quantity: str, tool: str, tool_setting: str, size_bytes: int, unit: str, tool_value: float,
        ours_value: float, ours_method: str, same_method: bool, tolerance: float | None, device: str,
        method: Method | None = None, copy_harness: str | None = None) -> dict:
    """One comparison row: ratio = ours / tool; within_tolerance only where a tolerance applies. Ours is
    an all-reduce timed by `method` (its columns fill the row), a copy by `copy_harness`, or neither (a
    tool against itself); `ours_method` describes it for a reader."""
    ratio = ours_value / tool_value if tool_value and not math.isnan(tool_value) else float("nan")
    within = None
    if tolerance is not None and not math.isnan(ratio):
        within = bool(abs(ratio - 1) <= tolerance)
    mcols = method.as_row() if method is not None else {c: None for c in METHOD_COLUMNS}
    return {"quantity": quantity, "tool": tool, "tool_setting": tool_setting, "size_bytes": int(size_bytes),
            "unit": unit, "tool_value": tool_value, "ours_value": ours_value, "ours_method": ours_method,
            "same_method": bool(same_method), "ratio": ratio,
            "tolerance": float("nan") if tolerance is None else tolerance, "within_tolerance": within,
            "kind": f"measured: {device}, tool and ours on the same machine in one session", "setup": device,
            "copy_harness": copy_harness, **mcols}


def tool_setting(shape: str, graph: bool = False, variant: str = "default") -> str:
    """How a comparison row names an nccl-tests command: '-np 2 -g 1 -G 1, GRAPH_MIXING_SUPPORT=0' (the
    rows add ', in-place' or ', out-of-place')."""
    return shape + (" -G 1" if graph else "") + ("" if variant == "default" else f", {variant}")


def compare_all_reduce(tool: pd.DataFrame, ours: pd.DataFrame, setting: str, method: Method, same_method: bool,
                       device: str) -> list[dict]:
    """Rows for every size both tables have: nccl-tests' time (the column of `method`'s placement) against
    our median time per call by `method`. `ours` is helpers.interconnect.collectives.tidy output;
    `setting` is tool_setting(...) of the nccl-tests command."""
    o = ours[(ours.op == "all_reduce") & (ours.method == method.label)]
    col = "ip_time_us" if method.placement == "in-place" else "oop_time_us"
    mine = o.set_index("size_bytes").time_us
    out = []
    for _, r in tool.iterrows():
        s = int(r.size_bytes)
        if s in mine.index:
            out.append(row("all_reduce time per call", "nccl-tests all_reduce_perf", f"{setting}, {method.placement}",
                           s, "us", float(r[col]), float(mine[s]), method.description, same_method,
                           TOLERANCES["all_reduce_time"], device, method=method))
    return out


COPY_HARNESS_LABELS = {"queued": "copybench queued (spin kernel holds the stream, CUDA events)",
                       "graph": "copybench graph (copies in one CUDA graph, CUDA events)",
                       "eager": "copybench eager (Python-issued, host clock)"}


def copy_rows(m: dict, cp: pd.DataFrame, device: str) -> list[dict]:
    """Our copies against p2pBandwidthLatencyTest's matrices: the diagonal (same GPU) and, with two GPUs,
    GPU 0 -> GPU 1 with P2P enabled (our peer path, the same method) and disabled (the driver stages the
    copy through host memory; ours is the explicit bounce, so a different method)."""
    rows = []
    big, small = P2P_LARGE_BYTES, P2P_SMALL_BYTES
    tol = TOLERANCES["copy_bandwidth"]
    specs = [  # (our path, tool matrix, i, j, tool setting, quantity prefix, same method for queued)
        ("same_device", "off", 0, 0, "P2P=Disabled, diagonal", "same-device copy", True),
        ("peer", "on", 0, 1, "P2P=Enabled (writes), GPU 0 -> GPU 1", "GPU 0 -> GPU 1 peer copy", True),
        ("host_bounce", "off", 0, 1, "P2P=Disabled (driver stages through host), GPU 0 -> GPU 1",
         "GPU 0 -> GPU 1 through host memory", False),
    ]
    for path, p2p, i, j, setting, what, same in specs:
        bw_m, lat_m = m.get(f"bw_uni_p2p_{p2p}") or [], m.get(f"lat_p2p_{p2p}_gpu") or []
        mine = cp[cp.path == path]
        back = mine.iloc[0:0]
        if "src_gpu" in mine.columns:   # runs that also timed the peer path GPU 1 -> GPU 0
            back = mine[mine.src_gpu == j]
            mine = mine[mine.src_gpu != j]
        if mine.empty or len(bw_m) <= i or len(bw_m[i]) <= j:
            continue
        b = mine[mine.size_bytes == big].set_index("harness")
        sm = mine[mine.size_bytes == small].set_index("harness")
        counted = ", read+write counted" if path == "same_device" else ""
        def label(h):  # how a peer copy was issued, where the run recorded it (issued_by)
            how = b.loc[h, "issued_by"] if "issued_by" in b.columns and h in b.index else None
            return COPY_HARNESS_LABELS[h] + (f"; {how}" if path == "peer" and isinstance(how, str) else "")
        # The tool's P2P=Enabled matrix times GPU 0 -> GPU 1 first: its first peer copy, with no warm-up,
        # which ours has. Measured on two H200s (data/measured/fidelity-h200x2-20261129e): whichever direction the tool
        # times first reads ~8 % low, so that cell is shown, not counted; p2p_order_rows sets ours against
        # the figure the tool reports for the direction when it comes second.
        first = path == "peer" and (i, j) == (0, 1)
        for h in b.index:
            rows.append(row(f"{what} bandwidth{counted}", "p2pBandwidthLatencyTest",
                            f"unidirectional, {setting}" + (", timed first (no warm-up copy)" if first else ""),
                            big, "GB/s", bw_m[i][j], float(b.loc[h, "p2ptest_GBps"]), label(h),
                            same and h == "queued" and not first, tol, device, copy_harness=h))
        if len(lat_m) > i and len(lat_m[i]) > j:
            for h in sm.index:
                rows.append(row(f"{what}, 16 B, GPU time per copy", "p2pBandwidthLatencyTest",
                                f"latency, {setting}, GPU", small, "us", lat_m[i][j], float(sm.loc[h, "time_us"]),
                                label(h), same and h == "queued", None, device, copy_harness=h))
        if path == "peer" and len(bw_m) > j and len(bw_m[j]) > i:
            rows += _other_direction_rows(what, setting, i, j, bw_m, lat_m, b, back, label, tol, device)
        cpu_m = m.get(f"lat_p2p_{p2p}_cpu") or []
        if path == "same_device" and "eager" in sm.index and cpu_m:
            rows.append(row("same-device copy, 16 B, host time per copy", "p2pBandwidthLatencyTest",
                            "latency, P2P=Disabled, CPU, diagonal", small, "us", cpu_m[0][0],
                            float(sm.loc["eager", "time_us"]),
                            COPY_HARNESS_LABELS["eager"] + "; includes the copy and a final synchronize", False,
                            None, device, copy_harness="eager"))
    return rows


def _other_direction_rows(what: str, setting: str, i: int, j: int, bw_m, lat_m, b: pd.DataFrame,
                          back: pd.DataFrame, label, tol: float, device: str) -> list[dict]:
    """copy_rows' peer path in the other direction (GPU j -> GPU i): the tool's two directions against each
    other, ours against its other direction (both shown, not counted), and our own GPU j -> GPU i copy
    against the tool's (the same direction and method, counted)."""
    big, small = P2P_LARGE_BYTES, P2P_SMALL_BYTES
    rows = []
    # The link is symmetric, but the tool times GPU 0 -> GPU 1 first, straight after enabling peer
    # access and with no warm-up copy, and GPU 1 -> GPU 0 later: its two directions are set against
    # each other (shown, not counted: p2p_order_rows separates direction from turn), and ours against
    # its other direction (shown, not counted).
    rows.append(row(f"{what} bandwidth, p2pBandwidthLatencyTest against its own other direction",
                    "p2pBandwidthLatencyTest", f"unidirectional, {setting} vs GPU {j} -> GPU {i}", big,
                    "GB/s", bw_m[j][i], bw_m[i][j],
                    f"p2pBandwidthLatencyTest GPU {i} -> GPU {j} (tool: its GPU {j} -> GPU {i})", False, tol,
                    device))
    if "queued" in b.index:
        rows.append(row(f"{what} bandwidth", "p2pBandwidthLatencyTest",
                        f"unidirectional, P2P=Enabled (writes), GPU {j} -> GPU {i} (the other direction)",
                        big, "GB/s", bw_m[j][i], float(b.loc["queued", "p2ptest_GBps"]),
                        label("queued") + f"; GPU {i} -> GPU {j}", False, tol, device,
                        copy_harness="queued"))
    # our own GPU 1 -> GPU 0 copy against the tool's: the same direction and method, counted
    bb = back[(back.size_bytes == big) & (back.harness == "queued")]
    if len(bb):
        rows.append(row(f"GPU {j} -> GPU {i} peer copy bandwidth", "p2pBandwidthLatencyTest",
                        f"unidirectional, P2P=Enabled (writes), GPU {j} -> GPU {i}", big, "GB/s",
                        bw_m[j][i], float(bb.iloc[0]["p2ptest_GBps"]),
                        label("queued") + f"; GPU {j} -> GPU {i}", True, tol, device,
                        copy_harness="queued"))
    bs = back[(back.size_bytes == small) & (back.harness == "queued")]
    if len(bs) and len(lat_m) > j and len(lat_m[j]) > i:
        rows.append(row(f"GPU {j} -> GPU {i} peer copy, 16 B, GPU time per copy", "p2pBandwidthLatencyTest",
                        f"latency, {setting.replace(f'GPU {i} -> GPU {j}', f'GPU {j} -> GPU {i}')}, GPU",
                        small, "us", lat_m[j][i], float(bs.iloc[0]["time_us"]),
                        label("queued") + f"; GPU {j} -> GPU {i}", True, None, device,
                        copy_harness="queued"))
    return rows


def unreverse_p2p(m: dict, n: int) -> dict[str, list[list[float]]]:
    """A p2pBandwidthLatencyTest run made with the GPUs listed in reverse (CUDA_VISIBLE_DEVICES=n-1,...,0),
    re-indexed by physical GPU: its cell [a][b] is GPU n-1-a -> GPU n-1-b."""
    out = {}
    for key, mat in m.items():
        if len(mat) != n or any(len(r) != n for r in mat):
            raise ToolOutputError(f"p2pBandwidthLatencyTest matrix {key!r} is {len(mat)} rows of "
                                  f"{sorted({len(r) for r in mat})} columns; expected {n} x {n} for {n} GPUs")
        out[key] = [[mat[n - 1 - i][n - 1 - j] for j in range(n)] for i in range(n)]
    return out


def p2p_order_rows(forward: dict, backward: dict, cp: pd.DataFrame, device: str) -> list[dict]:
    """Whether p2pBandwidthLatencyTest's peer-copy figure depends on the order it times the two directions.

    The tool fills its P2P=Enabled matrix row by row in the order the GPUs are listed, so GPU i -> GPU j
    (i < j) is timed before GPU j -> GPU i; listed in reverse, after it. `forward` is the median of the
    usual runs, `backward` that of the reversed runs re-indexed by physical GPU (unreverse_p2p). Rows:
    per direction, the tool timing it after the pair's other direction against the tool timing it before
    (the tool against itself), and for GPU 0 -> GPU 1 our queued copy against the tool's figure from the
    reversed runs, where that direction came second (GPU 1 -> GPU 0 comes second in the usual order, so
    copy_rows compares it)."""
    rows, tol, big = [], TOLERANCES["copy_bandwidth"], P2P_LARGE_BYTES
    fw, bw = forward.get("bw_uni_p2p_on") or [], backward.get("bw_uni_p2p_on") or []
    peer = cp[(cp.path == "peer") & (cp.harness == "queued") & (cp.size_bytes == big)] if len(cp) else cp
    for i, j in ((0, 1), (1, 0)):
        if len(fw) <= max(i, j) or len(bw) <= max(i, j):
            continue
        # i < j: the usual order times i -> j first, so its second-timed figure is the reversed run's
        first, second = (fw[i][j], bw[i][j]) if i < j else (bw[i][j], fw[i][j])
        second_order = "GPUs listed in reverse" if i < j else "GPUs listed in the usual order"
        setting = f"unidirectional, P2P=Enabled (writes), GPU {i} -> GPU {j}"
        rows.append(row(f"GPU {i} -> GPU {j} peer copy bandwidth, p2pBandwidthLatencyTest timed after the other "
                        "direction against timed before it", "p2pBandwidthLatencyTest",
                        f"{setting}, timed before GPU {j} -> GPU {i}", big, "GB/s", first, second,
                        f"p2pBandwidthLatencyTest, {second_order} (GPU {j} -> GPU {i} timed first)", True, tol,
                        device))
        mine = peer[(peer.src_gpu == i) & (peer.dst_gpu == j)] if "src_gpu" in peer.columns else peer.iloc[0:0]
        if len(mine) and i < j:   # i > j comes second in the usual order: copy_rows already sets ours against it
            how = mine.iloc[0].get("issued_by")
            rows.append(row(f"GPU {i} -> GPU {j} peer copy bandwidth", "p2pBandwidthLatencyTest",
                            f"{setting}, timed after GPU {j} -> GPU {i} ({second_order})", big, "GB/s", second,
                            float(mine.iloc[0]["p2ptest_GBps"]),
                            COPY_HARNESS_LABELS["queued"] + (f"; {how}" if isinstance(how, str) else "")
                            + f"; GPU {i} -> GPU {j}", True, tol, device, copy_harness="queued"))
    return rows


def median_of_runs(runs: list[pd.DataFrame]) -> pd.DataFrame:
    """Several parse_nccl_tests tables of the same command: per size, the median of each time column."""
    if not runs:
        raise ToolOutputError("median_of_runs needs at least one parsed nccl-tests table")
    allr = pd.concat([r.assign(run=k) for k, r in enumerate(runs)], ignore_index=True)
    cols = ["oop_time_us", "ip_time_us", "oop_wrong", "ip_wrong"]
    med = allr.groupby("size_bytes", sort=True)[cols].median().reset_index()
    first = runs[0].drop(columns=cols + [c for c in runs[0].columns if c.endswith("GBps")])
    return first.merge(med, on="size_bytes")


def tool_self_rows(runs: list[pd.DataFrame], setting: str, device: str,
                   placements: Iterable[str] = ("in-place", "out-of-place")) -> list[dict]:
    """nccl-tests against itself: each run's time per call over the median of all runs of the same
    command, per size. Whether the tool holds the all-reduce tolerance against its own repeats is the
    noise floor for comparing anything with it."""
    med = median_of_runs(runs).set_index("size_bytes")
    out = []
    for k, r in enumerate(runs):
        for placement in placements:
            col = "ip_time_us" if placement == "in-place" else "oop_time_us"
            for _, x in r.iterrows():
                out.append(row("all_reduce time per call, nccl-tests against its own runs", "nccl-tests all_reduce_perf",
                               f"{setting}, {placement}", int(x.size_bytes), "us", float(med.loc[x.size_bytes, col]),
                               float(x[col]), f"nccl-tests run {k + 1} of {len(runs)} (tool: median of the runs)", True,
                               TOLERANCES["all_reduce_time"], device))
    return out


def verdict(table: pd.DataFrame) -> pd.DataFrame:
    """Per quantity, tool setting and our method, over the rows whose timing method is nccl-tests' or
    p2pBandwidthLatencyTest's (`same_method`): how many rows, how many within tolerance, the worst
    ratio (ours / tool), whether the tolerance holds at every size and the smallest size from which it
    holds at every larger one. Each verdict keeps its rows' setup, copy harness and method columns."""
    carried = [c for c in ["setup", "copy_harness"] + list(METHOD_COLUMNS) if c in table.columns]
    cols = ["quantity", "tool_setting", "ours_method", "tolerance", "rows", "within", "worst_ratio", "holds",
            "within_from_bytes"] + carried
    t = table[table.same_method.astype(bool) & table.tolerance.notna()].copy()
    if t.empty:
        return pd.DataFrame(columns=cols)
    t["within_tolerance"] = t.within_tolerance.astype(str).str.lower().eq("true")
    g = t.groupby(["quantity", "tool_setting", "ours_method"], sort=False)
    out = g.agg(tolerance=("tolerance", "first"), rows=("ratio", "size"), within=("within_tolerance", "sum"),
                worst_ratio=("ratio", lambda r: float(r.loc[(r - 1).abs().idxmax()])),
                **{c: (c, "first") for c in carried}).reset_index()
    out["holds"] = out.within == out.rows

    def _from(g):  # the smallest size from which every larger size is within tolerance (NaN if none)
        g = g.sort_values("size_bytes")
        bad = g[~g.within_tolerance]
        rest = g if bad.empty else g[g.size_bytes > bad.size_bytes.max()]
        return float(rest.size_bytes.min()) if len(rest) else float("nan")
    out["within_from_bytes"] = [_from(t[(t.quantity == q) & (t.tool_setting == ts) & (t.ours_method == m)])
                                for q, ts, m in zip(out.quantity, out.tool_setting, out.ours_method)]
    return out[cols]


#: benchmarks/allreduce_gap.py's table: per block length (collectives per CUDA graph), who timed it (ours, or
#: nccl-tests with its launch shape), our method's label and fields (the tool's rows: 'nccl-tests <shape>'
#: and none), the NCCL setting and the size; median, p10 and p90 time per call and our launch skew.
GAP_COLUMNS = ["iters", "who", "tool_shape"] + list(METHOD_COLUMNS) + [
    "nccl_setting", "size_bytes", "time_us", "time_us_p10", "time_us_p90", "start_skew_us"]
GAP_SUMMARY_COLUMNS = ["iters", "who", "method", "nccl_setting", "time_us", "gap_us", "ratio", "start_skew_us",
                       "tool_shape"] + [c for c in METHOD_COLUMNS if c != "method"]


def gap_summary(df: pd.DataFrame, below: int = 65536) -> pd.DataFrame:
    """Per block length, method and NCCL setting, over the sizes below `below`: the median time per call,
    the median gap and ratio to nccl-tests with one process per GPU (tool_shape '-np ...') under the same
    NCCL setting, and the median launch skew between ranks (ours only)."""
    missing = [c for c in GAP_COLUMNS if c not in df.columns]
    if missing:
        raise ToolOutputError(f"all-reduce gap table lacks columns {missing}; expected {GAP_COLUMNS} "
                              "(benchmarks/allreduce_gap.py writes them; helpers.interconnect.studies loads a "
                              "committed one)")
    small = df[df.size_bytes < below]
    tool = small[small.who == "nccl-tests"]
    ref = tool[tool.tool_shape.astype(str).str.startswith("-np")].set_index(["iters", "nccl_setting", "size_bytes"]).time_us
    out = []
    for (it, m, st), g in small.groupby(["iters", "method", "nccl_setting"], sort=False):
        r = ref.reindex(list(zip(g.iters, g.nccl_setting, g.size_bytes))).to_numpy(dtype=float)
        have = np.isfinite(r).any()
        first = g.iloc[0]
        out.append({"iters": int(it), "method": m, "nccl_setting": st, "time_us": float(g.time_us.median()),
                    "gap_us": float(np.nanmedian(g.time_us.to_numpy() - r)) if have else np.nan,
                    "ratio": float(np.nanmedian(g.time_us.to_numpy() / r)) if have else np.nan,
                    "start_skew_us": float(g.start_skew_us.median()) if g.start_skew_us.notna().any() else np.nan,
                    **{c: first[c] for c in GAP_SUMMARY_COLUMNS if c in first.index and c not in
                       ("iters", "method", "nccl_setting", "time_us", "start_skew_us")}})
    return pd.DataFrame(out, columns=GAP_SUMMARY_COLUMNS)
