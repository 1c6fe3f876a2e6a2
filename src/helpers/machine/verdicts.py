"""Verdicts on a probe result: one per check (ok, warn, problem, n/a) with its reason.

`judge(result)` is a pure function of a probe result (`helpers.machine.probe.probe()`, or the original
machine's recorded facts in the same shape, `helpers.machine.recorded_machine.from_recorded`), so one
piece of code judges both machines. `CHECKS` says what each check asks and why it matters.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from helpers.machine.parsers import ordered_pairs, version_tuple

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


@dataclass(frozen=True)
class Verdict:
    check: str
    verdict: str
    reason: str

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} for {self.check!r} is not one of {VERDICTS}")


def judge(res: dict) -> list[dict]:
    """One verdict per check, a pure function of a probe result (live or `from_recorded`)."""
    gpus = res.get("gpus") or []
    return [asdict(check(res, gpus, len(gpus))) for check in _JUDGES]


def _gpus(res: dict, gpus: list[dict], n: int) -> Verdict:
    """The gpus check (CHECKS["gpus"])."""
    no_gpu = (res.get("nvml") or {}).get("statement") or NO_GPU_STATEMENT
    if n == 0:
        return Verdict("gpus", "n/a", f"{no_gpu}: the GPU checks below cannot run here")
    else:
        names = sorted({g.get("name") or "unknown" for g in gpus})
        if len(names) > 1:
            return Verdict("gpus", "warn", f"{n} GPUs of mixed models ({', '.join(names)}): "
                                            "tensor parallelism runs at the pace of the slowest")
        elif n == 1:
            return Verdict("gpus", "warn", f"one GPU ({names[0]}): no GPU-to-GPU traffic to measure; "
                                            "tensor parallelism cannot be tried here")
        else:
            return Verdict("gpus", "ok", f"{n} x {names[0]}")


def _architecture(res: dict, gpus: list[dict], n: int) -> Verdict:
    """The gpu_architecture check (CHECKS["gpu_architecture"])."""
    ccs = sorted({g.get("compute_capability") for g in gpus if g.get("compute_capability")})
    if n == 0:
        return Verdict("gpu_architecture", "n/a", "no GPU")
    elif not ccs:
        return Verdict("gpu_architecture", "warn", "compute capability unknown: cannot tell which kernels exist")
    else:
        majors = {int(c.split(".")[0]) for c in ccs}
        arch = ", ".join(f"SM{c.replace('.', '')}" for c in ccs)
        if any(m >= 12 for m in majors):
            return Verdict("gpu_architecture", "warn",
                           f"{arch}: not SM100; kernels built only for SM100/SM103 (trtllm attention, "
                           "trtllm-gen FP4 MoE) do not exist here, so backends must be chosen for it")
        else:
            return Verdict("gpu_architecture", "ok", f"{arch}")


def _p2p_read(res: dict, gpus: list[dict], n: int) -> Verdict:
    """The p2p_read check (CHECKS["p2p_read"])."""
    m = res.get("p2p_read")
    if n < 2:
        return Verdict("p2p_read", "n/a", "fewer than two GPUs: no pair to check")
    elif not m:
        return Verdict("p2p_read", "warn", "P2P status unknown (not queried): run the probe with p2p on")
    else:
        pairs = ordered_pairs(m)
        bad = [c for c in pairs if c != "OK"]
        codes = ", ".join(sorted(set(bad)))
        if not bad:
            return Verdict("p2p_read", "ok", f"P2P read OK on all {len(pairs)} ordered pairs: "
                                              "all-reduce can go GPU to GPU directly")
        elif len(bad) == len(pairs):
            return Verdict("p2p_read", "problem",
                           f"no pair supports P2P read ({codes} on all {len(pairs)}): every all-reduce "
                           "bounces through host memory (NCCL's SHM transport assumed; the transport was not logged), "
                           "costing latency per layer")
        else:
            return Verdict("p2p_read", "warn",
                           f"{len(bad)} of {len(pairs)} ordered pairs lack P2P read ({codes}): rings "
                           "through those pairs go through host memory")


def _numa_affinity(res: dict, gpus: list[dict], n: int) -> Verdict:
    """The gpu_numa_affinity check (CHECKS["gpu_numa_affinity"])."""
    numa_count = (res.get("numa") or {}).get("count")
    if n == 0:
        return Verdict("gpu_numa_affinity", "n/a", "no GPU")
    else:
        unknown = [g["index"] for g in gpus if g.get("numa_node") is None]
        if not unknown:
            nodes = sorted({g["numa_node"] for g in gpus})
            return Verdict("gpu_numa_affinity", "ok", f"every GPU has a NUMA node ({nodes}): "
                                                       "processes can be pinned next to their GPU")
        elif numa_count is not None and numa_count <= 1:
            return Verdict("gpu_numa_affinity", "ok", "GPU NUMA affinity unknown, but there is one "
                                                       "NUMA node: no placement to get wrong")
        else:
            where = f"{numa_count} NUMA nodes" if numa_count else "an unknown number of NUMA nodes"
            return Verdict("gpu_numa_affinity", "warn",
                           f"GPU NUMA affinity unknown for {len(unknown)} of {n} GPUs on {where}: workers "
                           "and host staging buffers cannot be placed near their GPU, so host-staged "
                           "copies may cross sockets")


def _pcie_link(res: dict, gpus: list[dict], n: int) -> Verdict:
    """The pcie_link check (CHECKS["pcie_link"])."""
    known = [g for g in gpus if g.get("pcie_width_current") and g.get("pcie_width_max")]
    if n == 0:
        return Verdict("pcie_link", "n/a", "no GPU")
    elif not known:
        return Verdict("pcie_link", "n/a", "current PCIe link width not known")
    else:
        narrow = [g for g in known if g["pcie_width_current"] < g["pcie_width_max"]]
        slow = [g for g in gpus if g.get("pcie_gen_current") and g.get("pcie_gen_max")
                and g["pcie_gen_current"] < g["pcie_gen_max"]]
        g0 = known[0]
        link = f"Gen{g0.get('pcie_gen_current')} x{g0['pcie_width_current']}"
        if narrow:
            return Verdict("pcie_link", "warn",
                           f"{len(narrow)} GPU(s) trained narrower than they can (e.g. GPU "
                           f"{narrow[0]['index']}: x{narrow[0]['pcie_width_current']} of "
                           f"x{narrow[0]['pcie_width_max']}): less host-GPU bandwidth for staged copies")
        else:
            note = (f"; {len(slow)} GPU(s) below max generation, normal for an idle GPU saving power"
                    if slow else "")
            return Verdict("pcie_link", "ok", f"links at full width ({link} on GPU {g0['index']}){note}")


def _power_limit(res: dict, gpus: list[dict], n: int) -> Verdict:
    """The power_limit check (CHECKS["power_limit"])."""
    pw = [g for g in gpus if g.get("power_limit_w") and g.get("power_limit_default_w")]
    if n == 0 or not pw:
        return Verdict("power_limit", "n/a", "no GPU" if n == 0 else "power limits not known")
    else:
        capped = [g for g in pw if g["power_limit_w"] < g["power_limit_default_w"] - 1]
        if capped:
            g = capped[0]
            return Verdict("power_limit", "warn",
                           f"{len(capped)} GPU(s) capped below their default power limit (GPU {g['index']}: "
                           f"{g['power_limit_w']:.0f} of {g['power_limit_default_w']:.0f} W)")
        else:
            return Verdict("power_limit", "ok", f"power limits at default ({pw[0]['power_limit_w']:.0f} W)")


def _virtualization(res: dict, gpus: list[dict], n: int) -> Verdict:
    """The virtualization check (CHECKS["virtualization"])."""
    v = res.get("virtualization") or {}
    kind = v.get("kind", "unknown")
    if kind in ("vm", "container in vm"):
        what = v.get("hypervisor") or "a hypervisor"
        dmi = f"; DMI '{v['dmi_product_name']}'" if v.get("dmi_product_name") else ""
        return Verdict("virtualization", "warn",
                       f"virtual machine ({what}{dmi}): passed-through GPUs often lose P2P and NUMA "
                       "affinity unless the hypervisor exposes them; see the P2P and NUMA checks (page 1's "
                       "check 1 fails on any VM: it asks only whether a hypervisor sits between the GPUs)")
    elif kind == "container":
        return Verdict("virtualization", "ok", "container on bare metal: the GPUs are the host's own "
                                                "devices, no hypervisor between them")
    elif kind == "bare metal":
        return Verdict("virtualization", "ok", "bare metal: no hypervisor between the GPUs")
    else:
        return Verdict("virtualization", "warn", "could not tell whether this is a VM")


def _iommu_acs(res: dict, gpus: list[dict], n: int) -> Verdict:
    """The iommu_acs check (CHECKS["iommu_acs"])."""
    io = res.get("iommu") or {}
    acs = io.get("acs") or {}
    redirect = [b for b, f in (acs.get("bridges") or {}).items()
                if f and (f.get("request_redirect") or f.get("completion_redirect"))]
    if n == 0:
        return Verdict("iommu_acs", "n/a", f"no GPU (IOMMU groups visible: {io.get('group_count')})")
    elif redirect:
        return Verdict("iommu_acs", "warn",
                       f"ACS redirect on {len(redirect)} bridge(s) above the GPUs (e.g. {redirect[0]}): "
                       "peer traffic is sent up to the root complex, slow or hanging per NCCL's docs")
    elif io.get("groups_present"):
        groups = sorted({str(g) for g in (io.get("gpu_groups") or {}).values() if g is not None})
        return Verdict("iommu_acs", "ok", f"IOMMU on, GPUs in group(s) {', '.join(groups) or 'unknown'}; "
                                           f"ACS {acs.get('status', 'not available')}")
    elif io.get("groups_present") is False:
        return Verdict("iommu_acs", "n/a", "no IOMMU groups visible (IOMMU off, or not exposed to this "
                                            "guest): says nothing about the host's")
    else:
        return Verdict("iommu_acs", "n/a", "IOMMU state not known")


def _cuda_stack(res: dict, gpus: list[dict], n: int) -> Verdict:
    """The cuda_stack check (CHECKS["cuda_stack"])."""
    sw = res.get("software") or {}
    tc, dc = version_tuple(sw.get("torch_cuda")), version_tuple(sw.get("cuda_driver"))
    if n == 0:
        return Verdict("cuda_stack", "n/a", "no GPU; torch is "
                                             + (f"a CUDA {sw['torch_cuda']} build" if sw.get("torch_cuda")
                                                else "a CPU build" if sw.get("torch") else "not installed"))
    elif not sw.get("torch"):
        return Verdict("cuda_stack", "n/a", "torch not known here")
    elif res.get("source") == "measured" and not sw.get("torch_cuda"):
        return Verdict("cuda_stack", "warn", "torch is a CPU build on a GPU machine: nothing will run on the GPUs")
    elif tc and dc and tc > dc:
        return Verdict("cuda_stack", "problem",
                       f"torch needs CUDA {sw['torch_cuda']}, the driver supports up to {sw['cuda_driver']}: "
                       "upgrade the driver or use a torch built for an older CUDA")
    elif tc and dc:
        nccl = f", NCCL {sw['nccl']}" if sw.get("nccl") else ""
        return Verdict("cuda_stack", "ok", f"torch CUDA {sw['torch_cuda']} within the driver's "
                                            f"{sw['cuda_driver']}{nccl}")
    else:
        return Verdict("cuda_stack", "n/a", "torch's or the driver's CUDA version not known")


def _probe_steps(res: dict, gpus: list[dict], n: int) -> Verdict:
    """The probe check (CHECKS["probe"])."""
    errs = res.get("errors") or []
    if res.get("source") == "recorded":
        return Verdict("probe", "n/a", "recorded facts, not a live probe")
    elif errs:
        return Verdict("probe", "warn", f"{len(errs)} probe step(s) failed; first: {errs[0]}")
    else:
        return Verdict("probe", "ok", "every probe step ran")


#: the checks in the order `judge` makes them (the order of CHECKS)
_JUDGES = (_gpus, _architecture, _p2p_read, _numa_affinity, _pcie_link, _power_limit, _virtualization, _iommu_acs,
           _cuda_stack, _probe_steps)


def worst(verdicts: list[dict]) -> str:
    """The worst verdict of a list (problem > warn > ok > n/a)."""
    order = {"problem": 3, "warn": 2, "ok": 1, "n/a": 0}
    return max((v["verdict"] for v in verdicts), key=order.__getitem__, default="n/a")


def counts(verdicts: list[dict]) -> dict[str, int]:
    """How many checks got each verdict, in the order of VERDICTS (every word present, 0 included)."""
    c = Counter(v["verdict"] for v in verdicts)
    return {w: c.get(w, 0) for w in VERDICTS}


def counts_text(verdicts: list[dict]) -> str:
    """"1 ok, 1 warn, 0 problem, 8 n/a"."""
    return ", ".join(f"{k} {w}" for w, k in counts(verdicts).items())


def with_verdict(verdicts: list[dict], *words: str) -> list[dict]:
    """The verdicts that are one of `words`, in judging order; ValueError for a word not in VERDICTS."""
    unknown = [w for w in words if w not in VERDICTS]
    if unknown:
        raise ValueError(f"verdict word(s) {unknown} are not among {VERDICTS}")
    return [v for v in verdicts if v["verdict"] in words]
