"""The original machine in the probe's shape, built from its recorded facts (`helpers.core.recorded.hardware()`),
so that the verdicts and tables of the environment chapter treat it exactly as a probed machine.

Only what was recorded is filled in; everything else is None (unknown). The P2P matrix is derived: the
recorded fact is one code for every pair, expanded to N x N.
"""
from __future__ import annotations

from helpers.machine.parsers import classify_virtualization, p2p_all, parse_pcie_link, parse_sm
from helpers.machine.schema import SCHEMA_VERSION
from helpers.machine.verdicts import judge


def _recorded_int(hw: dict, item: str) -> int | None:
    c = hw.get(item)
    try:
        return int(str(c.value)) if c is not None else None
    except ValueError:
        return None


def from_recorded(hw: dict) -> dict:
    """The original machine in the probe's shape, built from `helpers.core.recorded.hardware()`.

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
