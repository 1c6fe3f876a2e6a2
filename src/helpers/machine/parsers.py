"""Parsers of what the environment probe reads: /proc and /sys text, PCI config space, NVML's answers in
`nvidia-smi`'s vocabulary (the P2P legend, affinity masks, bus ids) and the recorded machine's figures
("SM120", "PCIe Gen5 x16"). Pure functions of text or bytes; each raises ValueError naming the input it
could not read. `helpers.machine.probe` collects the inputs, `helpers.machine.verdicts` judges them.
"""
from __future__ import annotations

import re

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
P2P_STATUS_CODES = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "NS", 5: "NS", 6: "U"}
#: DMI product names / vendors that only virtual machines report
_VM_DMI = (
    ("qemu", "QEMU"), ("standard pc", "QEMU"), ("kvm", "KVM"), ("vmware", "VMware"),
    ("virtualbox", "VirtualBox"), ("innotek", "VirtualBox"), ("virtual machine", "Hyper-V"),
    ("hvm domu", "Xen"), ("xen", "Xen"), ("bochs", "Bochs"), ("google compute engine", "Google"),
    ("cloud hypervisor", "Cloud Hypervisor"), ("firecracker", "Firecracker"), ("proxmox", "Proxmox"),
)
_CONTAINER_CGROUP = ("docker", "kubepods", "containerd", "lxc", "libpod", "podman", "crio")


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


def ordered_pairs(m: list[list[str]]) -> list[str]:
    """The off-diagonal codes of a P2P matrix, one per ordered GPU pair."""
    return [m[i][j] for i in range(len(m)) for j in range(len(m)) if i != j]


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


def version_tuple(v: str | None) -> tuple[int, ...] | None:
    """(major, minor) of a version string such as "12.8" or "13.0.1"; None when it has no number."""
    if not v:
        return None
    nums = re.findall(r"\d+", v)
    return tuple(int(x) for x in nums[:2]) if nums else None
