"""NCCL's own cost model for an all-reduce through shared memory (a ring of GPUs without P2P).

What this is. NCCL chooses an algorithm (ring, tree) and a protocol (LL, LL128, Simple) for every
collective by estimating its time as `latency + bytes / bandwidth` (ncclTopoGetAlgoTime in
src/graph/tuning.cc) and taking the smallest estimate among the enabled choices (topoGetAlgoInfo in
src/enqueue.cc). This module recomputes that estimate from NCCL's source constants, recorded with file and
line in data/reference/nccl_tuning.csv (read from NVIDIA/nccl v2.30.7-1, commit 73cf1122, and from
v2.28.9-1 and v2.29.7-1, whose constants on this path are the same; the one difference that matters
here is that 2.28.9's Blackwell ring search has no 45 GB/s step, which gives the same ring). For an
8-rank ring all-reduce on one node the estimate is

    latency_us  = base_latency[algo][proto] + 2 x (nranks - 1) x pci_hop_latency[algo][proto]
    bus_bw      = nChannels x bwIntra           (the ring graph NCCL's topology search built)
    ring LL:      bus_bw = min(llMaxBw, 0.5 x bus_bw);   ring algorithm bw = bus_bw x nranks / (2 (nranks - 1))
    tree:         bus_bw = min(0.92 x bus_bw, nChannels x perChMaxTreeBw), LL: / 3.8; algorithm bw = 0.5 x
                  bus_bw x a size-dependent correction factor
    time_us     = latency_us + bytes / (1000 x algorithm bw in GB/s)

With P2P "not supported" (the original VM), src/graph/paths.cc diverts every GPU-to-GPU path through the
CPU (path type PHB, bandwidth the lower of the two PCI legs) and the SHM transport carries it; the tuner
then uses the PCI hop latencies, and LL128 is off (enabled by default only up to PATH_NVB). The ring
graph's bandwidth comes from what NCCL reads for each GPU's PCIe link (src/graph/topo.cc: width x speed
/ 80 GB/s; an unknown speed string counts as 8 GT/s and a zero width as x16, so a VM that hides link
speeds gives 12 GB/s) and from the ring search (src/graph/search.cc), which `ring_graph` reproduces for
GPUs that each hang off the CPU on one link. For compute capability 10.0 and above (RTX PRO 6000
Blackwell is 12.0) the search tries ring bandwidths from 90 down to 18 GB/s per channel only: on 12 GB/s
links no ring fits, NCCL logs "Could not find a path ... falling back to simple order" and uses one
channel at a 0.1 GB/s placeholder bandwidth. Its estimate is then dominated by that placeholder, and the
tuner picks Ring/Simple even for a 12 KiB message.

What it includes: the constant per-call and per-hop latencies NCCL assigns to a PCI ring, the protocol
efficiency factors (LL moves 4 data bytes per 8), the ring's 2 (n - 1) steps, the channel count and
per-channel bandwidth of the graph, and NCCL's own choice among the enabled algorithm/protocol pairs.

What it leaves out: it is NCCL's *tuning* estimate, written to rank choices, not a measurement or a
model of the hardware. It does not know that the SHM transport copies every chunk through a host buffer
(two PCIe crossings per hop, host memory bandwidth, the proxy thread that drives it when
cudaMemcpy-based SHM is on), the VM's interrupt and IOMMU costs, kernel launch and CUDA-graph overheads,
or contention with other traffic; its PCI latencies are the same for a PCIe switch and for a trip
through host memory. The tree's graph is taken to be the ring's (same channels and bandwidth) and NCCL's
0.85 factor for a non-balanced tree pattern is not applied (it would only slow the tree, which never
wins on this path from 1 B to 1 GB; a test checks it). Nothing here is fitted to any observation.

    allreduce_us(12 * 1024, 8, "ring", "LL", link_GBps=48.0)      # one estimate
    predictions([12 * 1024, 768 * 1024], 8)                       # every enabled pair, and NCCL's pick
    vm_scenarios([12 * 1024, 768 * 1024], 8)                      # the three link readings of the VM
    band(12 * 1024, 8)                                            # (low, mid, high) us with reasons
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import pandas as pd

from helpers.core import recorded

TABLE = "reference/nccl_tuning.csv"
VERSIONS = ("2.28.9", "2.29.7", "2.30.7")
DEFAULT_VERSION = "2.30.7"
ALGOS = ("ring", "tree")
PROTOS = ("LL", "LL128", "Simple")
LINKS = ("shm-pci",)
GPUS = {"blackwell": "sm100", "hopper": "sm90"}  # NCCL's compute-capability class -> its search speed array
CPU_VENDORS = ("amd", "intel")
#: NCCL's MAXCHANNELS / 2, the most channels a ring graph may have (src/include/device.h, init.cc).
MAX_RING_CHANNELS = 32


class NcclModelError(ValueError):
    """An input the model cannot price; the message names the input and what it accepts."""


# ----------------------------------------------------------------------------------------- constants
@dataclass(frozen=True)
class Constants:
    """The constants of one NCCL version that this model uses (from data/reference/nccl_tuning.csv)."""

    version: str
    base_latency_us: dict            # (algo, proto) -> us
    hop_latency_us: dict             # (link, algo, proto) -> us, link in nvlink/pci/net
    ll_max_bw_GBps: dict             # gpu -> GB/s (single node)
    per_channel_max_tree_bw_GBps: dict  # gpu -> GB/s (single node)
    ring_ll_bw_factor: float
    tree_allreduce_bw_factor: float
    tree_ll_bw_divisor: float
    tree_algo_bw_ratio: float
    ring_allreduce_steps_per_rank: int
    bytes_per_us_per_GBps: float
    tree_correction: dict            # proto -> tuple of factors by log2(bytes / 64)
    search_speeds_GBps: dict         # arch -> tuple, highest first
    search_failure_bw_GBps: float
    dup_channels_min_bw_GBps: float
    search_step_down_ratio: float
    intel_p2p_overhead: float
    pci_speed_fallback: float        # 100 Mbit/s per lane
    pci_speeds: dict                 # GT/s -> 100 Mbit/s per lane
    pci_width_fallback: int
    pci_bw_divisor: float


def _check_version(version: str) -> str:
    if version not in VERSIONS:
        raise NcclModelError(f"version={version!r}: NCCL versions with recorded constants are {VERSIONS} "
                             f"(add one with benchmarks/extract_nccl_tuning.py)")
    return version


@lru_cache(maxsize=None)
def constants(version: str = DEFAULT_VERSION) -> Constants:
    """The recorded constants of NCCL `version`, checked against data/schema.yaml on load."""
    _check_version(version)
    df = recorded.load(TABLE)
    df = df[df["nccl_version"] == version]
    df.attrs["table"] = f"data/{TABLE} (nccl_version {version})"

    def v(constant, **where):
        return float(recorded.value(df, constant=constant, **where))

    def keyed(constant, **where):
        rows = df[df["constant"] == constant]
        for k, val in where.items():
            rows = rows[rows[k] == val]
        if rows.empty:
            raise recorded.DataError(f"data/{TABLE} has no {constant} rows for NCCL {version} where {where}")
        return {str(k): float(x) for k, x in zip(rows["key"], rows["value"])}

    base = {(a, p): v("base_latency", algo=a, proto=p) for a in ALGOS for p in PROTOS}
    hop = {(l, a, p): v("hw_latency", link=l, algo=a, proto=p)
           for l in ("nvlink", "pci", "net") for a in ALGOS for p in PROTOS}
    ll = keyed("ll_max_bw")
    tree_cap = keyed("per_channel_max_tree_bw")
    corr = {}
    for p in PROTOS:
        k = keyed("tree_correction_factor", proto=p)
        corr[p] = tuple(k[f"log2_bytes_over_64={i}"] for i in range(len(k)))
    speeds = {}
    for arch in GPUS.values():
        k = keyed("search_speed_intra")
        idx = sorted(int(s.split("index=")[1]) for s in k if s.startswith(f"arch={arch};"))
        speeds[arch] = tuple(k[f"arch={arch};index={i}"] for i in idx)
    pci = keyed("pci_speed")
    return Constants(
        version=version,
        base_latency_us=base,
        hop_latency_us=hop,
        ll_max_bw_GBps={g: ll[f"gpu={g};nodes=1"] for g in GPUS},
        per_channel_max_tree_bw_GBps={g: tree_cap[f"gpu={g};nodes=1"] for g in GPUS},
        ring_ll_bw_factor=v("ring_ll_bw_factor"),
        tree_allreduce_bw_factor=v("tree_allreduce_bw_factor"),
        tree_ll_bw_divisor=v("tree_ll_bw_divisor"),
        tree_algo_bw_ratio=v("tree_algo_bw_ratio"),
        ring_allreduce_steps_per_rank=int(v("ring_allreduce_steps_per_rank")),
        bytes_per_us_per_GBps=v("time_bytes_per_us_per_GBps"),
        tree_correction=corr,
        search_speeds_GBps=speeds,
        search_failure_bw_GBps=v("search_failure_bw_intra"),
        dup_channels_min_bw_GBps=v("dup_channels_min_bw"),
        search_step_down_ratio=v("search_step_down_ratio"),
        intel_p2p_overhead=v("intel_p2p_overhead"),
        pci_speed_fallback=v("pci_speed_fallback"),
        pci_speeds={float(k.split("=")[1].split()[0]): x for k, x in pci.items()},
        pci_width_fallback=int(v("pci_width_fallback")),
        pci_bw_divisor=v("pci_bw_divisor"),
    )


def pcie_link_GBps(gt_per_s: float | None = None, lanes: int | None = 16, version: str = DEFAULT_VERSION) -> float:
    """The bandwidth NCCL assigns to a PCIe link (src/graph/topo.cc): lanes x speed / 80 GB/s, with the
    speed in 100 Mbit/s per lane. `gt_per_s=None` is a speed NCCL cannot read (its fallback: 8 GT/s);
    `lanes` 0 or None is a width it cannot read (its fallback: x16). Gen5 x16 -> 48, Gen4 x16 -> 24,
    unknown -> 12."""
    c = constants(version)
    if gt_per_s is None:
        speed = c.pci_speed_fallback
    elif gt_per_s in c.pci_speeds:
        speed = c.pci_speeds[gt_per_s]
    else:
        raise NcclModelError(f"gt_per_s={gt_per_s!r}: recorded PCIe speeds are {sorted(c.pci_speeds)} GT/s, "
                             f"or None for a speed NCCL cannot read")
    if lanes is not None and (not isinstance(lanes, int) or lanes < 0):
        raise NcclModelError(f"lanes={lanes!r}: give a PCIe width (1, 4, 8, 16, ...) or None/0 for unknown")
    width = lanes or c.pci_width_fallback
    return width * speed / c.pci_bw_divisor


# -------------------------------------------------------------------------------------- ring graph
@dataclass(frozen=True)
class RingGraph:
    """The ring NCCL's search builds when every GPU reaches the others through the CPU on one PCIe link."""

    link_GBps: float
    n_channels: int
    bw_intra_GBps: float       # per channel
    search_failed: bool        # no ring fitted: one channel at NCCL's placeholder bandwidth
    gpu: str
    cpu_vendor: str

    @property
    def bus_bw_GBps(self) -> float:
        return self.n_channels * self.bw_intra_GBps


def ring_graph(link_GBps: float, *, gpu: str = "blackwell", cpu_vendor: str = "amd",
               version: str = DEFAULT_VERSION) -> RingGraph:
    """NCCL's ring search (ncclTopoCompute, src/graph/search.cc) on a star: each GPU has one PCIe link of
    `link_GBps` to the CPU and every ring step crosses two of them (up from one GPU, down to the next).

    A ring at per-channel speed s fits n channels where n x s (x 6/5 through an Intel root complex) does
    not exceed a link. Like NCCL, pass 1 starts at the highest speed not above the link, keeps the best
    n x s and steps down while the next speed is above 0.49 of the best, stopping once n x s reaches the
    link; a graph at 25 GB/s or more per channel is then split into twice the channels at half the speed
    (the product is unchanged); pass 2 tries higher speeds with at least that many channels. When no
    speed fits (on Blackwell the lowest speed tried is 18 GB/s), NCCL falls back to one channel at 0.1
    GB/s. What this leaves out of the real search: NICs, NVLink, PCIe switches, several CPUs, and search
    time-outs; none exists on the VM's flat bus."""
    c = constants(version)
    if gpu not in GPUS:
        raise NcclModelError(f"gpu={gpu!r}: one of {tuple(GPUS)} (RTX PRO 6000 Blackwell is 'blackwell')")
    if cpu_vendor not in CPU_VENDORS:
        raise NcclModelError(f"cpu_vendor={cpu_vendor!r}: one of {CPU_VENDORS}")
    if not (isinstance(link_GBps, (int, float)) and math.isfinite(link_GBps) and link_GBps > 0):
        raise NcclModelError(f"link_GBps={link_GBps!r}: give the PCIe link bandwidth NCCL reads, in GB/s (> 0)")
    speeds = c.search_speeds_GBps[GPUS[gpu]]
    per_step = c.intel_p2p_overhead if cpu_vendor == "intel" else 1.0

    def fits(s: float) -> int:
        return min(MAX_RING_CHANNELS, int(math.floor(link_GBps / (s * per_step) + 1e-9)))

    best_n, best_s = 0, 0.0
    i = 0
    while speeds[i] > link_GBps and i < len(speeds) - 1:
        i += 1
    while True:  # pass 1
        n = fits(speeds[i])
        if n >= 1 and n * speeds[i] > best_n * best_s:
            best_n, best_s = n, speeds[i]
        if best_n and best_n * best_s >= link_GBps:
            break
        if i < len(speeds) - 1 and (best_n == 0 or speeds[i + 1] / best_s > c.search_step_down_ratio):
            i += 1
            continue
        break
    if best_n and best_s >= c.dup_channels_min_bw_GBps:  # ncclTopoDupChannels
        dup = min(best_n * 2, MAX_RING_CHANNELS)
        best_s, best_n = best_s / math.ceil(dup / best_n), dup
    if best_n:  # pass 2: higher speeds with at least as many channels
        for s in speeds:
            n = fits(s)
            if s > best_s and n >= best_n and n * s > best_n * best_s:
                best_n, best_s = n, s
        return RingGraph(link_GBps, best_n, best_s, False, gpu, cpu_vendor)
    return RingGraph(link_GBps, 1, c.search_failure_bw_GBps, True, gpu, cpu_vendor)


# ------------------------------------------------------------------------------------------- times
@dataclass(frozen=True)
class Estimate:
    """NCCL's estimate for one algorithm and protocol."""

    message_bytes: int
    nranks: int
    algo: str
    proto: str
    latency_us: float
    algo_bw_GBps: float
    time_us: float


def _check_common(message_bytes, nranks, link, version):
    if isinstance(message_bytes, bool) or not isinstance(message_bytes, numbers.Integral) or message_bytes < 0:
        raise NcclModelError(f"message_bytes={message_bytes!r}: give the all-reduce's size in bytes, an "
                             f"integer >= 0 (12 KiB is 12 * 1024)")
    if isinstance(nranks, bool) or not isinstance(nranks, numbers.Integral) or nranks < 2:
        raise NcclModelError(f"nranks={nranks!r}: an all-reduce needs an integer number of ranks >= 2")
    if link not in LINKS:
        raise NcclModelError(f"link={link!r}: this model prices {LINKS} only (GPUs without P2P, through host "
                             f"memory, with NCCL's PCI latencies)")
    _check_version(version)


def _estimate(message_bytes: int, nranks: int, algo: str, proto: str, graph: RingGraph, c: Constants) -> Estimate:
    if algo not in ALGOS:
        raise NcclModelError(f"algo={algo!r}: one of {ALGOS} (NCCL's other all-reduce algorithms, NVLS and "
                             f"CollNet, need NVSwitch or a network plugin and are off on this path)")
    if proto not in PROTOS:
        raise NcclModelError(f"proto={proto!r}: one of {PROTOS}")
    if proto == "LL128":
        raise NcclModelError("proto='LL128': NCCL enables LL128 by default only up to PATH_NVB, and a path "
                             "through the CPU is PHB or SYS, so it is off here (tuning.cc, ll128_max_path_intra "
                             "in data/reference/nccl_tuning.csv); price 'LL' or 'Simple'")
    nsteps = c.ring_allreduce_steps_per_rank * (nranks - 1)
    bus = graph.bus_bw_GBps
    if algo == "ring":
        latency = c.base_latency_us[("ring", proto)] + nsteps * c.hop_latency_us[("pci", "ring", proto)]
        if proto == "LL":
            bus = min(c.ll_max_bw_GBps[graph.gpu], bus * c.ring_ll_bw_factor)
        algo_bw = bus * nranks / nsteps
    else:
        # single node: 2 x ((nranks - 1) x intra hop + log2(1) x inter hop)
        latency = c.base_latency_us[("tree", proto)] + 2 * (nranks - 1) * c.hop_latency_us[("pci", "tree", proto)]
        bus = min(bus * c.tree_allreduce_bw_factor,
                  graph.n_channels * c.per_channel_max_tree_bw_GBps[graph.gpu])
        if proto == "LL":
            bus = min(bus / c.tree_ll_bw_divisor, c.ll_max_bw_GBps[graph.gpu])
        algo_bw = bus * c.tree_algo_bw_ratio
        chunks = message_bytes >> 6
        log_size = chunks.bit_length() - 1 if chunks > 0 else -1  # NCCL's log2i(nBytes >> 6)
        factors = c.tree_correction[proto]
        if 0 <= log_size < 23:
            algo_bw *= factors[log_size]
    time = latency + message_bytes / (c.bytes_per_us_per_GBps * algo_bw)
    return Estimate(message_bytes, nranks, algo, proto, latency, algo_bw, time)


def allreduce_us(message_bytes: int, nranks: int, algo: str = "ring", proto: str = "LL", *,
                 link: str = "shm-pci", link_GBps: float | None = None, gpu: str = "blackwell",
                 cpu_vendor: str = "amd", version: str = DEFAULT_VERSION) -> float:
    """NCCL's estimated time (us) of one all-reduce of `message_bytes` over `nranks` GPUs on one node
    with algorithm `algo` and protocol `proto`, the GPUs reaching each other through host memory.

    `link_GBps` is the PCIe link bandwidth NCCL reads for each GPU (None: NCCL's fallback for a speed it
    cannot read, 12 GB/s); the ring graph follows from it (`ring_graph`)."""
    _check_common(message_bytes, nranks, link, version)
    c = constants(version)
    bw = pcie_link_GBps(None, None, version) if link_GBps is None else link_GBps
    graph = ring_graph(bw, gpu=gpu, cpu_vendor=cpu_vendor, version=version)
    return _estimate(message_bytes, nranks, algo, proto, graph, c).time_us


PREDICTION_COLUMNS = ["message_bytes", "nranks", "algo", "proto", "link_GBps", "ring_channels",
                      "ring_bw_per_channel_GBps", "search_failed", "latency_us", "algo_bw_GBps", "time_us",
                      "tuner_pick", "nccl_version"]


def predictions(message_bytes: Sequence[int] | int, nranks: int = 8, *, link: str = "shm-pci",
                link_GBps: float | None = None, gpu: str = "blackwell", cpu_vendor: str = "amd",
                version: str = DEFAULT_VERSION) -> pd.DataFrame:
    """NCCL's estimate for every enabled algorithm and protocol at each size, one row each
    (PREDICTION_COLUMNS), with `tuner_pick` true on the row NCCL would choose: the smallest time, and on a
    tie the first in NCCL's enumeration (algorithms tree then ring, protocols LL then Simple)."""
    sizes = [message_bytes] if isinstance(message_bytes, numbers.Integral) else list(message_bytes)
    if not sizes:
        raise NcclModelError("message_bytes=[]: give at least one size in bytes")
    for s in sizes:
        _check_common(s, nranks, link, version)
    c = constants(version)
    bw = pcie_link_GBps(None, None, version) if link_GBps is None else link_GBps
    graph = ring_graph(bw, gpu=gpu, cpu_vendor=cpu_vendor, version=version)
    rows = []
    for s in sizes:
        ests = [_estimate(s, nranks, a, p, graph, c) for a in ("tree", "ring") for p in ("LL", "Simple")]
        pick = min(range(len(ests)), key=lambda k: ests[k].time_us)  # NCCL: strict <, first in its order
        for k, e in enumerate(ests):
            rows.append({"message_bytes": s, "nranks": nranks, "algo": e.algo, "proto": e.proto,
                         "link_GBps": bw, "ring_channels": graph.n_channels,
                         "ring_bw_per_channel_GBps": graph.bw_intra_GBps, "search_failed": graph.search_failed,
                         "latency_us": e.latency_us, "algo_bw_GBps": e.algo_bw_GBps, "time_us": e.time_us,
                         "tuner_pick": k == pick, "nccl_version": version})
    return pd.DataFrame(rows, columns=PREDICTION_COLUMNS)


def tuner_pick(message_bytes: int, nranks: int = 8, **kw) -> Estimate:
    """The algorithm, protocol and estimated time NCCL's tuner would choose (see `predictions`)."""
    df = predictions(message_bytes, nranks, **kw)
    row = df[df["tuner_pick"]].iloc[0]
    return Estimate(int(row.message_bytes), int(row.nranks), row.algo, row.proto, float(row.latency_us),
                    float(row.algo_bw_GBps), float(row.time_us))


# ----------------------------------------------------------------------------- the VM's scenarios
@dataclass(frozen=True)
class LinkReading:
    """One reading NCCL can make of the VM's GPU links, and why it is possible."""

    name: str
    gt_per_s: float | None
    lanes: int | None
    why: str


#: The PCIe generation of the middle reading below: a 16 GT/s link or virtual root port (an assumption
#: that brackets the recorded Gen5 link and NCCL's 8 GT/s fallback; see link_readings).
ROOT_PORT_GENERATION = 4


def link_readings() -> tuple[LinkReading, ...]:
    """What NCCL may read for the original VM's GPU links: the recorded physical link (data/recorded/
    hardware.csv, 'gpu_link'), a 16 GT/s virtual root port, and a speed it cannot read."""
    from helpers.interconnect import topology

    link = topology.recorded_vm_link()
    gts = float(topology.LINK_SPEEDS[link.generation].split()[0])
    port = float(topology.LINK_SPEEDS[ROOT_PORT_GENERATION].split()[0])
    return (
        LinkReading(f"gen{link.generation}-x{link.width}", gts, link.width,
                    f"the GPUs' own link as recorded ({link.source}): QEMU exposes an assigned device's PCIe "
                    "capability as-is on i440FX's conventional bus, and NCCL up to 2.30.4 reads the device's "
                    "max_link_speed (the bus above it has none); 2.30.7 asks NVML for the current generation"),
        LinkReading(f"gen{ROOT_PORT_GENERATION}-x{link.width}", port, link.width,
                    f"a link, or a virtual root port above it, at {port:g} GT/s: NCCL up to 2.30.4 takes the "
                    "lower of device and port speeds, and a q35 machine puts each GPU behind an emulated "
                    "root port (its default advertised speed is not checked here against QEMU's source); or "
                    "the link trained at that speed"),
        LinkReading("unknown-speed", None, None,
                    "a speed NCCL cannot read (an empty or unknown sysfs string, or 2.30.7's '16.0 GT/s' "
                    "default when NVML gives none, which its table does not list): 8 GT/s x16, 12 GB/s "
                    "(NVIDIA/nccl #428, #1329: NCCL in VMs sees no link speeds)"),
    )


def vm_scenarios(message_bytes: Sequence[int] | int, nranks: int = 8, *, cpu_vendor: str = "amd",
                 version: str = DEFAULT_VERSION) -> pd.DataFrame:
    """`predictions` for each of `link_readings()`, with columns `scenario` and `why` added in front: the
    table a chapter shows (12 KiB and 768 KiB are one and 64 tokens of hidden 6144 in 2-byte elements)."""
    frames = []
    for r in link_readings():
        df = predictions(message_bytes, nranks, link_GBps=pcie_link_GBps(r.gt_per_s, r.lanes, version),
                         cpu_vendor=cpu_vendor, version=version)
        frames.append(df.assign(scenario=r.name, why=r.why))
    out = pd.concat(frames, ignore_index=True)
    return out[["scenario", *PREDICTION_COLUMNS, "why"]]


@dataclass(frozen=True)
class Band:
    """NCCL's own estimate for one all-reduce as a band: the tuner's pick at three link readings."""

    message_bytes: int
    nranks: int
    low_us: float
    mid_us: float
    high_us: float
    low_pick: str
    mid_pick: str
    high_pick: str
    high_search_failed: bool    # at the high end's reading NCCL's own ring search finds no ring on this GPU
    high_fallback: str          # how the high end was priced then: "formula" or "placeholder"
    nccl_version: str


def band(message_bytes: int, nranks: int = 8, *, cpu_vendor: str = "amd", fallback: str = "formula",
         version: str = DEFAULT_VERSION) -> Band:
    """(low, mid, high) of NCCL's estimate, in us, for an all-reduce through host memory, each end the time
    of the algorithm and protocol NCCL's tuner would pick.

    low:  the links read as PCIe Gen5 x16 (48 GB/s), the GPUs' physical link; NCCL's search then builds
          the fastest ring it can on this path (2 channels x 24 GB/s through an AMD root complex, the
          investigation's host). No reading of these links gives NCCL a faster ring, so no lower estimate.
    mid:  the links read as 16 GT/s x16 (24 GB/s: a Gen4-speed root port or link; one ring channel at
          24 GB/s). At decode sizes the estimate barely moves from `low`, because NCCL prices them by its
          constant latencies (base + 2 (n - 1) PCI hops), not by bandwidth.
    high: the links' speed unreadable: NCCL's fallback, 12 GB/s. With `fallback="formula"` (the default)
          this end is NCCL's formula on one ring channel at 12 GB/s, the graph its search builds on such
          links for GPUs before Blackwell. On Blackwell (compute capability >= 10.0, the RTX PRO 6000)
          NCCL's own search finds no ring there (its lowest speed is 18 GB/s; `high_search_failed` says
          so) and falls back to one channel at a 0.1 GB/s placeholder; `fallback="placeholder"` prices
          that graph, which is what NCCL itself computes (and why it then picks Ring/Simple), but the
          0.1 GB/s is not a rate of the hardware, so that end is no time prediction.

    These are NCCL's tuning estimates, not measurements; see the module docstring for what they leave out.
    """
    if fallback not in ("placeholder", "formula"):
        raise NcclModelError(f"fallback={fallback!r}: 'formula' (one 12 GB/s ring channel) or 'placeholder' "
                             f"(NCCL's search-failure graph, 0.1 GB/s)")
    _check_common(message_bytes, nranks, "shm-pci", version)
    c = constants(version)
    ends = []
    for r in link_readings():
        bw = pcie_link_GBps(r.gt_per_s, r.lanes, version)
        graph = ring_graph(bw, cpu_vendor=cpu_vendor, version=version)
        failed = graph.search_failed
        if failed and fallback == "formula":
            graph = RingGraph(bw, 1, bw, False, graph.gpu, cpu_vendor)
        ests = [_estimate(message_bytes, nranks, a, p, graph, c) for a in ("tree", "ring") for p in ("LL", "Simple")]
        ends.append((min(ests, key=lambda e: e.time_us), failed))
    (lo, _), (mid, _), (hi, hi_failed) = ends
    if not lo.time_us <= mid.time_us <= hi.time_us:
        raise NcclModelError(f"band for message_bytes={message_bytes}: ends out of order "
                             f"({lo.time_us:.1f}, {mid.time_us:.1f}, {hi.time_us:.1f} us); a constant in "
                             f"data/{TABLE} is not what this model expects")
    return Band(message_bytes, nranks, lo.time_us, mid.time_us, hi.time_us, f"{lo.algo}/{lo.proto}",
                f"{mid.algo}/{mid.proto}", f"{hi.algo}/{hi.proto}", hi_failed, fallback, version)
