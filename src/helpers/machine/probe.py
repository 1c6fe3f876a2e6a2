"""A live probe of this machine for multi-GPU inference, and a verdict per check.

`probe()` reads NVML (through nvidia-ml-py, `import pynvml`), /proc and /sys and a few package
versions, and returns one JSON-able dict. Every step is guarded: a step that fails appends a line to
`errors` and the probe goes on, so a machine without a GPU, without systemd or without /sys still
gets a full report. The only subprocess is `systemd-detect-virt`, with a timeout. `judge(result)` is
a pure function of that dict and gives one verdict per check; `from_recorded(hardware())` builds the
same shape from the original investigation's recorded facts so that both machines are judged by the
same code. `fingerprint()` is the small summary the runbook records in each run's manifest.

Run `python -m helpers.machine.probe --help` for the command line.

JSON keys (SCHEMA_VERSION 1; other chapters read them, keep them stable)
-----------------------------------------------------------------------
- ``schema_version`` int; ``source`` "measured" (a live probe) or "recorded" (from_recorded);
  ``measured_at`` UTC ISO time; ``hostname``; ``duration_s`` seconds the probe took.
- ``nvml``: ``available`` bool, ``statement`` one sentence (on a machine without a GPU:
  "no NVIDIA GPU / driver on this machine (...)"), ``driver_version``, ``cuda_driver_version``
  ("13.0": the highest CUDA the driver supports), ``nvml_version``, ``device_count``.
- ``gpus``: list, one dict per GPU: ``index``, ``name``, ``uuid``, ``pci_bus_id`` (sysfs form
  "0000:17:00.0"), ``compute_capability`` ("12.0"), ``architecture`` ("SM120"),
  ``memory_total_bytes``, ``pcie_gen_current``, ``pcie_gen_max``, ``pcie_width_current``,
  ``pcie_width_max``, ``power_limit_w`` (enforced), ``power_limit_default_w``, ``numa_node``
  (the GPU's NUMA affinity, int, None = unknown), ``numa_node_source`` ("sysfs" | "nvml" | None),
  ``gpu_numa_id`` (the GPU's own memory as a NUMA node, coherent systems only), ``local_cpulist``,
  ``iommu_group`` (str or None). Unknown values are None.
- ``p2p_read``: N x N list of `nvidia-smi topo -p2p r` legend codes (``P2P_LEGEND``), "X" on the
  diagonal; ``p2p``: {"read", "write", "nvlink", "atomics"} -> N x N lists of the same codes.
- ``virtualization``: ``systemd_detect_virt`` (what the plain command prints), ``vm`` (what
  ``--vm`` prints, "none" on bare metal), ``container`` (``--container``), ``cpuinfo_hypervisor_flag``
  bool, ``dmi_product_name``, ``dmi_sys_vendor``, ``dmi_board_vendor``, ``container_hints`` list,
  ``kernel_hints`` list, ``hypervisor`` (a name where known), ``is_vm`` bool/None,
  ``is_container`` bool/None, ``kind`` ("bare metal" | "vm" | "container" | "container in vm" |
  "unknown").
- ``cpu``: ``model``, ``vendor``, ``logical_cpus``, ``sockets``, ``cores_per_socket``,
  ``threads_per_core``, ``physical_cores``.
- ``memory``: ``total_bytes``, ``swap_total_bytes``.
- ``numa``: ``count``, ``nodes`` (list of {``id``, ``cpulist``, ``cpu_count``,
  ``memory_total_bytes``, ``distances``}).
- ``iommu``: ``groups_present`` bool, ``group_count``, ``gpu_groups`` {bus id: group},
  ``acs`` {"status": str, "bridges": {bus id: {flag: bool}}}.
- ``software``: ``python``, ``torch``, ``torch_cuda`` (CUDA torch was built with, None = CPU build),
  ``nccl`` (torch.cuda.nccl.version(), where CUDA), ``nccl_pip``, ``driver``, ``cuda_driver``,
  ``nvidia_ml_py``, ``transformers``, ``sglang``, ``flashinfer``, ``vllm`` (None = not installed).
- ``verdicts``: list of {``check``, ``verdict`` (one of VERDICTS), ``reason``}.
- ``errors``: list of "step: what went wrong" strings.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

SCHEMA_VERSION = 1

#: the legend of `nvidia-smi topo -p2p r`
P2P_LEGEND = {
    "X": "self",
    "OK": "supported",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "U": "unknown",
}
#: nvmlGpuP2PStatus_t -> legend code (4, disabled by registry key, has no code of its own: NS)
_P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "NS", 5: "NS", 6: "U"}
#: nvmlGpuP2PCapsIndex_t (written out: pynvml's NVML_P2P_CAPS_INDEX_READ is the tuple (0,))
P2P_CAPS = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}
_AFFINITY_SCOPE_NODE = 0  # NVML_AFFINITY_SCOPE_NODE

VERDICTS = ("ok", "warn", "problem", "n/a")
#: every check `judge` makes: (what it asks, why it matters for multi-GPU inference)
CHECKS = {
    "gpus": ("which NVIDIA GPUs NVML sees, and how many",
             "tensor parallelism splits each layer over several identical GPUs"),
    "gpu_architecture": ("the GPUs' compute capability",
                         "decides which kernels exist; several fast paths are built for SM100/SM103 only"),
    "p2p_read": ("whether each GPU may read its peers' memory directly (NVML's P2P status, the codes of "
                 "`nvidia-smi topo -p2p r`)",
                 "without it every all-reduce is staged through host memory"),
    "gpu_numa_affinity": ("whether each GPU has a known NUMA node",
                          "workers and their host buffers can then sit on the GPU's own socket"),
    "pcie_link": ("whether each PCIe link trained at its full width (and generation)",
                  "host-GPU bandwidth is the path of every host-staged copy"),
    "power_limit": ("whether a GPU's power limit is below its default", "a capped GPU runs at lower clocks"),
    "virtualization": ("VM or container: systemd-detect-virt, the cpuinfo hypervisor flag, DMI, kernel hints",
                       "a hypervisor can hide P2P and NUMA affinity from the guest"),
    "iommu_acs": ("IOMMU groups, and ACS redirect on the PCI bridges above the GPUs",
                  "ACS redirect sends peer traffic up to the root complex"),
    "cuda_stack": ("torch's CUDA version against the driver's, and NCCL's version",
                   "a torch built for a newer CUDA than the driver's does not run"),
    "probe": ("whether every probe step ran", "a failed step leaves its check unknown"),
}
NO_GPU_STATEMENT = "no NVIDIA GPU / driver on this machine"

#: DMI product names / vendors that only virtual machines report
_VM_DMI = (
    ("qemu", "QEMU"), ("standard pc", "QEMU"), ("kvm", "KVM"), ("vmware", "VMware"),
    ("virtualbox", "VirtualBox"), ("innotek", "VirtualBox"), ("virtual machine", "Hyper-V"),
    ("hvm domu", "Xen"), ("xen", "Xen"), ("bochs", "Bochs"), ("google compute engine", "Google"),
    ("cloud hypervisor", "Cloud Hypervisor"), ("firecracker", "Firecracker"), ("proxmox", "Proxmox"),
)
_CONTAINER_CGROUP = ("docker", "kubepods", "containerd", "lxc", "libpod", "podman", "crio")


# --------------------------------------------------------------------------- small parsers

def parse_cpulist(text: str) -> list[int]:
    """CPUs of a sysfs cpulist such as "0-59,120-179" (an empty string: none)."""
    out: list[int] = []
    text = text.strip()
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            if int(hi) < int(lo):
                raise ValueError(f"cpulist {text!r}: range {part!r} runs backwards; expected lo-hi")
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


def parse_cpuinfo(text: str) -> dict:
    """Model, sockets, cores and threads from the text of /proc/cpuinfo, and its hypervisor flag."""
    blocks = [b for b in re.split(r"\n\s*\n", text) if b.strip()]
    procs = []
    for b in blocks:
        d = {}
        for line in b.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                d[k.strip().lower()] = v.strip()
        if "processor" in d:
            procs.append(d)
    if not procs:
        raise ValueError("cpuinfo text has no 'processor' entries; expected the text of /proc/cpuinfo")
    first = procs[0]
    flags = set(first.get("flags", first.get("features", "")).split())
    physical_ids = {p["physical id"] for p in procs if "physical id" in p}
    cores = {(p.get("physical id"), p["core id"]) for p in procs if "core id" in p}
    sockets = len(physical_ids) or None
    physical_cores = len(cores) or None
    cores_per_socket = int(first["cpu cores"]) if "cpu cores" in first else (
        physical_cores // sockets if physical_cores and sockets else None)
    threads_per_core = None
    if physical_cores:
        threads_per_core = len(procs) // physical_cores
    elif "siblings" in first and "cpu cores" in first and int(first["cpu cores"]):
        threads_per_core = int(first["siblings"]) // int(first["cpu cores"])
    return {
        "model": first.get("model name") or first.get("hardware") or first.get("cpu model"),
        "vendor": first.get("vendor_id") or first.get("cpu implementer"),
        "logical_cpus": len(procs),
        "sockets": sockets,
        "cores_per_socket": cores_per_socket,
        "threads_per_core": threads_per_core,
        "physical_cores": physical_cores,
        "hypervisor_flag": "hypervisor" in flags,
    }


def parse_meminfo(text: str) -> dict[str, int]:
    """Byte values of /proc/meminfo or a node's meminfo ("Node 0 MemTotal: 123 kB")."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(?:Node\s+\d+\s+)?([A-Za-z_()0-9]+):\s+(\d+)\s*(kB)?", line.strip())
        if m:
            out[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
    return out


def container_hints_from_cgroup(text: str) -> list[str]:
    """Container runtimes named in /proc/1/cgroup (cgroup v1 paths such as /docker/<id>)."""
    low = text.lower()
    return [f"/proc/1/cgroup mentions {w}" for w in _CONTAINER_CGROUP if w in low]


def kernel_hints(version: str, cmdline: str) -> list[str]:
    """Sandboxes that give themselves away in /proc/version or /proc/cmdline (the lines are not
    copied into the result, only what they hint at)."""
    out = []
    if "gvisor" in version.lower() or "gvisor" in cmdline.lower():
        out.append("gVisor (kernel strings)")
    if "firecracker" in cmdline.lower():
        out.append("Firecracker (kernel command line)")
    return out


def dmi_hypervisor(*fields: str | None) -> str | None:
    """The hypervisor a DMI product name or vendor names, or None for a physical machine's."""
    for f in fields:
        if not f:
            continue
        low = f.lower()
        for needle, name in _VM_DMI:
            if needle in low:
                return name
    return None


def pci_bus_id_to_sysfs(bus_id: str) -> str:
    """NVML's "00000000:17:00.0" -> sysfs's "0000:17:00.0"."""
    m = re.fullmatch(r"\s*([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\s*", bus_id)
    if not m:
        raise ValueError(f"PCI bus id {bus_id!r} is not domain:bus:device.function (e.g. 00000000:17:00.0)")
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


ACS_FLAGS = ("source_validation", "translation_blocking", "request_redirect", "completion_redirect",
             "upstream_forwarding", "egress_control", "direct_translated_p2p")


def parse_acs(config: bytes) -> dict | None:
    """ACS control bits from a PCI device's config space (the bytes of /sys/bus/pci/devices/X/config).

    Returns {flag: bool} for the ACS extended capability (id 0x000D), or None when the device has
    none. Raises ValueError when `config` stops at 256 bytes or less (only root reads the extended
    space)."""
    if len(config) <= 256:
        raise ValueError(f"config space is {len(config)} bytes; the extended capabilities need 4096 "
                         "(read /sys/bus/pci/devices/*/config as root)")
    off, seen = 0x100, set()
    while off and off not in seen and off + 8 <= len(config):
        seen.add(off)
        header = int.from_bytes(config[off:off + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == 0x000D:
            ctl = int.from_bytes(config[off + 6:off + 8], "little")
            return {name: bool(ctl >> bit & 1) for bit, name in enumerate(ACS_FLAGS)}
        off = (header >> 20) & 0xFFC
    return None


def affinity_nodes(words: list[int]) -> list[int]:
    """NUMA nodes set in an NVML affinity mask (a list of 64-bit words, node k = bit k)."""
    return [64 * w + b for w, word in enumerate(words) for b in range(64) if int(word) >> b & 1]


def gpu_numa_node(sysfs_numa_node: str | None, mask_nodes: list[int] | None) -> tuple[int | None, str | None]:
    """A GPU's NUMA node and where it came from: the PCI device's sysfs `numa_node` where the kernel
    knows it (-1 = unknown), else NVML's memory affinity when it names exactly one node (what
    `nvidia-smi topo -m` shows as "NUMA Affinity"); (None, None) when neither says."""
    if sysfs_numa_node and re.fullmatch(r"-?\d+", sysfs_numa_node.strip()) and int(sysfs_numa_node) >= 0:
        return int(sysfs_numa_node), "sysfs"
    if mask_nodes is not None and len(mask_nodes) == 1:
        return mask_nodes[0], "nvml"
    return None, None


def p2p_all(n: int, code: str) -> list[list[str]]:
    """An n x n legend-code matrix with `code` off the diagonal and "X" on it."""
    if code not in P2P_LEGEND:
        raise ValueError(f"P2P code {code!r} is not in the nvidia-smi legend {list(P2P_LEGEND)}")
    return [["X" if i == j else code for j in range(n)] for i in range(n)]


# --------------------------------------------------------------------------- the probe

class _Steps:
    """Runs guarded steps: a failure becomes an error line and a default value."""

    def __init__(self):
        self.errors: list[str] = []

    def run(self, name: str, fn: Callable[[], Any], default: Any = None) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the probe
            self.errors.append(f"{name}: {type(exc).__name__}: {exc}".strip())
            return default


def _read(path: Path) -> str:
    return path.read_text(errors="replace")


def _read_opt(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except (FileNotFoundError, PermissionError, OSError):
        return None


def _run_cmd(args: list[str], timeout: float = 2.0) -> str | None:
    """stdout of a short command, None if it is absent; never waits longer than `timeout`."""
    if shutil.which(args[0]) is None:
        return None
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    return p.stdout.strip() or None


def _virtualization(root: Path, steps: _Steps, cpu_flag: bool | None) -> dict:
    live = root == Path("/")
    v: dict[str, Any] = {"systemd_detect_virt": None, "vm": None, "container": None}
    if live:
        v["systemd_detect_virt"] = steps.run("virt: systemd-detect-virt", lambda: _run_cmd(["systemd-detect-virt"]))
        v["vm"] = steps.run("virt: systemd-detect-virt --vm", lambda: _run_cmd(["systemd-detect-virt", "--vm"]))
        v["container"] = steps.run("virt: systemd-detect-virt --container",
                                   lambda: _run_cmd(["systemd-detect-virt", "--container"]))
    v["cpuinfo_hypervisor_flag"] = cpu_flag
    dmi = root / "sys/class/dmi/id"
    v["dmi_product_name"] = _read_opt(dmi / "product_name")
    v["dmi_sys_vendor"] = _read_opt(dmi / "sys_vendor")
    v["dmi_board_vendor"] = _read_opt(dmi / "board_vendor")
    hints = []
    for marker in (".dockerenv", "run/.containerenv"):
        if (root / marker).exists():
            hints.append(f"/{marker} exists")
    cg = _read_opt(root / "proc/1/cgroup")
    if cg:
        hints += container_hints_from_cgroup(cg)
    v["container_hints"] = hints
    v["kernel_hints"] = kernel_hints(_read_opt(root / "proc/version") or "", _read_opt(root / "proc/cmdline") or "")
    v.update(classify_virtualization(v))
    return v


def classify_virtualization(v: dict) -> dict:
    """`is_vm`, `is_container`, `hypervisor` and `kind` from the raw virtualization evidence."""
    dmi_hv = dmi_hypervisor(v.get("dmi_product_name"), v.get("dmi_sys_vendor"), v.get("dmi_board_vendor"))
    vm_out = v.get("vm")
    is_vm: bool | None
    hypervisor = None
    if vm_out and vm_out != "none":
        is_vm, hypervisor = True, vm_out
    elif v.get("cpuinfo_hypervisor_flag") or dmi_hv or v.get("kernel_hints"):
        is_vm = True
    elif vm_out == "none" or v.get("cpuinfo_hypervisor_flag") is False:
        is_vm = False
    else:
        is_vm = None
    names = [n for n in (hypervisor, dmi_hv, *(h.split(" ")[0] for h in v.get("kernel_hints") or [])) if n]
    hypervisor = ", ".join(dict.fromkeys(names)) or (hypervisor if is_vm else None)
    ct = v.get("container")
    is_container: bool | None
    if ct and ct != "none":
        is_container = True
    elif v.get("container_hints"):
        is_container = True
    elif ct == "none":
        is_container = False
    else:
        is_container = None if is_vm is None else False
    if is_vm and is_container:
        kind = "container in vm"
    elif is_vm:
        kind = "vm"
    elif is_container:
        kind = "container"
    elif is_vm is False:
        kind = "bare metal"
    else:
        kind = "unknown"
    return {"hypervisor": hypervisor if is_vm else None, "is_vm": is_vm, "is_container": is_container,
            "kind": kind}


def _numa(root: Path, steps: _Steps) -> dict:
    base = root / "sys/devices/system/node"
    if not base.is_dir():
        return {"count": None, "nodes": [], "note": "no /sys/devices/system/node"}
    nodes = []
    for d in sorted(base.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        nid = int(d.name[4:])
        cpulist = steps.run(f"numa: node{nid} cpulist", lambda d=d: _read(d / "cpulist").strip(), "")
        cpus = steps.run(f"numa: node{nid} cpulist parse", lambda c=cpulist: parse_cpulist(c), [])
        mem = steps.run(f"numa: node{nid} meminfo", lambda d=d: parse_meminfo(_read(d / "meminfo")).get("MemTotal"))
        dist = steps.run(f"numa: node{nid} distance", lambda d=d: [int(x) for x in _read(d / "distance").split()])
        nodes.append({"id": nid, "cpulist": cpulist, "cpu_count": len(cpus), "memory_total_bytes": mem,
                      "distances": dist})
    return {"count": len(nodes), "nodes": nodes}


def _nvml_str(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _nvml(root: Path, steps: _Steps, want_p2p: bool = True) -> tuple[dict, list[dict], dict]:
    info: dict[str, Any] = {"available": False, "statement": None, "driver_version": None,
                            "cuda_driver_version": None, "nvml_version": None, "device_count": 0}
    try:
        import pynvml
    except ImportError as exc:
        info["statement"] = f"{NO_GPU_STATEMENT} (nvidia-ml-py is not installed: {exc}; pip install nvidia-ml-py)"
        return info, [], {}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        info["statement"] = f"{NO_GPU_STATEMENT} (NVML: {type(exc).__name__}: {exc})"
        return info, [], {}
    gpus: list[dict] = []
    p2p: dict[str, list] = {}
    try:
        def get(name, fn, *args):
            """One NVML query; NotSupported / FunctionNotFound -> None silently, other errors recorded."""
            try:
                return fn(*args)
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
                return None  # this GPU or driver does not have it: unknown, not an error
            except Exception as exc:  # noqa: BLE001
                steps.errors.append(f"nvml: {name}: {type(exc).__name__}: {exc}")
                return None

        info["available"] = True
        drv = get("driver version", pynvml.nvmlSystemGetDriverVersion)
        info["driver_version"] = _nvml_str(drv) if drv is not None else None
        nv = get("NVML version", pynvml.nvmlSystemGetNVMLVersion)
        info["nvml_version"] = _nvml_str(nv) if nv is not None else None
        cv = get("CUDA driver version", pynvml.nvmlSystemGetCudaDriverVersion)
        if cv:
            info["cuda_driver_version"] = f"{cv // 1000}.{cv % 1000 // 10}"
        n = get("device count", pynvml.nvmlDeviceGetCount) or 0
        info["device_count"] = n
        info["statement"] = (f"{n} NVIDIA GPU(s) visible to NVML" if n else
                             f"{NO_GPU_STATEMENT} (NVML loaded, but it sees no device)")
        handles = []
        for i in range(n):
            h = get(f"GPU {i} handle", pynvml.nvmlDeviceGetHandleByIndex, i)
            handles.append(h)
            if h is None:
                gpus.append({"index": i})
                continue
            g: dict[str, Any] = {"index": i}
            name = get(f"GPU {i} name", pynvml.nvmlDeviceGetName, h)
            g["name"] = _nvml_str(name) if name is not None else None
            uuid = get(f"GPU {i} uuid", pynvml.nvmlDeviceGetUUID, h)
            g["uuid"] = _nvml_str(uuid) if uuid is not None else None
            pci = get(f"GPU {i} PCI info", pynvml.nvmlDeviceGetPciInfo, h)
            bus = None
            if pci is not None:
                bus = steps.run(f"GPU {i} bus id", lambda: pci_bus_id_to_sysfs(_nvml_str(pci.busId)))
            g["pci_bus_id"] = bus
            cc = get(f"GPU {i} compute capability", pynvml.nvmlDeviceGetCudaComputeCapability, h)
            g["compute_capability"] = f"{cc[0]}.{cc[1]}" if cc else None
            g["architecture"] = f"SM{cc[0]}{cc[1]}" if cc else None
            mem = get(f"GPU {i} memory", pynvml.nvmlDeviceGetMemoryInfo, h)
            g["memory_total_bytes"] = int(mem.total) if mem is not None else None
            g["pcie_gen_current"] = get(f"GPU {i} PCIe gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h)
            g["pcie_gen_max"] = get(f"GPU {i} PCIe max gen", pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h)
            g["pcie_width_current"] = get(f"GPU {i} PCIe width", pynvml.nvmlDeviceGetCurrPcieLinkWidth, h)
            g["pcie_width_max"] = get(f"GPU {i} PCIe max width", pynvml.nvmlDeviceGetMaxPcieLinkWidth, h)
            pl = get(f"GPU {i} power limit", pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
            g["power_limit_w"] = pl / 1000 if pl is not None else None
            pd_ = get(f"GPU {i} default power limit", pynvml.nvmlDeviceGetPowerManagementDefaultLimit, h)
            g["power_limit_default_w"] = pd_ / 1000 if pd_ is not None else None
            dev = root / "sys/bus/pci/devices" / bus if bus else None
            sysfs_node = _read_opt(dev / "numa_node") if dev is not None else None
            mask = get(f"GPU {i} memory affinity", pynvml.nvmlDeviceGetMemoryAffinity, h, 4,
                       _AFFINITY_SCOPE_NODE)
            mask_nodes = affinity_nodes(list(mask)) if mask is not None else None
            g["numa_node"], g["numa_node_source"] = gpu_numa_node(sysfs_node, mask_nodes)
            g["gpu_numa_id"] = None
            try:  # only coherent (Grace-style) systems have one; anything else means none
                gid = pynvml.nvmlDeviceGetNumaNodeId(h)
                g["gpu_numa_id"] = gid if gid >= 0 else None
            except Exception:  # noqa: BLE001
                pass
            g["local_cpulist"] = _read_opt(dev / "local_cpulist") if dev is not None else None
            grp = dev / "iommu_group" if dev is not None else None
            g["iommu_group"] = os.path.basename(os.readlink(grp)) if grp is not None and grp.is_symlink() else None
            gpus.append(g)
        if want_p2p and n > 1:
            for cap, idx in P2P_CAPS.items():
                m = []
                for i in range(n):
                    row = []
                    for j in range(n):
                        if i == j:
                            row.append("X")
                            continue
                        if handles[i] is None or handles[j] is None:
                            row.append("U")
                            continue
                        st = get(f"P2P {cap} {i}-{j}", pynvml.nvmlDeviceGetP2PStatus, handles[i], handles[j], idx)
                        row.append(_P2P_STATUS.get(st, "U") if st is not None else "U")
                    m.append(row)
                p2p[cap] = m
    finally:
        steps.run("nvml: shutdown", pynvml.nvmlShutdown)
    return info, gpus, p2p


def _dist_version(*names: str) -> str | None:
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _torch_cuda_without_import() -> str | None:
    """torch.version.cuda read from torch/version.py, so that the probe need not import torch."""
    if "torch" in sys.modules:
        return sys.modules["torch"].version.cuda
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
    m = re.search(r"^cuda\s*(?::[^=]*)?=\s*(None|['\"]([^'\"]*)['\"])", text, re.M)
    if not m:
        raise ValueError("torch/version.py has no `cuda = ...` line")
    return m.group(2)


def _software(steps: _Steps, nvml: dict, import_torch: bool) -> dict:
    s: dict[str, Any] = {"python": platform.python_version()}
    s["torch"] = _dist_version("torch")
    s["torch_cuda"] = steps.run("software: torch CUDA version", _torch_cuda_without_import) if s["torch"] else None
    s["nccl"] = None
    if s["torch_cuda"] and import_torch:
        def nccl():
            import torch  # only on a CUDA build, where NCCL is there to ask

            v = torch.cuda.nccl.version()
            return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)

        s["nccl"] = steps.run("software: NCCL version (torch)", nccl)
    s["nccl_pip"] = _dist_version("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
    s["driver"] = nvml.get("driver_version")
    s["cuda_driver"] = nvml.get("cuda_driver_version")
    s["nvidia_ml_py"] = _dist_version("nvidia-ml-py")
    s["transformers"] = _dist_version("transformers")
    s["sglang"] = _dist_version("sglang")
    s["flashinfer"] = _dist_version("flashinfer-python", "flashinfer")
    s["vllm"] = _dist_version("vllm")
    return s


def _iommu(root: Path, steps: _Steps, gpus: list[dict]) -> dict:
    base = root / "sys/kernel/iommu_groups"
    groups = [d for d in base.iterdir() if d.is_dir()] if base.is_dir() else []
    out: dict[str, Any] = {"groups_present": bool(groups), "group_count": len(groups),
                           "gpu_groups": {g["pci_bus_id"]: g.get("iommu_group") for g in gpus if g.get("pci_bus_id")}}
    bus_ids = [g["pci_bus_id"] for g in gpus if g.get("pci_bus_id")]
    if not bus_ids:
        out["acs"] = {"status": "not available (no GPU to check)", "bridges": {}}
        return out
    bridges: dict[str, dict | None] = {}
    status = "read"
    for bus in bus_ids:
        dev = root / "sys/bus/pci/devices" / bus
        try:
            path = dev.resolve()
        except OSError:
            continue
        for parent in path.parents:
            if not re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", parent.name) or parent.name in bridges:
                continue
            try:
                bridges[parent.name] = parse_acs((parent / "config").read_bytes())
            except (ValueError, OSError) as exc:
                status = f"not available ({exc})"
                break
        if status != "read":
            break
    if status != "read":
        out["acs"] = {"status": status, "bridges": {}}
    else:
        out["acs"] = {"status": "read" if bridges else "not available (no PCI bridge above the GPUs)",
                      "bridges": {k: v for k, v in bridges.items() if v is not None}}
    return out


def probe(root: str | Path = "/", *, import_torch: bool | None = None, p2p: bool = True) -> dict:
    """Probe this machine (or a fixture tree under `root`) and return the documented dict.

    `import_torch`: None = import torch for its NCCL version only where NVML found GPUs; False never.
    `p2p`: query the P2P status matrices (N^2 NVML calls)."""
    t0 = time.perf_counter()
    root = Path(root)
    steps = _Steps()
    res: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "source": "measured",
                           "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           "hostname": socket.gethostname() if root == Path("/") else None}
    cpu = steps.run("cpu: /proc/cpuinfo", lambda: parse_cpuinfo(_read(root / "proc/cpuinfo")), {})
    flag = cpu.pop("hypervisor_flag", None) if cpu else None
    res["cpu"] = cpu
    mi = steps.run("memory: /proc/meminfo", lambda: parse_meminfo(_read(root / "proc/meminfo")), {})
    res["memory"] = {"total_bytes": mi.get("MemTotal"), "swap_total_bytes": mi.get("SwapTotal")}
    res["numa"] = steps.run("numa", lambda: _numa(root, steps), {"count": None, "nodes": []})
    res["virtualization"] = steps.run("virtualization", lambda: _virtualization(root, steps, flag), {"kind": "unknown"})
    if root == Path("/"):
        nvml, gpus, mats = steps.run("nvml", lambda: _nvml(root, steps, p2p), ({"available": False}, [], {}))
    else:
        nvml, gpus, mats = ({"available": False, "statement": f"{NO_GPU_STATEMENT} (fixture tree: NVML not queried)",
                             "driver_version": None, "cuda_driver_version": None, "nvml_version": None,
                             "device_count": 0}, [], {})
    res["nvml"], res["gpus"], res["p2p"] = nvml, gpus, mats
    res["p2p_read"] = mats.get("read")
    res["iommu"] = steps.run("iommu", lambda: _iommu(root, steps, gpus), {"groups_present": None})
    want_torch = bool(gpus) if import_torch is None else import_torch
    res["software"] = steps.run("software", lambda: _software(steps, nvml, want_torch), {})
    res["errors"] = steps.errors
    res["verdicts"] = judge(res)
    res["duration_s"] = round(time.perf_counter() - t0, 3)
    return res


# --------------------------------------------------------------------------- the original machine

def _recorded_int(hw: dict, item: str) -> int | None:
    c = hw.get(item)
    try:
        return int(str(c.value)) if c is not None else None
    except ValueError:
        return None


def parse_sm(text: str) -> tuple[int, int]:
    """"SM120" -> (12, 0); "SM90" -> (9, 0); "SM103" -> (10, 3)."""
    m = re.fullmatch(r"\s*sm_?(\d+)\s*", text, re.I)
    if not m:
        raise ValueError(f"architecture {text!r} is not of the form SM<major><minor> (e.g. SM120)")
    digits = m.group(1)
    return int(digits[:-1]), int(digits[-1])


def parse_pcie_link(text: str) -> tuple[int | None, int | None]:
    """"PCIe Gen5 x16" -> (5, 16)."""
    gen = re.search(r"gen\s*(\d+)", text, re.I)
    width = re.search(r"x\s*(\d+)", text, re.I)
    return (int(gen.group(1)) if gen else None, int(width.group(1)) if width else None)


def from_recorded(hw: dict) -> dict:
    """The original machine in the probe's shape, built from `helpers.book.recorded.hardware()`.

    Only what was recorded is filled in; everything else is None (unknown). The P2P matrix is
    derived: the recorded fact is one code for every pair, expanded to N x N."""
    def val(item):
        c = hw.get(item)
        return None if c is None else str(c.value)

    n = _recorded_int(hw, "gpu_count") or 0
    cc = parse_sm(val("gpu_architecture")) if val("gpu_architecture") else None
    gen, width = parse_pcie_link(val("gpu_link")) if val("gpu_link") else (None, None)
    aff = val("gpu_numa_affinity")
    numa_node = None if aff in (None, "N/A", "n/a", "") else int(aff)
    gpus = [{
        "index": i, "name": val("gpu_model"), "uuid": None, "pci_bus_id": None,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
        "architecture": f"SM{cc[0]}{cc[1]}" if cc else None,
        "memory_total_bytes": None, "pcie_gen_current": None, "pcie_gen_max": gen,
        "pcie_width_current": None, "pcie_width_max": width, "power_limit_w": None,
        "power_limit_default_w": None, "numa_node": numa_node, "numa_node_source": None, "gpu_numa_id": None,
        "local_cpulist": None, "iommu_group": None,
    } for i in range(n)]
    code = val("p2p_read_all_pairs")
    p2p_read = p2p_all(n, code) if code and n else None
    nodes = _recorded_int(hw, "numa_nodes")
    per_node = _recorded_int(hw, "cpus_per_numa_node")
    virt = {
        "systemd_detect_virt": val("virtualization"), "vm": val("virtualization"), "container": None,
        "cpuinfo_hypervisor_flag": None, "dmi_product_name": val("dmi_product"), "dmi_sys_vendor": None,
        "dmi_board_vendor": None, "container_hints": [], "kernel_hints": [],
    }
    virt.update(classify_virtualization(virt))
    if val("hypervisor"):
        virt["hypervisor"] = val("hypervisor")
    res = {
        "schema_version": SCHEMA_VERSION, "source": "recorded", "measured_at": None, "hostname": None,
        "nvml": {"available": True, "statement": f"{n} NVIDIA GPU(s) (recorded)",
                 "driver_version": val("driver"), "cuda_driver_version": None, "nvml_version": None,
                 "device_count": n},
        "gpus": gpus, "p2p_read": p2p_read, "p2p": {"read": p2p_read} if p2p_read else {},
        "virtualization": virt,
        "cpu": {"model": val("cpu_model"), "vendor": None, "logical_cpus": _recorded_int(hw, "cpu_count"),
                "sockets": None, "cores_per_socket": None, "threads_per_core": None, "physical_cores": None},
        "memory": {"total_bytes": None, "swap_total_bytes": 0 if val("swap") == "none" else None},
        "numa": {"count": nodes, "nodes": [{"id": k, "cpulist": None, "cpu_count": per_node,
                                             "memory_total_bytes": None, "distances": None}
                                            for k in range(nodes or 0)]},
        "iommu": {"groups_present": None, "group_count": None, "gpu_groups": {},
                  "acs": {"status": "not recorded", "bridges": {}},
                  "dmesg": val("iommu_messages_in_dmesg")},
        "software": {"python": None, "torch": val("torch"), "torch_cuda": None, "nccl": None, "nccl_pip": None,
                     "driver": val("driver"), "cuda_driver": None, "cuda_toolkit": val("cuda_toolkit"),
                     "nvidia_ml_py": None, "transformers": None, "sglang": val("sglang"),
                     "flashinfer": None, "vllm": val("vllm")},
        "errors": [],
        "duration_s": None,
    }
    res["verdicts"] = judge(res)
    return res


# --------------------------------------------------------------------------- verdicts

@dataclass(frozen=True)
class Verdict:
    check: str
    verdict: str
    reason: str

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} for {self.check!r} is not one of {VERDICTS}")


def _version_tuple(v: str | None) -> tuple[int, ...] | None:
    if not v:
        return None
    nums = re.findall(r"\d+", v)
    return tuple(int(x) for x in nums[:2]) if nums else None


def _pairs(m: list[list[str]]) -> list[str]:
    return [m[i][j] for i in range(len(m)) for j in range(len(m)) if i != j]


def judge(res: dict) -> list[dict]:
    """One verdict per check, a pure function of a probe result (live or `from_recorded`)."""
    gpus = res.get("gpus") or []
    n = len(gpus)
    out: list[Verdict] = []
    nvml = res.get("nvml") or {}
    no_gpu = nvml.get("statement") or NO_GPU_STATEMENT

    # GPUs present
    if n == 0:
        out.append(Verdict("gpus", "n/a", f"{no_gpu}: the GPU checks below cannot run here"))
    else:
        names = sorted({g.get("name") or "unknown" for g in gpus})
        if len(names) > 1:
            out.append(Verdict("gpus", "warn", f"{n} GPUs of mixed models ({', '.join(names)}): "
                                                "tensor parallelism runs at the pace of the slowest"))
        elif n == 1:
            out.append(Verdict("gpus", "warn", f"one GPU ({names[0]}): no GPU-to-GPU traffic to measure; "
                                                "tensor parallelism cannot be tried here"))
        else:
            out.append(Verdict("gpus", "ok", f"{n} x {names[0]}"))

    # architecture
    ccs = sorted({g.get("compute_capability") for g in gpus if g.get("compute_capability")})
    if n == 0:
        out.append(Verdict("gpu_architecture", "n/a", "no GPU"))
    elif not ccs:
        out.append(Verdict("gpu_architecture", "warn", "compute capability unknown: cannot tell which kernels exist"))
    else:
        majors = {int(c.split(".")[0]) for c in ccs}
        arch = ", ".join(f"SM{c.replace('.', '')}" for c in ccs)
        if any(m >= 12 for m in majors):
            out.append(Verdict("gpu_architecture", "warn",
                               f"{arch}: not SM100; kernels built only for SM100/SM103 (trtllm attention, "
                               "trtllm-gen FP4 MoE) do not exist here, so backends must be chosen for it"))
        else:
            out.append(Verdict("gpu_architecture", "ok", f"{arch}"))

    # P2P
    m = res.get("p2p_read")
    if n < 2:
        out.append(Verdict("p2p_read", "n/a", "fewer than two GPUs: no pair to check"))
    elif not m:
        out.append(Verdict("p2p_read", "warn", "P2P status unknown (not queried): run the probe with p2p on"))
    else:
        pairs = _pairs(m)
        bad = [c for c in pairs if c != "OK"]
        codes = ", ".join(sorted(set(bad)))
        if not bad:
            out.append(Verdict("p2p_read", "ok", f"P2P read OK on all {len(pairs)} ordered pairs: "
                                                  "all-reduce can go GPU to GPU directly"))
        elif len(bad) == len(pairs):
            out.append(Verdict("p2p_read", "problem",
                               f"no pair supports P2P read ({codes} on all {len(pairs)}): every all-reduce "
                               "bounces through host memory (NCCL's SHM transport), costing latency per layer"))
        else:
            out.append(Verdict("p2p_read", "warn",
                               f"{len(bad)} of {len(pairs)} ordered pairs lack P2P read ({codes}): rings "
                               "through those pairs go through host memory"))

    # GPU NUMA affinity
    numa_count = (res.get("numa") or {}).get("count")
    if n == 0:
        out.append(Verdict("gpu_numa_affinity", "n/a", "no GPU"))
    else:
        unknown = [g["index"] for g in gpus if g.get("numa_node") is None]
        if not unknown:
            nodes = sorted({g["numa_node"] for g in gpus})
            out.append(Verdict("gpu_numa_affinity", "ok", f"every GPU has a NUMA node ({nodes}): "
                                                           "processes can be pinned next to their GPU"))
        elif numa_count is not None and numa_count <= 1:
            out.append(Verdict("gpu_numa_affinity", "ok", "GPU NUMA affinity unknown, but there is one "
                                                           "NUMA node: no placement to get wrong"))
        else:
            where = f"{numa_count} NUMA nodes" if numa_count else "an unknown number of NUMA nodes"
            out.append(Verdict("gpu_numa_affinity", "warn",
                               f"GPU NUMA affinity unknown for {len(unknown)} of {n} GPUs on {where}: workers "
                               "and host staging buffers cannot be placed near their GPU, so host-staged "
                               "copies may cross sockets"))

    # PCIe link
    known = [g for g in gpus if g.get("pcie_width_current") and g.get("pcie_width_max")]
    if n == 0:
        out.append(Verdict("pcie_link", "n/a", "no GPU"))
    elif not known:
        out.append(Verdict("pcie_link", "n/a", "current PCIe link width not known"))
    else:
        narrow = [g for g in known if g["pcie_width_current"] < g["pcie_width_max"]]
        slow = [g for g in gpus if g.get("pcie_gen_current") and g.get("pcie_gen_max")
                and g["pcie_gen_current"] < g["pcie_gen_max"]]
        g0 = known[0]
        link = f"Gen{g0.get('pcie_gen_current')} x{g0['pcie_width_current']}"
        if narrow:
            out.append(Verdict("pcie_link", "warn",
                               f"{len(narrow)} GPU(s) trained narrower than they can (e.g. GPU "
                               f"{narrow[0]['index']}: x{narrow[0]['pcie_width_current']} of "
                               f"x{narrow[0]['pcie_width_max']}): less host-GPU bandwidth for staged copies"))
        else:
            note = (f"; {len(slow)} GPU(s) below max generation, normal for an idle GPU saving power"
                    if slow else "")
            out.append(Verdict("pcie_link", "ok", f"links at full width ({link} on GPU {g0['index']}){note}"))

    # power limit
    pw = [g for g in gpus if g.get("power_limit_w") and g.get("power_limit_default_w")]
    if n == 0 or not pw:
        out.append(Verdict("power_limit", "n/a", "no GPU" if n == 0 else "power limits not known"))
    else:
        capped = [g for g in pw if g["power_limit_w"] < g["power_limit_default_w"] - 1]
        if capped:
            g = capped[0]
            out.append(Verdict("power_limit", "warn",
                               f"{len(capped)} GPU(s) capped below their default power limit (GPU {g['index']}: "
                               f"{g['power_limit_w']:.0f} of {g['power_limit_default_w']:.0f} W)"))
        else:
            out.append(Verdict("power_limit", "ok", f"power limits at default ({pw[0]['power_limit_w']:.0f} W)"))

    # virtualization
    v = res.get("virtualization") or {}
    kind = v.get("kind", "unknown")
    if kind in ("vm", "container in vm"):
        what = v.get("hypervisor") or "a hypervisor"
        dmi = f"; DMI '{v['dmi_product_name']}'" if v.get("dmi_product_name") else ""
        out.append(Verdict("virtualization", "warn",
                           f"virtual machine ({what}{dmi}): passed-through GPUs often lose P2P and NUMA "
                           "affinity unless the hypervisor exposes them; see the P2P and NUMA checks"))
    elif kind == "container":
        out.append(Verdict("virtualization", "ok", "container on bare metal: the GPUs are the host's own "
                                                    "devices, no hypervisor between them"))
    elif kind == "bare metal":
        out.append(Verdict("virtualization", "ok", "bare metal: no hypervisor between the GPUs"))
    else:
        out.append(Verdict("virtualization", "warn", "could not tell whether this is a VM"))

    # IOMMU / ACS
    io = res.get("iommu") or {}
    acs = io.get("acs") or {}
    redirect = [b for b, f in (acs.get("bridges") or {}).items()
                if f and (f.get("request_redirect") or f.get("completion_redirect"))]
    if n == 0:
        out.append(Verdict("iommu_acs", "n/a", f"no GPU (IOMMU groups visible: {io.get('group_count')})"))
    elif redirect:
        out.append(Verdict("iommu_acs", "warn",
                           f"ACS redirect on {len(redirect)} bridge(s) above the GPUs (e.g. {redirect[0]}): "
                           "peer traffic is sent up to the root complex, slow or hanging per NCCL's docs"))
    elif io.get("groups_present"):
        groups = sorted({str(g) for g in (io.get("gpu_groups") or {}).values() if g is not None})
        out.append(Verdict("iommu_acs", "ok", f"IOMMU on, GPUs in group(s) {', '.join(groups) or 'unknown'}; "
                                               f"ACS {acs.get('status', 'not available')}"))
    elif io.get("groups_present") is False:
        out.append(Verdict("iommu_acs", "n/a", "no IOMMU groups visible (IOMMU off, or not exposed to this "
                                                "guest): says nothing about the host's"))
    else:
        out.append(Verdict("iommu_acs", "n/a", "IOMMU state not known"))

    # CUDA stack
    sw = res.get("software") or {}
    tc, dc = _version_tuple(sw.get("torch_cuda")), _version_tuple(sw.get("cuda_driver"))
    if n == 0:
        out.append(Verdict("cuda_stack", "n/a", "no GPU; torch is "
                                                 + (f"a CUDA {sw['torch_cuda']} build" if sw.get("torch_cuda")
                                                    else "a CPU build" if sw.get("torch") else "not installed")))
    elif not sw.get("torch"):
        out.append(Verdict("cuda_stack", "n/a", "torch not known here"))
    elif res.get("source") == "measured" and not sw.get("torch_cuda"):
        out.append(Verdict("cuda_stack", "warn", "torch is a CPU build on a GPU machine: nothing will run on the GPUs"))
    elif tc and dc and tc > dc:
        out.append(Verdict("cuda_stack", "problem",
                           f"torch needs CUDA {sw['torch_cuda']}, the driver supports up to {sw['cuda_driver']}: "
                           "upgrade the driver or use a torch built for an older CUDA"))
    elif tc and dc:
        nccl = f", NCCL {sw['nccl']}" if sw.get("nccl") else ""
        out.append(Verdict("cuda_stack", "ok", f"torch CUDA {sw['torch_cuda']} within the driver's "
                                                f"{sw['cuda_driver']}{nccl}"))
    else:
        out.append(Verdict("cuda_stack", "n/a", "torch's or the driver's CUDA version not known"))

    # the probe itself
    errs = res.get("errors") or []
    if res.get("source") == "recorded":
        out.append(Verdict("probe", "n/a", "recorded facts, not a live probe"))
    elif errs:
        out.append(Verdict("probe", "warn", f"{len(errs)} probe step(s) failed; first: {errs[0]}"))
    else:
        out.append(Verdict("probe", "ok", "every probe step ran"))
    return [asdict(x) for x in out]


def worst(verdicts: list[dict]) -> str:
    """The worst verdict of a list (problem > warn > ok > n/a)."""
    order = {"problem": 3, "warn": 2, "ok": 1, "n/a": 0}
    return max((v["verdict"] for v in verdicts), key=order.__getitem__, default="n/a")


# --------------------------------------------------------------------------- tables for the chapter

NOT_PROBED = "not probed (mode recorded)"
RECORDED_COL = "recorded: original VM"
MEASURED_COL = "measured: this machine"


def p2p_summary(m: list[list[str]] | None) -> str:
    """One line for a P2P matrix: "OK on 12 of 12 ordered pairs" or "NS on 56 of 56 ordered pairs"."""
    if not m or len(m) < 2:
        return "no GPU pair"
    pairs = _pairs(m)
    counts = {c: pairs.count(c) for c in dict.fromkeys(sorted(pairs))}
    return ", ".join(f"{c} on {k} of {len(pairs)} ordered pairs" for c, k in counts.items())


def _gb(b: int | None) -> str | None:
    return None if not b else f"{b / 1e9:.1f} GB ({b / 2**30:.1f} GiB)"


def side_by_side(hw: dict, res: dict | None):
    """A DataFrame comparing the original machine (recorded, `recorded.hardware()`) with a probe
    result (`res`; None = not probed): item, the two columns, and a note on what each side is."""
    import pandas as pd

    def rec(item):
        c = hw.get(item)
        if c is None:
            return "not recorded"
        return f"{c.value} {c.unit}".strip()

    rec_res = from_recorded(hw)
    rows = []

    def row(item, recorded_value, measure, note=""):
        if res is None:
            m = NOT_PROBED
        else:
            try:
                m = measure(res)
            except Exception as exc:  # noqa: BLE001 - one odd field must not hide the table
                m = f"unknown ({type(exc).__name__})"
            m = "unknown" if m in (None, "") else str(m)
        rows.append({"item": item, RECORDED_COL: recorded_value, MEASURED_COL: m, "note": note})

    gpus = (res or {}).get("gpus") or []
    no_gpu = "no GPU"

    def per_gpu(fn):
        vals = [fn(g) for g in gpus]
        if not vals:
            return no_gpu
        uniq = list(dict.fromkeys(vals))
        return str(uniq[0]) if len(uniq) == 1 else "; ".join(f"GPU {g['index']}: {v}" for g, v in zip(gpus, vals))

    row("GPU model", rec("gpu_model"),
        lambda r: per_gpu(lambda g: g.get("name")) if gpus else (r["nvml"].get("statement") or NO_GPU_STATEMENT))
    row("GPU count", rec("gpu_count"), lambda r: len(r.get("gpus") or []))
    row("GPU architecture", rec("gpu_architecture"), lambda r: per_gpu(lambda g: g.get("architecture")),
        "compute capability as SM<major><minor>")
    row("GPU memory", rec("gpu_memory"), lambda r: per_gpu(lambda g: _gb(g.get("memory_total_bytes"))),
        "recorded: as written (per GPU); measured: NVML's total per GPU")
    row("GPU PCIe link", rec("gpu_link"),
        lambda r: per_gpu(lambda g: f"Gen{g.get('pcie_gen_current')} x{g.get('pcie_width_current')} now, "
                                    f"Gen{g.get('pcie_gen_max')} x{g.get('pcie_width_max')} max"),
        "recorded: as installed in the host; measured: what the driver reports")
    row("GPU power", rec("gpu_tdp"), lambda r: per_gpu(
        lambda g: f"{g['power_limit_w']:.0f} W" if g.get("power_limit_w") else None),
        "recorded: TDP; measured: enforced power limit (not the same quantity)")
    row("GPU NUMA affinity", rec("gpu_numa_affinity"),
        lambda r: per_gpu(lambda g: "unknown" if g.get("numa_node") is None else f"node {g['numa_node']}"),
        "recorded: nvidia-smi topo -m; measured: sysfs numa_node, else NVML memory affinity")
    row("P2P read", p2p_summary(rec_res["p2p_read"]), lambda r: p2p_summary(r.get("p2p_read")),
        "recorded: one code for every pair, expanded to the matrix (derived); measured: NVML P2P status")
    row("virtualization", rec("virtualization"),
        lambda r: f"{r['virtualization'].get('kind')} (systemd-detect-virt --vm: "
                  f"{r['virtualization'].get('vm') or 'absent'})",
        "systemd-detect-virt")
    row("hypervisor", rec("hypervisor"), lambda r: r["virtualization"].get("hypervisor") or "none detected")
    row("DMI product name", rec("dmi_product"), lambda r: r["virtualization"].get("dmi_product_name") or "not readable")
    row("IOMMU", f"dmesg IOMMU messages: {rec('iommu_messages_in_dmesg')}",
        lambda r: f"{r['iommu'].get('group_count')} IOMMU group(s) in sysfs; ACS {r['iommu'].get('acs', {}).get('status')}",
        "different evidence: recorded from dmesg, measured from /sys/kernel/iommu_groups")
    row("CPU model", rec("cpu_model"), lambda r: r["cpu"].get("model"))
    row("logical CPUs", rec("cpu_count"), lambda r: r["cpu"].get("logical_cpus"))
    row("NUMA nodes", rec("numa_nodes"), lambda r: r["numa"].get("count"))
    row("CPUs per NUMA node", rec("cpus_per_numa_node"),
        lambda r: ", ".join(str(n["cpu_count"]) for n in r["numa"].get("nodes", [])))
    row("host memory", rec("memory"), lambda r: _gb(r["memory"].get("total_bytes")),
        "measured: MemTotal of /proc/meminfo")
    row("swap", rec("swap"), lambda r: "none" if not r["memory"].get("swap_total_bytes")
        else _gb(r["memory"]["swap_total_bytes"]))
    row("NVIDIA driver", rec("driver"), lambda r: r["nvml"].get("driver_version") or "none")
    row("CUDA", f"toolkit {rec('cuda_toolkit')}",
        lambda r: f"driver supports {r['software'].get('cuda_driver') or 'n/a'}; torch built for "
                  f"{r['software'].get('torch_cuda') or 'CPU only'}",
        "not the same quantity: recorded the installed toolkit, measured the driver's and torch's CUDA")
    row("torch", rec("torch"), lambda r: r["software"].get("torch") or "not installed")
    row("sglang", rec("sglang"), lambda r: r["software"].get("sglang") or "not installed")
    return pd.DataFrame(rows)


def verdict_table(recorded_res: dict, measured_res: dict | None):
    """A DataFrame of every check: what it asks, and the verdict and reason for each machine."""
    import pandas as pd

    rec = {v["check"]: v for v in recorded_res["verdicts"]}
    mea = {v["check"]: v for v in measured_res["verdicts"]} if measured_res else {}
    rows = []
    for check, (question, why) in CHECKS.items():
        r, m = rec.get(check, {}), mea.get(check, {})
        rows.append({"check": check, "asks": question, "matters because": why,
                     f"{RECORDED_COL}: verdict": r.get("verdict", "n/a"),
                     f"{RECORDED_COL}: reason": r.get("reason", ""),
                     f"{MEASURED_COL}: verdict": m.get("verdict", "not probed") if measured_res else "not probed",
                     f"{MEASURED_COL}: reason": m.get("reason", "") if measured_res else NOT_PROBED})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- fingerprint and CLI

FINGERPRINT_KEYS = ("hostname", "cpu_model", "logical_cpus", "memory_gib", "gpu_count", "gpu_names",
                    "driver", "virtualization")


def fingerprint(result: dict | None = None) -> dict:
    """A small summary of the machine for a run's manifest (a quick probe when `result` is None)."""
    r = result if result is not None else probe(import_torch=False, p2p=False)
    mem = (r.get("memory") or {}).get("total_bytes")
    v = r.get("virtualization") or {}
    kind = v.get("kind", "unknown")
    hv = v.get("hypervisor")
    return {
        "hostname": r.get("hostname"),
        "cpu_model": (r.get("cpu") or {}).get("model"),
        "logical_cpus": (r.get("cpu") or {}).get("logical_cpus"),
        "memory_gib": round(mem / 2**30, 1) if mem else None,
        "gpu_count": len(r.get("gpus") or []),
        "gpu_names": [g.get("name") for g in r.get("gpus") or []],
        "driver": (r.get("nvml") or {}).get("driver_version"),
        "virtualization": f"{kind} ({hv})" if hv else kind,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m helpers.machine.probe",
        description="Probe this machine for multi-GPU inference (NVML GPUs and P2P matrix, "
                    "virtualization, IOMMU, CPU/NUMA, software versions) and print the result as JSON "
                    "with a verdict per check.")
    ap.add_argument("--fingerprint", action="store_true", help="print only the small machine fingerprint")
    ap.add_argument("--no-torch", action="store_true", help="never import torch (no NCCL version)")
    ap.add_argument("--no-p2p", action="store_true", help="skip the GPU-pair P2P status matrices")
    ap.add_argument("--out", metavar="FILE", help="also write the JSON to FILE")
    args = ap.parse_args(argv)
    res = probe(import_torch=False if args.no_torch else None, p2p=not args.no_p2p)
    obj = fingerprint(res) if args.fingerprint else res
    text = json.dumps(obj, indent=2, sort_keys=True, default=str)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
