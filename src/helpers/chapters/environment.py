"""Chapter 01 (notebooks/01_environment): what kind of machine is this? Its parameters, the values its
prose cites, its tables: the original machine's recorded facts, this machine's probe, the two side by
side and their verdicts. The probe, its parsers and the verdicts are helpers.machine's; this module
presents what they return.

Every pick of a recorded item raises a KeyError naming it (and the table it should be in) instead of
leaving a blank; phrases that depend on whether this machine was probed come from `here_phrases`, so
the chapter's sentences stay in its Markdown.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from helpers.core import params
from helpers.machine.parsers import ordered_pairs
from helpers.machine.probe import fingerprint
from helpers.machine.recorded_machine import from_recorded
from helpers.machine import virt
from helpers.machine.verdicts import CHECKS, NO_GPU_STATEMENT, counts_text, with_verdict, worst
from helpers.machine.virt import SYSTEMD_UNREAD

#: the notebook's parameters (the spec of record: the notebook validates against it, the runbook prechecks it)
#: the glued keys whose text differs in mode replay (they say the page presents a run's saved results
#: again); every other key a replay glues is the `auto` execution's, value for value (tests/test_replay.py)
REPLAY_KEYS = ("probe_where",)

PARAMS = {"mode": params.choice("recorded", "auto", "replay"), "run_dir": params.string()}

NOT_PROBED = "not probed (mode recorded)"
RECORDED_COL = "recorded: original VM"
MEASURED_COL = "measured: this machine"
#: the items of data/recorded/hardware.csv the chapter's prose cites: glue key -> item
PROSE_ITEMS = {"rec_gpu_model": "gpu_model", "rec_arch": "gpu_architecture", "rec_virt": "virtualization",
               "rec_hypervisor": "hypervisor", "rec_dmi": "dmi_product", "rec_p2p_code": "p2p_read_all_pairs",
               "rec_gpu_affinity": "gpu_numa_affinity"}


@dataclass(frozen=True)
class RecordedFacts:
    """What section 2 and the verdicts' paragraph cite about the original machine (recorded, and derived
    from the record: the pair count and the verdicts' tally)."""
    rec_gpu_count: int
    rec_gpu_model: str
    rec_arch: str
    rec_virt: str
    rec_hypervisor: str
    rec_dmi: str
    rec_p2p_code: str
    rec_gpu_affinity: str
    rec_pairs: int
    rec_numa_nodes: int
    rec_p2p_not_ok: int         # ordered pairs whose recorded P2P status is not OK (derived from the record)
    rec_n_problem: int
    rec_n_warn: int
    rec_flagged: str
    rec_unknown: str


@dataclass(frozen=True)
class HerePhrases:
    """What the prose says about this machine: what the probe saw, its verdicts and a summary (measured), or
    that it was not probed (mode recorded)."""
    here_probe: str
    here_verdicts: str
    here_summary: str
    here_p2p: str               # this machine's P2P matrix in a phrase (measured), or why there is none
    here_virt: str              # this machine's kind (measured: VM, container, bare metal), or not probed


def recorded_item(hw: dict, item: str):
    """The value of one recorded hardware item; KeyError naming it when data/recorded/hardware.csv lacks it."""
    if item not in hw:
        raise KeyError(f"data/recorded/hardware.csv has no item '{item}', which the environment chapter cites "
                       f"(items there: {', '.join(hw)})")
    return hw[item].value


def hardware_table(hw: dict) -> pd.DataFrame:
    """Every recorded item of the original machine with its unit and source."""
    return pd.DataFrame([{"item": k, "value": c.value, "unit": c.unit, "source": c.source, "kind": "recorded"}
                         for k, c in hw.items()])


def checks_table() -> pd.DataFrame:
    """What each check of `verdicts.judge` asks, and why it matters."""
    return pd.DataFrame([{"check": k, "asks": q, "matters because": w} for k, (q, w) in CHECKS.items()])


def recorded_facts(hw: dict) -> RecordedFacts:
    """The figures the chapter's prose cites about the original machine: its recorded items, the derived
    pair count and the verdicts' tally."""
    rec = from_recorded(hw)
    n = int(recorded_item(hw, "gpu_count"))
    flagged = with_verdict(rec["verdicts"], "problem", "warn")
    return RecordedFacts(rec_gpu_count=n, **{k: str(recorded_item(hw, item)) for k, item in PROSE_ITEMS.items()},
                         rec_pairs=len(ordered_pairs(rec["p2p_read"])),
                         rec_numa_nodes=int(recorded_item(hw, "numa_nodes")),
                         rec_p2p_not_ok=sum(c != "OK" for c in ordered_pairs(rec["p2p_read"])),
                         rec_n_problem=len(with_verdict(rec["verdicts"], "problem")),
                         rec_n_warn=len(with_verdict(rec["verdicts"], "warn")),
                         rec_flagged="; ".join(f"{v['check']} ({v['verdict']})" for v in flagged),
                         rec_unknown=", ".join(v["check"] for v in with_verdict(rec["verdicts"], "n/a")))


def here_phrases(res: dict | None) -> HerePhrases:
    """The phrases the chapter's prose takes about this machine: what the probe saw, its verdicts, and a
    summary; `res` None means not probed (mode recorded)."""
    if res is None:
        return HerePhrases(here_probe=NOT_PROBED, here_verdicts=f"{NOT_PROBED}, so it has no verdicts",
                           here_summary=NOT_PROBED, here_p2p=NOT_PROBED, here_virt=NOT_PROBED)
    # the kind of machine from every signal, as chapter 08 and page 1 state it (one computation: helpers.machine.virt)
    statement, kind = res["nvml"]["statement"], virt.judge(res["virtualization"]).kind
    names = sorted({g.get("name") or "unknown" for g in res["gpus"]})
    seen = f"{len(res['gpus'])} ({', '.join(names)})" if names else "0"
    return HerePhrases(
        here_probe=f"{statement}; kind of machine: {kind}; GPUs seen: {seen}; the probe took "
                   f"{1e3 * res['duration_s']:.0f} ms, and {len(res['errors'])} of its steps failed",
        here_verdicts=f"{counts_text(res['verdicts'])} (measured); the worst is {worst(res['verdicts'])}",
        here_summary=f"{statement}; {kind}; verdicts {counts_text(res['verdicts'])} (measured)",
        here_p2p=f"{p2p_summary(res.get('p2p_read'))} ({len(res['gpus'])} GPU{'s' if len(res['gpus']) != 1 else ''}, "
                 "measured)",
        here_virt=f"{kind} (measured)")


@dataclass(frozen=True)
class GuestFacts:
    """What a GPUDirect clique in a guest depends on, on this machine (measured by the probe), or why not:
    the diagnosis's remedy section cites them."""
    guest_hypervisor: str
    guest_host_bridge: str
    guest_bar1: str
    guest_nccl_p2p_level: str


def guest_facts(res: dict | None) -> GuestFacts:
    """The probe's `guest` entry as the prose cites it; `res` None (mode recorded) says not probed, and a run
    probed before the probe read them says so."""
    if res is None:
        return GuestFacts(NOT_PROBED, NOT_PROBED, NOT_PROBED, NOT_PROBED)
    g = res.get("guest") or {}
    old = "not read (this run's probe predates it)"
    return GuestFacts(g.get("hypervisor", old), g.get("host_bridge", old), g.get("bar1", old),
                      g.get("nccl_p2p_level", old))


def here(mode: str, run) -> dict | None:
    """This chapter's probe result: `auto` probes this machine and saves it in the run (`run`, a
    helpers.core.layout.Run); `replay` loads what the run's `auto` execution saved, probing nothing;
    `recorded` has none."""
    if mode == "auto":
        from helpers.machine.probe import probe

        res = probe()
        run.save("probe", res)
        return res
    if mode == "replay":
        return run.load("probe")
    return None


def probe_where(mode: str, res: dict | None) -> str:
    """Who the "this machine" of section 3 is: the machine probed now (auto, recorded), or, in a replay,
    the machine the run probed, named from its saved probe, with the figures presented again by this book."""
    if mode != "replay":
        return "This machine"
    gpus = res.get("gpus") or []
    names = sorted({g.get("name") or "unknown" for g in gpus})
    kit = f"{len(gpus)}x {', '.join(names)}" if gpus else "no GPU"
    when = str(res.get("measured_at") or "at a time not recorded")[:10]
    kind = virt.judge(res["virtualization"]).kind if res.get("virtualization") else "kind of machine not recorded"
    return (f"The machine this run probed ({kit}, {kind}, on {when}; "
            "its figures are presented again by this book from the run's saved probe, and nothing here was probed)")


def p2p_panel_label(res: dict | None) -> str:
    """Whose P2P matrix the right-hand panel shows, or why it shows none."""
    if res is None:
        return "measured: this machine (not probed, mode recorded)"
    if len(res["gpus"]) < 2:
        return f"measured: this machine ({'one GPU' if res['gpus'] else 'no GPU'}, so no GPU pair)"
    return "measured: this machine, NVML P2P read status"


#: the probe's virtualization evidence, in the order the chapter shows it
#: the probe's answers from systemd-detect-virt (plain, --vm, --container): an empty one was no answer, never "none",
#: which is the tool's own answer for bare metal (helpers.machine.virt reads them so)
SYSTEMD_KEYS = ("systemd_detect_virt", "vm", "container")
VIRT_EVIDENCE = ("systemd_detect_virt", "vm", "container", "cpuinfo_hypervisor_flag", "dmi_product_name",
                 "dmi_sys_vendor", "container_hints", "kernel_hints", "hypervisor", "kind")


def plain(v, none: str = "none") -> str:
    """A probe value as a reader reads it: a list joined with commas, a boolean as yes/no, None or an empty
    value as `none` (never a repr such as ['NVIDIA H200'] or a blank cell)."""
    if v is None or v == "" or v == []:
        return none
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (list, tuple)):
        return ", ".join(plain(x, none) for x in v)
    return str(v)


def _gpu_row(g: dict) -> dict:
    return {"GPU": g.get("index"), "name": plain(g.get("name"), "unknown"),
            "architecture": plain(g.get("architecture"), "unknown"), "memory_bytes": g.get("memory_total_bytes"),
            "PCIe link now (max)": f"Gen{g.get('pcie_gen_current')} x{g.get('pcie_width_current')} "
                                   f"(Gen{g.get('pcie_gen_max')} x{g.get('pcie_width_max')})",
            "power limit (W)": g.get("power_limit_w"), "NUMA node": plain(g.get("numa_node"), "unknown")}


def probe_tables(res: dict) -> dict[str, pd.DataFrame]:
    """This machine's probe as tables (measured): fingerprint, GPUs (where there are any), NUMA nodes,
    virtualization evidence, software and failed steps (where any failed). Every value is plain text or a
    number: lists joined, booleans as yes/no, absent values as "none" or "not installed"."""
    fp = {k: plain(v) for k, v in fingerprint(res).items()}
    out = {"fingerprint": pd.DataFrame({"item": list(fp), MEASURED_COL: list(fp.values())})}
    if res["gpus"]:
        out["gpus"] = pd.DataFrame([_gpu_row(g) for g in res["gpus"]])
    out["numa"] = pd.DataFrame([{"NUMA node": n.get("id"), "CPUs": plain(n.get("cpulist")),
                                 "CPU count": n.get("cpu_count"), "memory_bytes": n.get("memory_total_bytes"),
                                 "distances": plain(n.get("distances"))} for n in res["numa"]["nodes"]])
    out["virtualization"] = pd.DataFrame([{"evidence": k, "value": plain(res["virtualization"].get(k),
                                                                         SYSTEMD_UNREAD if k in SYSTEMD_KEYS else "none")}
                                          for k in VIRT_EVIDENCE])
    out["software"] = pd.DataFrame([{"package": k, MEASURED_COL: plain(v, "not installed")}
                                    for k, v in res["software"].items()])
    if res["errors"]:
        out["failed steps"] = pd.DataFrame({"failed probe step": [plain(e) for e in res["errors"]]})
    return out


def p2p_summary(m: list[list[str]] | None) -> str:
    """One line for a P2P matrix: "OK on 12 of 12 ordered pairs" or "NS on 56 of 56 ordered pairs"."""
    if not m or len(m) < 2:
        return "no GPU pair"
    pairs = ordered_pairs(m)
    counts = {c: pairs.count(c) for c in dict.fromkeys(sorted(pairs))}
    return ", ".join(f"{c} on {k} of {len(pairs)} ordered pairs" for c, k in counts.items())


def _gb(b: int | None) -> str | None:
    return None if not b else f"{b / 1e9:.1f} GB ({b / 2**30:.1f} GiB)"


def side_by_side(hw: dict, res: dict | None):
    """A DataFrame comparing the original machine (recorded, `recorded.hardware()`) with a probe
    result (`res`; None = not probed): item, the two columns, and a note on what each side is."""
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
        lambda r: f"{virt.judge(r['virtualization']).kind} (systemd-detect-virt --vm: "
                  f"{r['virtualization'].get('vm') or SYSTEMD_UNREAD})",
        "recorded: the seeds' word; measured: every signal (helpers.machine.virt; This machine lists each)")
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


def verdict_table(res: dict | None) -> pd.DataFrame | None:
    """One machine's verdicts: check, verdict, reason (the reason whole, never cut); None for a machine
    that was not probed."""
    if res is None:
        return None
    got = {v["check"]: v for v in res["verdicts"]}
    return pd.DataFrame([{"check": c, "verdict": got.get(c, {}).get("verdict", "n/a"),
                          "reason": got.get(c, {}).get("reason", "not judged")} for c in CHECKS])


def verdict_view(t: pd.DataFrame) -> pd.DataFrame:
    """A verdict table as a reader reads it on a phone too: two columns, the check with its verdict, and the
    whole reason beside it."""
    return pd.DataFrame({"check (verdict)": [f"{c} ({v})" for c, v in zip(t.check, t.verdict)],
                         "reason": t.reason.values})
