"""An NCCL topology file that presents this machine's GPUs as the original VM presented its own.

The original VM (Proxmox, QEMU machine type i440FX) showed its guest every GPU on one flat PCI host
bridge, with no NUMA affinity (`numa_node: N/A` for every GPU) and no peer-to-peer (`nvidia-smi topo -p2p
r`: NS for every pair). NCCL inside such a VM sees no link speeds and no affinity and tunes for what it
sees (NVIDIA/nccl #428, #1329). `NCCL_TOPO_FILE` replaces NCCL's own detection with an XML description;
`vm_topology_xml` writes one in which this machine's GPUs (by their real PCI bus ids, which NCCL matches
against the devices it opens) sit under a single host bridge of one CPU node whose affinity is empty.

    xml = vm_topology_xml(bus_ids_of_this_machine(), link=recorded_vm_link())
    env = {"NCCL_TOPO_FILE": write(xml, path), "NCCL_P2P_DISABLE": "1"}

What the file cannot reproduce: the host memory path's own speed (this machine's, not the VM's), and
whatever the hypervisor does to DMA. It reproduces what NCCL *believes* about the machine, which decides
its algorithm, protocol and channel choices. The link speed and width are the recorded physical ones
(PCIe Gen5 x16); the recorded data do not say what the VM reported for them (an assumption, stated on
the page).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

#: PCIe generation -> NCCL's link_speed string (as NCCL writes it in its own topology dumps).
LINK_SPEEDS = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe",
               5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}
BUS_ID = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


class TopologyError(ValueError):
    """Inputs that cannot describe a topology (a malformed bus id, an unknown link)."""


@dataclass(frozen=True)
class Link:
    generation: int
    width: int
    source: str = ""

    def __post_init__(self):
        if self.generation not in LINK_SPEEDS:
            raise TopologyError(f"PCIe generation {self.generation!r} unknown; expected one of {sorted(LINK_SPEEDS)}")
        if self.width not in (1, 2, 4, 8, 16):
            raise TopologyError(f"PCIe link width {self.width!r}: expected 1, 2, 4, 8 or 16 lanes")

    @property
    def speed(self) -> str:
        return LINK_SPEEDS[self.generation]


def parse_link(text: str, source: str = "") -> Link:
    """'PCIe Gen5 x16' -> Link(5, 16)."""
    m = re.search(r"gen\s*(\d)\s*x\s*(\d+)", str(text), re.I)
    if not m:
        raise TopologyError(f"cannot read a PCIe link from {text!r}; expected e.g. 'PCIe Gen5 x16'")
    return Link(int(m.group(1)), int(m.group(2)), source)


def recorded_vm_link() -> Link:
    """The original machine's GPU link, from data/recorded/hardware.csv (as physically installed)."""
    from helpers.core import recorded

    hw = recorded.load("recorded/hardware.csv").set_index("item")
    if "gpu_link" not in hw.index:
        raise TopologyError("data/recorded/hardware.csv has no 'gpu_link' row; the VM's link is unknown")
    row = hw.loc["gpu_link"]
    return parse_link(row["value"], f"{row['source']}: {row.get('note', '')}".strip(": "))


def normalise_bus_id(bus_id: str) -> str:
    """NVML's '00000000:3B:00.0' -> NCCL's '0000:3b:00.0' (NCCL compares lower-case, 4-digit domains)."""
    b = str(bus_id).strip()
    if not BUS_ID.match(b):
        raise TopologyError(f"PCI bus id {bus_id!r} is malformed; expected DDDD:BB:DD.F (e.g. 0000:3b:00.0)")
    domain, rest = b.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"


def vm_topology_xml(bus_ids: list[str], link: Link, sm: int | None = None, cpu_vendor: str = "AuthenticAMD") -> str:
    """The topology XML: one CPU node with no affinity, one host bridge, every GPU directly under it.
    `sm` (e.g. 90 for Hopper) is written when known; NCCL fills what the file leaves out from the device."""
    if not bus_ids:
        raise TopologyError("no GPUs: a topology needs at least one GPU bus id")
    ids = [normalise_bus_id(b) for b in bus_ids]
    if len(set(ids)) != len(ids):
        raise TopologyError(f"duplicate GPU bus ids in {ids}")
    speed, width = quoteattr(link.speed), quoteattr(str(link.width))
    lines = ['<system version="1">',
             f'  <cpu numaid="-1" affinity="" arch="x86_64" vendor={quoteattr(cpu_vendor)}>',
             f'    <pci busid="0000:00:00.0" class="0x060000" link_speed={speed} link_width={width}>']
    for rank, b in enumerate(ids):
        gpu = f'<gpu dev="{rank}"' + (f' sm="{int(sm)}"' if sm else "") + ' gdr="0"/>'
        lines += [f'      <pci busid="{b}" class="0x030200" link_speed={speed} link_width={width}>',
                  f"        {gpu}", "      </pci>"]
    lines += ["    </pci>", "  </cpu>", "</system>"]
    return "\n".join(lines) + "\n"


def write(xml: str, path: str | Path) -> str:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(xml)
    return str(p)


def bus_ids_of_this_machine() -> list[str]:
    """Every visible NVIDIA GPU's PCI bus id, through NVML (empty without a GPU)."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            bid = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).busId
            out.append(bid.decode() if isinstance(bid, bytes) else str(bid))
        return out
    finally:
        pynvml.nvmlShutdown()
