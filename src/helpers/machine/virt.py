"""Is this machine a VM? One verdict from every signal the probe read, each shown with what it says.

`systemd-detect-virt --vm` alone says `none` inside a container that runs in a VM (and is absent from many
container images): the book's own published run, a container in a Firecracker VM, showed no answer from it
beside a CPUID hypervisor bit and a Firecracker kernel command line. So the verdict reads every signal
(`SIGNALS`): the CPUID hypervisor bit (/proc/cpuinfo's `hypervisor` flag), the DMI vendor and product,
`systemd-detect-virt` with and without `--vm`, container markers (/.dockerenv, /run/.containerenv, the
cgroup of PID 1) and kernel hints (a sandbox named on the kernel command line). Any signal that names a
hypervisor makes it a VM; the check passes only where no signal does and at least one VM signal was read
and said no.

`judge(probe["virtualization"])` is pure: the probe's dict (helpers.machine.probe, or a fixture in its
shape) in, a `VirtVerdict` out.
"""
from __future__ import annotations

from dataclasses import dataclass

from helpers.machine.parsers import dmi_hypervisor

VM, NO_VM, CONTAINER, NO_CONTAINER, NOT_READ = "VM", "no VM", "container", "no container", "not read"
NO_BOTH = "no VM, no container"

#: the names systemd-detect-virt prints for a container (systemd's src/basic/virt.c); any other name is a VM's
SYSTEMD_CONTAINERS = ("docker", "podman", "lxc", "lxc-libvirt", "systemd-nspawn", "openvz", "rkt", "wsl", "proot",
                      "pouch", "container-other")

#: the signals, in the order shown: key -> (what it is, the command that reads it on a Linux host)
SIGNALS = {
    "cpuid": ("CPUID hypervisor bit", "grep -m1 -ow hypervisor /proc/cpuinfo"),
    "dmi": ("DMI vendor and product", "cat /sys/class/dmi/id/sys_vendor /sys/class/dmi/id/product_name"),
    "detect_virt": ("systemd-detect-virt", "systemd-detect-virt"),
    "detect_virt_vm": ("systemd-detect-virt --vm", "systemd-detect-virt --vm"),
    "container_markers": ("container markers", "ls /.dockerenv /run/.containerenv; cat /proc/1/cgroup"),
    "kernel_hints": ("kernel hints", "cat /proc/cmdline"),
}
#: the signals that can say "no VM" on their own (container markers and kernel hints are silent on bare metal)
VM_SIGNALS = ("cpuid", "dmi", "detect_virt_vm")


@dataclass(frozen=True)
class Signal:
    """One signal: its key, what it is, the command a reader runs, what the probe read and what that says."""
    key: str
    what: str
    command: str
    read: str
    says: str


@dataclass(frozen=True)
class VirtVerdict:
    """The one verdict: `kind` ('VM', 'container in a VM', 'container on bare metal', 'bare metal' or
    'unknown'), the hypervisor named where a signal names one, the signals that found a VM, and check 1's
    outcome (`passes`: True bare metal, False a VM, None cannot tell)."""
    kind: str
    hypervisor: str | None
    vm_signals: tuple[str, ...]
    signals: tuple[Signal, ...]
    passes: bool | None

    @property
    def outcome(self) -> str:
        return {True: "passes", False: "fails", None: "cannot tell"}[self.passes]

    def line(self) -> str:
        """The verdict in one sentence, with its evidence."""
        if self.passes is None:
            return ("cannot tell: no signal that could show a VM was readable here (" +
                    ", ".join(s.what for s in self.signals if s.key in VM_SIGNALS) + " not read)")
        if not self.vm_signals:
            said = [s.what for s in self.signals if s.says in (NO_VM, NO_CONTAINER, NO_BOTH)]
            return f"{self.kind}: no signal names a hypervisor ({', '.join(said)} say so)"
        named = f" ({self.hypervisor})" if self.hypervisor else ""
        # every signal that found the verdict: the VM's and, in a container, the container's (site-read6 R10)
        boxed = [s.what for s in self.signals if s.says == CONTAINER]
        if boxed:
            return (f"{self.kind}{named}: found by {', '.join(self.vm_signals)} (VM) and {', '.join(boxed)} "
                    f"(container)")
        return f"{self.kind}{named}: found by {', '.join(self.vm_signals)}"


#: check 1's rule beside chapter 01's verdict on the same signals (site-read6 R5): two rules, both named where
#: either is stated
CHECK1_RULE = ("check 1 fails on any hypervisor between the GPUs; chapter 01's verdict grades the same VM warn, not "
               "problem, because a VM can still pass its GPUs' P2P through, which checks 2 and 3 decide")

#: what the page says where systemd-detect-virt gave no answer (absent, or it failed): never "none", which is the
#: tool's own answer for bare metal
SYSTEMD_UNREAD = "not installed or no answer"


def _systemd(out: str | None, container_ok: bool) -> str:
    if out is None:
        return NOT_READ
    if out == "none":
        return NO_VM if not container_ok else NO_BOTH
    return CONTAINER if out in SYSTEMD_CONTAINERS else VM


def signals(v: dict) -> tuple[Signal, ...]:
    """Every signal of the probe's `virtualization` dict, with what it says."""
    flag = v.get("cpuinfo_hypervisor_flag")
    dmi_text = " / ".join(x for x in (v.get("dmi_sys_vendor"), v.get("dmi_product_name")) if x)
    dmi_hv = dmi_hypervisor(v.get("dmi_product_name"), v.get("dmi_sys_vendor"), v.get("dmi_board_vendor"))
    markers, hints = list(v.get("container_hints") or []), list(v.get("kernel_hints") or [])
    read = {
        "cpuid": ("set" if flag else "not set" if flag is False else "not read",
                  VM if flag else NO_VM if flag is False else NOT_READ),
        "dmi": (dmi_text or "not readable here",
                VM if dmi_hv else NO_VM if dmi_text else NOT_READ),
        "detect_virt": (v.get("systemd_detect_virt") or SYSTEMD_UNREAD,
                        _systemd(v.get("systemd_detect_virt"), True)),
        "detect_virt_vm": (v.get("vm") or SYSTEMD_UNREAD, _systemd(v.get("vm"), False)),
        "container_markers": ("; ".join(markers) or "none found", CONTAINER if markers else NO_CONTAINER),
        "kernel_hints": ("; ".join(hints) or "none", VM if hints else "nothing"),
    }
    return tuple(Signal(k, w, c, read[k][0], read[k][1]) for k, (w, c) in SIGNALS.items())


def judge(v: dict | None) -> VirtVerdict:
    """The verdict from the probe's `virtualization` dict (None: nothing probed, 'unknown')."""
    sig = signals(v or {})
    found = tuple(s.what for s in sig if s.says == VM)
    container = any(s.says == CONTAINER for s in sig)
    read_no = any(s.says in (NO_VM, NO_BOTH) for s in sig if s.key in VM_SIGNALS)
    systemd = [(v or {}).get(k) for k in ("vm", "systemd_detect_virt")]
    names = [n for n in ((v or {}).get("hypervisor"), *(x for x in systemd if x and x != "none"
                                                         and x not in SYSTEMD_CONTAINERS),
                         dmi_hypervisor((v or {}).get("dmi_product_name"), (v or {}).get("dmi_sys_vendor")))
             if n]
    if found:
        kind, passes = ("container in a VM" if container else "VM"), False
    elif read_no:
        kind, passes = ("container on bare metal" if container else "bare metal"), True
    else:
        kind, passes = "unknown", None
    return VirtVerdict(kind, ", ".join(dict.fromkeys(names)) or None if found else None, found, sig, passes)


def signal_rows(verdict: VirtVerdict) -> list[dict]:
    """The signals as table rows (signal, command, read, says)."""
    return [{"signal": s.what, "command": s.command, "read": s.read, "says": s.says} for s in verdict.signals]
