"""Tests of the environment probe (helpers.machine: probe, parsers, verdicts, recorded_machine): the live
probe on this machine, its parsers against fixture text, the verdict function on synthetic machines (the
original VM's situation among them) and the CLI. The chapter's tables: test_chapter_environment.py."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.machine import parsers, probe, recorded_machine, verdicts
from helpers.core import recorded

FIX = Path(__file__).parent / "fixtures" / "probe"

#: the top-level keys the docstring promises other chapters
TOP_KEYS = {"schema_version", "source", "measured_at", "hostname", "duration_s", "nvml", "gpus", "p2p_read",
            "p2p", "virtualization", "cpu", "memory", "numa", "iommu", "software", "verdicts", "errors"}
GPU_KEYS = {"index", "name", "uuid", "pci_bus_id", "compute_capability", "architecture", "memory_total_bytes",
            "pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max", "power_limit_w",
            "power_limit_default_w", "numa_node", "numa_node_source", "gpu_numa_id", "local_cpulist", "iommu_group"}
CHECK_NAMES = {"gpus", "gpu_architecture", "p2p_read", "gpu_numa_affinity", "pcie_link", "power_limit",
          "virtualization", "iommu_acs", "cuda_stack", "probe"}


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return False


HAS_GPU = _has_gpu()


def by_check(verdicts):
    return {v["check"]: v for v in verdicts}


# --------------------------------------------------------------------------- the live probe

@pytest.mark.integration
def test_live_probe_structure():
    r = probe.probe()     # its speed (under 2 s without a GPU) is benchmarks/bench_probe.py's figure, not a test's
    assert TOP_KEYS <= set(r), f"missing keys {TOP_KEYS - set(r)}"
    assert r["schema_version"] == probe.SCHEMA_VERSION and r["source"] == "measured"
    json.dumps(r)  # JSON-able as it stands
    assert set(by_check(r["verdicts"])) == CHECK_NAMES == set(verdicts.CHECKS)
    assert all(v["verdict"] in verdicts.VERDICTS and v["reason"] for v in r["verdicts"])
    assert r["cpu"]["logical_cpus"] >= 1 and r["cpu"]["model"]
    assert r["memory"]["total_bytes"] > 0
    assert r["virtualization"]["kind"] in ("bare metal", "vm", "container", "container in vm", "unknown")
    assert {"python", "torch", "torch_cuda", "nccl", "driver", "cuda_driver", "sglang", "flashinfer",
            "transformers"} <= set(r["software"])
    assert "torch" not in sys.modules or r["software"]["torch"]


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
@pytest.mark.integration
def test_live_probe_says_plainly_there_is_no_gpu():
    r = probe.probe()
    assert r["nvml"]["available"] is False
    assert r["nvml"]["statement"].startswith(verdicts.NO_GPU_STATEMENT)
    assert r["gpus"] == [] and r["p2p_read"] is None
    v = by_check(r["verdicts"])
    assert v["gpus"]["verdict"] == "n/a" and verdicts.NO_GPU_STATEMENT in v["gpus"]["reason"]
    assert v["p2p_read"]["verdict"] == "n/a"
    # everything else is still reported
    assert r["numa"]["count"] >= 1 and r["software"]["python"]


def test_every_top_level_key_is_documented():
    doc = probe.__doc__
    for k in TOP_KEYS:
        assert f"``{k}``" in doc, f"key {k} is not documented in helpers.machine.probe's docstring"
    for k in GPU_KEYS:
        assert f"``{k}``" in doc, f"GPU key {k} is not documented in helpers.machine.probe's docstring"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="no GPU: needs an NVIDIA GPU")
def test_live_probe_on_a_gpu():
    r = probe.probe()
    assert r["nvml"]["available"] and r["nvml"]["driver_version"] and r["nvml"]["cuda_driver_version"]
    n = len(r["gpus"])
    assert n == r["nvml"]["device_count"] >= 1
    for g in r["gpus"]:
        assert GPU_KEYS <= set(g)
        assert g["name"] and g["compute_capability"] and g["memory_total_bytes"] > 2**30
        assert g["pcie_width_max"] and g["pcie_gen_max"] and g["power_limit_w"] > 0
        assert g["pci_bus_id"] and (Path("/sys/bus/pci/devices") / g["pci_bus_id"]).exists()
    if n > 1:
        m = r["p2p_read"]
        assert len(m) == n and all(len(row) == n for row in m)
        assert all(c in parsers.P2P_LEGEND for row in m for c in row)
    assert r["software"]["driver"] == r["nvml"]["driver_version"]
    assert r["errors"] == [], r["errors"]


# --------------------------------------------------------------------------- parsers

def test_parse_cpuinfo_kvm_guest_has_hypervisor_flag():
    c = parsers.parse_cpuinfo((FIX / "cpuinfo_kvm.txt").read_text())
    assert c["hypervisor_flag"] is True
    assert c["model"] == "AMD EPYC 7763 64-Core Processor" and c["vendor"] == "AuthenticAMD"
    assert (c["logical_cpus"], c["sockets"], c["cores_per_socket"], c["threads_per_core"], c["physical_cores"]) == \
        (4, 2, 2, 1, 4)


def test_parse_cpuinfo_bare_metal_has_no_hypervisor_flag():
    c = parsers.parse_cpuinfo((FIX / "cpuinfo_baremetal.txt").read_text())
    assert c["hypervisor_flag"] is False
    assert (c["logical_cpus"], c["sockets"], c["cores_per_socket"], c["threads_per_core"], c["physical_cores"]) == \
        (4, 1, 2, 2, 2)


def test_parse_cpuinfo_rejects_other_text():
    with pytest.raises(ValueError, match="/proc/cpuinfo"):
        parsers.parse_cpuinfo("MemTotal: 12 kB\n")


def test_parse_cpulist():
    assert parsers.parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parsers.parse_cpulist("\n") == []
    with pytest.raises(ValueError, match="backwards"):
        parsers.parse_cpulist("5-2")


def test_parse_meminfo_system_and_node():
    m = parsers.parse_meminfo((FIX / "meminfo.txt").read_text())
    assert m["MemTotal"] == 16384000 * 1024 and m["SwapTotal"] == 0 and m["HugePages_Total"] == 0
    assert parsers.parse_meminfo((FIX / "node1_meminfo.txt").read_text())["MemTotal"] == 8192000 * 1024


def test_container_and_kernel_hints():
    assert parsers.container_hints_from_cgroup((FIX / "cgroup_docker.txt").read_text()) == \
        ["/proc/1/cgroup mentions docker"]
    assert parsers.container_hints_from_cgroup((FIX / "cgroup_host.txt").read_text()) == []
    assert parsers.kernel_hints("Linux version 4.4.0", "console=ttyS0 --firecracker-init") == \
        ["Firecracker (kernel command line)"]
    assert parsers.kernel_hints("Linux version 6.8.0-generic", "ro quiet") == []


def test_dmi_hypervisor():
    assert parsers.dmi_hypervisor("Standard PC (Q35 + ICH9, 2009)", "QEMU") == "QEMU"
    assert parsers.dmi_hypervisor("VMware Virtual Platform") == "VMware"
    assert parsers.dmi_hypervisor("Virtual Machine", "Microsoft Corporation") == "Hyper-V"
    assert parsers.dmi_hypervisor("PowerEdge R760xa", "Dell Inc.") is None
    assert parsers.dmi_hypervisor(None, None) is None


def test_pci_bus_id_to_sysfs():
    assert parsers.pci_bus_id_to_sysfs("00000000:17:00.0") == "0000:17:00.0"
    assert parsers.pci_bus_id_to_sysfs("00000001:C1:00.0") == "0001:c1:00.0"
    with pytest.raises(ValueError, match="domain:bus:device.function"):
        parsers.pci_bus_id_to_sysfs("GPU-0")


def _config_with_acs(ctl: int) -> bytes:
    """A 4096-byte config space: AER (0x0001) at 0x100 -> ACS (0x000D) at 0x148."""
    cfg = bytearray(4096)
    cfg[0x100:0x104] = (0x0001 | (1 << 16) | (0x148 << 20)).to_bytes(4, "little")
    cfg[0x148:0x14C] = (0x000D | (1 << 16)).to_bytes(4, "little")
    cfg[0x14C:0x14E] = (0x7F).to_bytes(2, "little")
    cfg[0x14E:0x150] = ctl.to_bytes(2, "little")
    return bytes(cfg)


def test_parse_acs():
    flags = parsers.parse_acs(_config_with_acs(0b0001101))  # source validation, request + completion redirect
    assert flags["source_validation"] and flags["request_redirect"] and flags["completion_redirect"]
    assert not flags["translation_blocking"] and not flags["upstream_forwarding"]
    assert not any(parsers.parse_acs(_config_with_acs(0)).values())
    no_acs = bytearray(4096)
    no_acs[0x100:0x104] = (0x0001 | (1 << 16)).to_bytes(4, "little")  # AER only, end of chain
    assert parsers.parse_acs(bytes(no_acs)) is None
    with pytest.raises(ValueError, match="as root"):
        parsers.parse_acs(bytes(64))


def test_gpu_numa_node_sources():
    assert parsers.affinity_nodes([0b101, 1]) == [0, 2, 64]
    assert parsers.gpu_numa_node("1\n", [0]) == (1, "sysfs")  # the kernel's answer wins
    assert parsers.gpu_numa_node("-1", [1]) == (1, "nvml")  # one node in NVML's mask
    assert parsers.gpu_numa_node("-1", [0, 1]) == (None, None)  # every node: no affinity
    assert parsers.gpu_numa_node(None, None) == (None, None)
    assert parsers.gpu_numa_node("garbage", []) == (None, None)


def test_parse_sm_and_link():
    assert parsers.parse_sm("SM120") == (12, 0) and parsers.parse_sm("sm_90") == (9, 0)
    assert parsers.parse_sm("SM103") == (10, 3)
    with pytest.raises(ValueError, match="SM<major><minor>"):
        parsers.parse_sm("Blackwell")
    assert parsers.parse_pcie_link("PCIe Gen5 x16") == (5, 16)
    assert parsers.parse_pcie_link("unknown") == (None, None)


def test_classify_virtualization():
    c = parsers.classify_virtualization
    assert c({"vm": "none", "container": "none", "cpuinfo_hypervisor_flag": False})["kind"] == "bare metal"
    assert c({"vm": "none", "container": "docker", "cpuinfo_hypervisor_flag": False})["kind"] == "container"
    kvm = c({"vm": "kvm", "container": "none", "dmi_product_name": "Standard PC (Q35 + ICH9, 2009)"})
    assert kvm["kind"] == "vm" and kvm["is_vm"] and "kvm" in kvm["hypervisor"]
    # no systemd-detect-virt: the cpuinfo flag or DMI still tell
    assert c({"cpuinfo_hypervisor_flag": True})["kind"] == "vm"
    assert c({"cpuinfo_hypervisor_flag": False, "dmi_product_name": "VMware Virtual Platform"})["kind"] == "vm"
    assert c({"cpuinfo_hypervisor_flag": False, "dmi_product_name": "PowerEdge R760xa"})["kind"] == "bare metal"
    assert c({})["kind"] == "unknown"


# --------------------------------------------------------------------------- the probe on a fixture tree

def _tree(tmp_path: Path, cpuinfo: str = "cpuinfo_kvm.txt", product: str | None = "Standard PC (Q35 + ICH9, 2009)"):
    (tmp_path / "proc/1").mkdir(parents=True)
    if cpuinfo:
        shutil.copy(FIX / cpuinfo, tmp_path / "proc/cpuinfo")
    else:
        (tmp_path / "proc/cpuinfo").write_text("")
    shutil.copy(FIX / "meminfo.txt", tmp_path / "proc/meminfo")
    shutil.copy(FIX / "cgroup_host.txt", tmp_path / "proc/1/cgroup")
    (tmp_path / "proc/version").write_text("Linux version 6.8.0\n")
    (tmp_path / "proc/cmdline").write_text("ro quiet\n")
    for nid, cpus in ((0, "0-1"), (1, "2-3")):
        d = tmp_path / f"sys/devices/system/node/node{nid}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
        (d / "meminfo").write_text(f"Node {nid} MemTotal:        8192000 kB\n")
        (d / "distance").write_text("10 32\n" if nid == 0 else "32 10\n")
    if product:
        dmi = tmp_path / "sys/class/dmi/id"
        dmi.mkdir(parents=True)
        (dmi / "product_name").write_text(product + "\n")
        (dmi / "sys_vendor").write_text("QEMU\n")
    return tmp_path


def test_probe_on_a_fixture_vm(tmp_path):
    r = probe.probe(_tree(tmp_path), import_torch=False)
    assert r["errors"] == []
    assert r["cpu"]["sockets"] == 2 and r["memory"]["total_bytes"] == 16384000 * 1024
    assert r["numa"]["count"] == 2
    assert [n["cpu_count"] for n in r["numa"]["nodes"]] == [2, 2]
    assert r["numa"]["nodes"][1]["distances"] == [32, 10]
    v = r["virtualization"]
    assert v["kind"] == "vm" and v["cpuinfo_hypervisor_flag"] is True and v["hypervisor"] == "QEMU"
    assert r["iommu"]["groups_present"] is False
    assert by_check(r["verdicts"])["virtualization"]["verdict"] == "warn"


def test_a_failing_step_is_recorded_and_the_probe_goes_on(tmp_path):
    root = _tree(tmp_path, cpuinfo="", product=None)
    (root / "sys/devices/system/node/node1/cpulist").write_text("7-3\n")  # malformed
    r = probe.probe(root, import_torch=False)
    assert any(e.startswith("cpu: /proc/cpuinfo") for e in r["errors"]), r["errors"]
    assert any("node1 cpulist parse" in e and "backwards" in e for e in r["errors"]), r["errors"]
    assert r["memory"]["total_bytes"] == 16384000 * 1024 and r["numa"]["count"] == 2
    assert by_check(r["verdicts"])["probe"]["verdict"] == "warn"


# --------------------------------------------------------------------------- verdicts

def _machine(n, code, kind="vm", numa_nodes=2, gpu_numa=None, arch="9.0", width=(16, 16), torch_cuda="12.8",
             cuda_driver="12.8"):
    gpus = [{"index": i, "name": "NVIDIA H100 80GB HBM3", "compute_capability": arch,
             "pcie_gen_current": 5, "pcie_gen_max": 5, "pcie_width_current": width[0], "pcie_width_max": width[1],
             "power_limit_w": 700.0, "power_limit_default_w": 700.0,
             "numa_node": gpu_numa if gpu_numa is None else i * numa_nodes // n} for i in range(n)]
    virt = {"vm": "kvm" if kind == "vm" else "none", "container": "none",
            "cpuinfo_hypervisor_flag": kind == "vm"}
    virt.update(parsers.classify_virtualization(virt))
    return {"source": "measured", "gpus": gpus, "p2p_read": parsers.p2p_all(n, code) if n else None,
            "nvml": {"available": True, "statement": f"{n} NVIDIA GPU(s) visible to NVML"},
            "numa": {"count": numa_nodes}, "virtualization": virt,
            "iommu": {"groups_present": kind != "vm", "gpu_groups": {f"0000:{i:02x}:00.0": str(i) for i in range(n)},
                      "acs": {"status": "read", "bridges": {}}},
            "software": {"torch": "2.9.1", "torch_cuda": torch_cuda, "cuda_driver": cuda_driver, "nccl": "2.27.5"},
            "errors": []}


def test_verdicts_kvm_vm_with_all_pairs_ns_are_problems():
    v = by_check(verdicts.judge(_machine(8, "NS", kind="vm", gpu_numa=None)))
    assert v["p2p_read"]["verdict"] == "problem" and "host memory" in v["p2p_read"]["reason"]
    assert v["virtualization"]["verdict"] == "warn" and "kvm" in v["virtualization"]["reason"]
    assert v["gpu_numa_affinity"]["verdict"] == "warn" and "unknown" in v["gpu_numa_affinity"]["reason"]
    assert verdicts.worst(list(v.values())) == "problem"


def test_verdicts_bare_metal_all_ok_box_is_ok():
    judged = verdicts.judge(_machine(8, "OK", kind="bare metal", gpu_numa=0))
    bad = [v for v in judged if v["verdict"] != "ok"]
    assert bad == [], bad
    assert verdicts.worst(judged) == "ok"


def test_verdicts_partial_p2p_narrow_link_sm120_cuda_mismatch():
    m = _machine(4, "OK", kind="bare metal", gpu_numa=0, arch="12.0", width=(8, 16),
                 torch_cuda="13.0", cuda_driver="12.8")
    m["p2p_read"][0][3] = m["p2p_read"][3][0] = "TNS"
    v = by_check(verdicts.judge(m))
    assert v["p2p_read"]["verdict"] == "warn" and "2 of 12" in v["p2p_read"]["reason"]
    assert v["pcie_link"]["verdict"] == "warn" and "x8 of x16" in v["pcie_link"]["reason"]
    assert v["gpu_architecture"]["verdict"] == "warn" and "SM120" in v["gpu_architecture"]["reason"]
    assert v["cuda_stack"]["verdict"] == "problem"


def test_verdicts_one_numa_node_and_acs_redirect():
    m = _machine(2, "OK", kind="bare metal", numa_nodes=1, gpu_numa=None)
    m["iommu"]["acs"]["bridges"] = {"0000:16:01.0": {"request_redirect": True}}
    v = by_check(verdicts.judge(m))
    assert v["gpu_numa_affinity"]["verdict"] == "ok" and "one NUMA node" in v["gpu_numa_affinity"]["reason"]
    assert v["iommu_acs"]["verdict"] == "warn" and "0000:16:01.0" in v["iommu_acs"]["reason"]


def test_verdict_rejects_unknown_verdict_word():
    with pytest.raises(ValueError, match="not one of"):
        verdicts.Verdict("x", "fine", "because")


def test_original_vm_from_recorded_facts():
    hw = recorded.hardware()
    r = recorded_machine.from_recorded(hw)
    n = int(hw["gpu_count"].value)
    code = hw["p2p_read_all_pairs"].value
    assert len(r["gpus"]) == n and len(r["p2p_read"]) == n
    assert all(r["p2p_read"][i][j] == ("X" if i == j else code) for i in range(n) for j in range(n))
    assert r["virtualization"]["kind"] == "vm" and r["source"] == "recorded"
    assert r["gpus"][0]["architecture"] == hw["gpu_architecture"].value
    v = by_check(r["verdicts"])
    assert v["p2p_read"]["verdict"] == "problem"
    assert v["gpu_numa_affinity"]["verdict"] == "warn"
    assert v["virtualization"]["verdict"] == "warn"
    assert v["probe"]["verdict"] == "n/a"
    json.dumps(r)


def test_verdicts_on_a_real_single_h200_probe():
    """Output of `python -m helpers.machine.probe` on the device machine (one H200 in a Firecracker VM, before
    the NUMA affinity fallback to NVML was added), hostname and UUID scrubbed."""
    r = json.loads((FIX / "h200_firecracker_probe.json").read_text())
    v = by_check(verdicts.judge(r))
    assert v["gpus"]["verdict"] == "warn" and "one GPU" in v["gpus"]["reason"]
    assert v["gpu_architecture"]["verdict"] == "ok" and v["pcie_link"]["verdict"] == "ok"
    assert v["p2p_read"]["verdict"] == "n/a" and v["cuda_stack"]["verdict"] == "ok"
    assert v["virtualization"]["verdict"] == "warn"
    stored = {c: x["verdict"] for c, x in by_check(r["verdicts"]).items()}
    assert {c: x["verdict"] for c, x in v.items()} == stored  # judge() still says what the device run said


def test_p2p_all_rejects_unknown_code():
    with pytest.raises(ValueError, match="legend"):
        parsers.p2p_all(2, "MAYBE")


def test_p2p_matrix_figure():
    from helpers.core import plotting

    fig, ax = plotting.figure()
    plotting.p2p_matrix(ax, parsers.p2p_all(3, "NS"), "recorded: original VM")
    assert len(ax.texts) == 9 and "recorded" in ax.get_xlabel()
    fig, ax = plotting.figure()
    plotting.p2p_matrix(ax, None, "no GPU pair on this machine")
    assert ax.texts[0].get_text() == "no GPU pair on this machine" and not ax.axison
    with pytest.raises(ValueError, match="matrix of codes"):
        plotting.p2p_matrix(ax, [["X", "??"], ["OK", "X"]])
    img = plotting.as_image(fig)
    assert img.data.startswith(b"\x89PNG") and img._repr_png_()  # a PNG, with an image/png display


# --------------------------------------------------------------------------- fingerprint and CLI

@pytest.mark.integration
def test_fingerprint_keys():
    fp = probe.fingerprint()
    assert set(fp) == set(probe.FINGERPRINT_KEYS)
    assert fp["logical_cpus"] >= 1 and fp["memory_gib"] > 0 and fp["gpu_count"] == len(fp["gpu_names"])
    json.dumps(fp)
    rec = probe.fingerprint(recorded_machine.from_recorded(recorded.hardware()))
    assert rec["gpu_count"] == int(recorded.hardware()["gpu_count"].value) and rec["virtualization"].startswith("vm")


@pytest.mark.integration
def test_cli_help_and_json():
    out = subprocess.run([sys.executable, "-m", "helpers.machine.probe", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "--fingerprint" in out.stdout
    out = subprocess.run([sys.executable, "-m", "helpers.machine.probe", "--no-torch"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert TOP_KEYS <= set(json.loads(out.stdout))
    out = subprocess.run([sys.executable, "-m", "helpers.machine.probe", "--fingerprint"], capture_output=True,
                         text=True, timeout=60)
    assert set(json.loads(out.stdout)) == set(probe.FINGERPRINT_KEYS)


def test_verdict_tally_and_picks():
    v = verdicts.judge(_machine(8, "NS", kind="vm", gpu_numa=None))
    c = verdicts.counts(v)
    assert list(c) == list(verdicts.VERDICTS) and sum(c.values()) == len(verdicts.CHECKS)
    assert verdicts.counts_text(v) == ", ".join(f"{k} {w}" for w, k in c.items())
    assert [x["check"] for x in verdicts.with_verdict(v, "problem")] == ["p2p_read"]
    with pytest.raises(ValueError, match="'bad'"):
        verdicts.with_verdict(v, "bad")


def test_the_guest_facts_a_clique_depends_on_are_read_or_say_why_not(tmp_path):
    """Issue 35: the probe reads the front host bridge's PCI id (the machine type), the hypervisor the guest
    sees, BAR1 per GPU and NCCL_P2P_LEVEL, or says why it could not; the environment chapter and the
    diagnosis's remedies cite them."""
    from helpers.chapters.environment import guest_facts
    from helpers.machine import probe as pr

    bridge = tmp_path / "sys/bus/pci/devices/0000:00:00.0"
    bridge.mkdir(parents=True)
    (bridge / "vendor").write_text("0x8086\n")
    (bridge / "device").write_text("0x29c0\n")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu hypervisor\n")
    g = pr.probe(tmp_path, import_torch=False, p2p=False)["guest"]
    assert g["host_bridge"] == "8086:29c0 (Intel Q35 (QEMU's q35 machine type, PCIe))"
    assert g["bar1"] == "no GPU here" and g["nccl_p2p_level"] == "not read (fixture tree)"
    assert "hypervisor" in g["hypervisor"] or g["hypervisor"] != "none visible to the guest"
    bare = tmp_path / "bare"
    (bare / "proc").mkdir(parents=True)
    (bare / "proc/cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu\n")
    g2 = pr.probe(bare, import_torch=False, p2p=False)["guest"]
    assert g2["host_bridge"].startswith("not readable here") and g2["hypervisor"] == "none visible to the guest"
    assert guest_facts(None).guest_host_bridge == "not probed (mode recorded)"
    assert guest_facts({"guest": g}).guest_host_bridge == g["host_bridge"]
    assert "predates" in guest_facts({}).guest_bar1
