"""A live probe of this machine for multi-GPU inference: collection, fingerprint and command line.

`probe()` reads NVML (through nvidia-ml-py, `import pynvml`), /proc and /sys and a few package
versions, and returns one JSON-able dict. Every step is guarded: a step that fails appends a line to
`errors` and the probe goes on, so a machine without a GPU, without systemd or without /sys still
gets a full report. The only subprocess is `systemd-detect-virt`, with a timeout. `fingerprint()` is
the small summary the runbook records in each run's manifest.

The rest of the job lives beside this module in helpers.machine: `parsers` reads the text of /proc, /sys,
PCI config space and NVML's answers; `verdicts.judge(result)` gives one verdict per check, a pure
function of the dict; `recorded_machine.from_recorded(hardware())` builds the same shape from the
original investigation's recorded facts, so both machines are judged by the same code. The environment
chapter's tables and sentences are helpers.chapters.environment's.

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
- ``p2p_read``: N x N list of `nvidia-smi topo -p2p r` legend codes (``parsers.P2P_LEGEND``), "X" on the
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
- ``guest``: what a GPUDirect clique depends on: ``hypervisor`` (as the guest sees it), ``host_bridge``
  (PCI 0000:00:00.0's vendor:device and the machine type it reveals), ``bar1_bytes`` and ``bar1`` per GPU,
  ``nccl_p2p_level`` (the environment's NCCL_P2P_LEVEL); each value, or why it could not be read.
- ``software``: ``python``, ``torch``, ``torch_cuda`` (CUDA torch was built with, None = CPU build),
  ``nccl`` (torch.cuda.nccl.version(), where CUDA), ``nccl_pip``, ``driver``, ``cuda_driver``,
  ``nvidia_ml_py``, ``transformers``, ``sglang``, ``flashinfer``, ``vllm`` (None = not installed).
- ``verdicts``: list of {``check``, ``verdict`` (one of ``verdicts.VERDICTS``), ``reason``}.
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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from helpers.machine.parsers import (P2P_STATUS_CODES, affinity_nodes, classify_virtualization,
                                     container_hints_from_cgroup, gpu_numa_node, kernel_hints, parse_acs,
                                     parse_cpuinfo, parse_cpulist, parse_meminfo, pci_bus_id_to_sysfs)
from helpers.machine.schema import SCHEMA_VERSION
from helpers.machine.verdicts import NO_GPU_STATEMENT, judge

#: nvmlGpuP2PCapsIndex_t (written out: pynvml's NVML_P2P_CAPS_INDEX_READ is the tuple (0,))
P2P_CAPS = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}
_AFFINITY_SCOPE_NODE = 0  # NVML_AFFINITY_SCOPE_NODE


# --------------------------------------------------------------------------- collection

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


#: front host bridges (PCI 0000:00:00.0 vendor:device) a guest may see, by the machine type they reveal
HOST_BRIDGES = {"8086:29c0": "Intel Q35 (QEMU's q35 machine type, PCIe)",
                "8086:1237": "Intel 440FX (QEMU's i440fx machine type, legacy PCI)"}


def _guest(root: Path, virt: dict, gpus: list[dict], live: bool) -> dict:
    """What a GPUDirect clique in a guest depends on, where this machine lets it be read: the hypervisor the
    guest sees, the front host bridge's PCI id (the machine type), each GPU's BAR1 size and the
    NCCL_P2P_LEVEL in effect; each value, or why it could not be read."""
    bridge = root / "sys/bus/pci/devices/0000:00:00.0"
    vendor, device = _read_opt(bridge / "vendor"), _read_opt(bridge / "device")
    if vendor and device:
        bid = f"{vendor.strip().removeprefix('0x')}:{device.strip().removeprefix('0x')}".lower()
        host_bridge = f"{bid} ({HOST_BRIDGES.get(bid, 'not a bridge this book knows')})"
    else:
        host_bridge = "not readable here (no PCI device 0000:00:00.0 in sysfs)"
    hv = virt.get("hypervisor") or (("a hypervisor (cpuinfo's flag), unnamed" if virt.get("cpuinfo_hypervisor_flag")
                                     else "none visible to the guest"))
    bar1 = [g.get("bar1_total_bytes") for g in gpus]
    bar1_text = (", ".join(f"GPU {g['index']}: {b / 2**20:.0f} MiB" if b else f"GPU {g['index']}: not read"
                           for g, b in zip(gpus, bar1)) if gpus else "no GPU here")
    level = os.environ.get("NCCL_P2P_LEVEL") if live else None
    return {"hypervisor": hv, "host_bridge": host_bridge, "bar1_bytes": bar1, "bar1": bar1_text,
            "nccl_p2p_level": level or ("not set (NCCL decides from the topology)" if live else
                                        "not read (fixture tree)")}


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
        get = _nvml_getter(pynvml, steps)
        info["available"] = True
        n = _nvml_system(pynvml, get, info)
        handles = []
        for i in range(n):
            h = get(f"GPU {i} handle", pynvml.nvmlDeviceGetHandleByIndex, i)
            handles.append(h)
            gpus.append({"index": i} if h is None else _nvml_gpu(pynvml, get, root, steps, i, h))
        if want_p2p and n > 1:
            p2p = _nvml_p2p(pynvml, get, handles)
    finally:
        steps.run("nvml: shutdown", pynvml.nvmlShutdown)
    return info, gpus, p2p


def _nvml_getter(pynvml, steps: _Steps) -> Callable:
    def get(name, fn, *args):
        """One NVML query; NotSupported / FunctionNotFound -> None silently, other errors recorded."""
        try:
            return fn(*args)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            return None  # this GPU or driver does not have it: unknown, not an error
        except Exception as exc:  # noqa: BLE001
            steps.errors.append(f"nvml: {name}: {type(exc).__name__}: {exc}")
            return None

    return get


def _nvml_system(pynvml, get: Callable, info: dict) -> int:
    """The driver's, NVML's and CUDA's versions and the device count into `info`; returns the count."""
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
    return n


def _nvml_gpu(pynvml, get: Callable, root: Path, steps: _Steps, i: int, h) -> dict:
    """One GPU's entry of `gpus` (the module docstring's keys), from NVML and its PCI device in sysfs."""
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
    bar1 = get(f"GPU {i} BAR1", pynvml.nvmlDeviceGetBAR1MemoryInfo, h)
    g["bar1_total_bytes"] = int(bar1.bar1Total) if bar1 is not None else None
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
    return g


def _nvml_p2p(pynvml, get: Callable, handles: list) -> dict[str, list]:
    """The P2P status matrices (P2P_CAPS -> N x N legend codes; "X" on the diagonal, "U" unknown)."""
    n, p2p = len(handles), {}
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
                row.append(P2P_STATUS_CODES.get(st, "U") if st is not None else "U")
            m.append(row)
        p2p[cap] = m
    return p2p


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
    res["guest"] = steps.run("guest", lambda: _guest(root, res["virtualization"], gpus, root == Path("/")), {})
    want_torch = bool(gpus) if import_torch is None else import_torch
    res["software"] = steps.run("software", lambda: _software(steps, nvml, want_torch), {})
    res["errors"] = steps.errors
    res["verdicts"] = judge(res)
    res["duration_s"] = round(time.perf_counter() - t0, 3)
    return res


def from_recorded(hw: dict) -> dict:
    """The original machine in the probe's shape: `helpers.machine.recorded_machine.from_recorded` (the VM/P2P
    chapter calls it from here)."""
    from helpers.machine import recorded_machine

    return recorded_machine.from_recorded(hw)


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
