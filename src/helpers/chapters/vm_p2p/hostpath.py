"""Chapter 06, section 5: the host-path study, as the chapter cites it.

`hostpath_text` is the section's paragraph: plainly why the study did not run, or, where it ran, a run of
clauses, each chosen as a whole variant by its own function from the study's launches (the runs table):
a clause whose launch succeeded but whose row is missing raises helpers.core.pick.PickError naming it, and
a launch that did not succeed is said, never left out without a word."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from helpers.chapters.vm_p2p.words import and_list
from helpers.core.pick import PickError, one
from helpers.core.plotting import bytes_label
from helpers.interconnect import growth, hostpath as hp, settings, topology

#: what the host-path section needs to run, for the sentences that say why it did not
HOSTPATH_NEEDS = ("a host with two GPUs or more (eight for the original VM's eight ranks; with four, the "
                  "eight-rank figure is extrapolated from two and four, derived) and the `vm-emulation` target")
#: the world size the section speaks of: the original VM's ranks
TARGET_RANKS = 8


@dataclass(frozen=True)
class HostpathExpectation:
    """What the host-path section's expectation cites (its glue keys)."""
    hp_link: str            # the link the recorded VM topology names
    hp_min: str             # the smallest size swept
    hp_max: str             # the largest size swept
    hp_tuning_max: str      # the largest size the tuning arms sweep


def hostpath_findings(cfg) -> HostpathExpectation:
    """What the host-path section's expectation cites, from the study's configuration
    (hostpath.StudyConfig) and the recorded link: the sizes swept and the link the VM topology names."""
    link = topology.recorded_vm_link()
    return HostpathExpectation(hp_link=f"PCIe Gen{link.generation} x{link.width}", hp_min=bytes_label(cfg.min_bytes),
                               hp_max=bytes_label(cfg.max_bytes),
                               hp_tuning_max=bytes_label(min(cfg.max_bytes, settings.TUNING_MAX_BYTES)))


def hostpath_summary(res: hp.StudyResult | None, live: bool, gpus: int, selected, decode_sizes) -> str:
    """The summary's line on the host-path study: its one-token figures where it ran, else that it did not."""
    if not (live and selected and gpus >= 2 and res is not None):
        return "not measured in this run (section 5 says what it needs)."
    s = res.sweep
    s = s[(s.op == "all_reduce") & (s.arm == hp.HOST_ARM)]
    if s.empty:
        return "the study ran, but its host arm gave no point (section 5, runs table)."
    n, one_tok = int(s.world_size.max()), int(min(decode_sizes))
    r = one(s, "host-path summary: the host arm's one-token point", world_size=n, size_bytes=one_tok)
    return (f"measured at {n} ranks on this machine, {r.time_us:.1f} us per all-reduce of {one_tok / 1024:g} KiB "
            "through host memory (section 5).")


def _launch_status(runs: pd.DataFrame, arm: str, n: int) -> str:
    r = runs[(runs.arm == arm) & (runs.world_size == n)] if runs is not None and len(runs) else runs
    return str(r.status.iloc[-1]) if r is not None and len(r) else "not planned"


def _hp_time(sweep: pd.DataFrame, runs: pd.DataFrame, arm: str, n: int, size: int) -> float | None:
    """An arm's all-reduce time at n ranks and `size` (measured), None where its launch did not succeed
    (the runs table says so); PickError where the launch succeeded and the row is missing."""
    if _launch_status(runs, arm, n) not in ("ok", "timeout", "not started"):
        return None
    got = sweep[(sweep.arm == arm) & (sweep.world_size == n) & (sweep.size_bytes == size) & (sweep.op == "all_reduce")]
    if got.empty:
        if _launch_status(runs, arm, n) == "ok":
            raise PickError(f"host-path study: arm {arm!r} ran at {n} ranks but has no all-reduce row at {size} B")
        return None
    return float(got.time_us.iloc[0])


@dataclass(frozen=True)
class _Study:
    """The host-path study as the paragraph reads it: the host arm's rows, the largest world size it ran
    at (n), the world sizes of two ranks or more it has rows at (ns), the one-token size and its time per arm."""
    sweep: pd.DataFrame
    runs: pd.DataFrame
    host: pd.DataFrame
    n: int
    ns: list
    one_tok: int
    decode_sizes: list
    cite: dict

    def time(self, arm: str, n: int, size: int) -> float | None:
        return _hp_time(self.sweep, self.runs, arm, n, int(size))


def hostpath_text(res: hp.StudyResult | None, live: bool, gpus: int, selected, decode_sizes, machine_label: str = "") -> str:
    """The host-path section's sentence: what the study measured (at the largest world size the host arm
    ran, the one-token all-reduce per main arm, the growth from the smallest world size, the eight-rank
    figure derived where eight were not measured, the fastest tuning arm at the decode sizes and the
    launches that failed), or plainly why it did not run. `res` is hostpath.run_study's result or None."""
    if not live:
        return f"Recorded mode measures nothing; the study needs {HOSTPATH_NEEDS}."
    if not selected:
        return (f"The host-path study was not selected in this run (`hostpath_arms = \"none\"`); it needs "
                f"{HOSTPATH_NEEDS}.")
    if gpus < 2 or res is None:
        return (f"The host-path study did not run: this machine has {gpus} GPU{'s' if gpus != 1 else ''}, and it "
                f"needs {HOSTPATH_NEEDS}.")
    sweep, runs = res.sweep, res.runs
    host = sweep[(sweep.arm == hp.HOST_ARM) & (sweep.op == "all_reduce")]
    if host.empty:
        failed = runs[runs.arm == hp.HOST_ARM]
        why = "; ".join(f"{r.world_size} ranks: {r.status}" for r in failed.itertuples()) or "it was not selected"
        return (f"The host-path study ran on this machine ({machine_label}), but its host arm gave no point ({why}); "
                "see the runs table.")
    n, one_tok = int(host.world_size.max()), int(min(decode_sizes))
    cite = {a: _hp_time(sweep, runs, a, n, one_tok) for a in hp.MAIN_ARMS}
    if cite[hp.HOST_ARM] is None:
        raise PickError(f"host-path study: the host arm has rows at {n} ranks but none at {one_tok} B (one token)")
    s = _Study(sweep, runs, host, n, sorted(int(x) for x in host.world_size.unique() if x >= 2), one_tok,
               list(decode_sizes), cite)
    return (_lead_clause(s, machine_label) + _growth_clause(s) + _eight_ranks_clause(s) + _tuning_clause(s)
            + _failed_clause(runs) + _not_started_clause(runs))


def _lead_clause(s: _Study, machine_label: str) -> str:
    """The one-token all-reduce per main arm at n ranks; the host path's ratio to this machine's own path
    where that launch gave a figure (where it did not, its status stands in the figure's place)."""
    def us(a):
        t = s.cite[a]
        return f"{t:.1f} us" if t is not None else f"no figure ({_launch_status(s.runs, a, s.n)})"

    ratio = f" ({s.cite[hp.HOST_ARM] / s.cite[hp.P2P_ARM]:.1f} times)" if s.cite[hp.P2P_ARM] else ""
    return (f"At {s.n} ranks (measured, {machine_label}; {hp.GPU_METHOD.label}), a one-token all-reduce "
            f"({s.one_tok / 1024:g} KiB) takes {us(hp.P2P_ARM)} on this machine's own path and {us(hp.HOST_ARM)} "
            f"through host memory{ratio}; with copy-engine memcpy {us('host+cuda_memcpy')}, and with NCCL also "
            f"told the original VM's topology {us(hp.VM_ARM)}.")


def _growth_clause(s: _Study) -> str:
    """The host path's growth from the smallest world size to n: none where it ran at one world size; the
    figures where the smallest one's launch gave its one-token point; else what that launch's status was."""
    if len(s.ns) < 2:
        return ""
    lo = s.time(hp.HOST_ARM, s.ns[0], s.one_tok)
    if lo is None:
        return (f" Through host memory at {s.ns[0]} ranks there is no one-token figure "
                f"({_launch_status(s.runs, hp.HOST_ARM, s.ns[0])}), so its growth with the number of ranks is not "
                "shown.")
    return f" Through host memory it grows from {lo:.1f} us at {s.ns[0]} ranks to {s.cite[hp.HOST_ARM]:.1f} us at {s.n}."


def _eight_ranks_clause(s: _Study) -> str:
    """Where eight ranks were not measured: the figure extrapolated from two world sizes (derived, with its
    assumption and the others' range), or that one world size is too few."""
    if s.n >= TARGET_RANKS:
        return ""
    if len(s.ns) < 2:
        return f" {TARGET_RANKS} ranks were not measured, and one world size is too few to extrapolate to them."
    r = growth.extrapolate(s.host[s.host.size_bytes == s.one_tok], TARGET_RANKS).iloc[0]
    return (f" At {TARGET_RANKS} ranks, not measured here, it would take {r.time_us:.1f} us (derived: "
            f"{r.assumption}; the other growth assumptions give {r.time_us_low:.1f} to {r.time_us_high:.1f} us).")


def _tuning_clause(s: _Study) -> str:
    """The fastest tuning arm at the decode sizes, beside the plain host path at n ranks: none where no tuning
    arm is in the sweep; where tuning arms are but none has a figure beside the host path's, their status."""
    tune = [a for a in hp.ARM_GROUPS["tuning"] if a in set(s.sweep.arm)]
    if not tune:
        return ""
    rows_ = []
    for size in s.decode_sizes:
        base = s.time(hp.HOST_ARM, s.n, size)
        ts = {a: t for a, t in ((a, s.time(a, s.n, size)) for a in tune) if t is not None}
        if base is not None and ts:
            best = min(ts, key=ts.get)
            rows_.append((best, base - ts[best]))
    if not rows_:
        status = and_list(f"`{a}`: {_launch_status(s.runs, a, s.n)}" for a in tune)
        return (f" No tuning arm has a figure beside the host path's at {s.n} ranks at the decode sizes ({status}), "
                "so none is compared with it.")
    wins = pd.Series([b for b, _ in rows_]).value_counts()
    saving = float(np.median([v for b, v in rows_ if b == wins.index[0]]))
    return (f" Of the tuning arms, `{wins.index[0]}` was fastest at {wins.iloc[0]} of {len(rows_)} decode "
            f"sizes, {saving:.1f} us {'below' if saving >= 0 else 'above'} the plain host path (median).")


def _failed_clause(runs: pd.DataFrame) -> str:
    bad = runs[runs.status.isin(["failed", "timeout"])]
    if not len(bad):
        return ""
    return (f" {len(bad)} launch{'es' if len(bad) != 1 else ''} failed or timed out ("
            + and_list(f"`{r.arm}` at {r.world_size} ranks" for r in bad.itertuples()) + "; see the runs table).")


def _not_started_clause(runs: pd.DataFrame) -> str:
    later = runs[runs.status == "not started"]
    if not len(later):
        return ""
    return (f" {len(later)} launch{'es' if len(later) != 1 else ''} did not start within the time budget; "
            "running the chapter again on the same run folder resumes them.")


def hostpath_decode_table(sweep: pd.DataFrame | None, decode_sizes, target: int = TARGET_RANKS) -> pd.DataFrame | None:
    """Per arm, the all-reduce time at each decode size: at every measured world size, and at `target`
    ranks derived (growth.at_world_size) where the study could not run that many but ran two world sizes."""
    if sweep is None or not len(sweep):
        return None
    s = sweep[(sweep.op == "all_reduce") & sweep.size_bytes.isin(list(decode_sizes))]
    t = s.assign(kind="measured")[["arm", "world_size", "kind", "size_bytes", "time_us"]]
    for arm, g in s.groupby("arm", sort=False):
        if target in set(g.world_size):
            continue
        try:
            d = growth.extrapolate(g, target)
        except growth.GrowthError:
            continue   # an arm measured at one world size only: shown as measured, nothing derived
        t = pd.concat([t, d.assign(kind=f"derived ({d.model.iloc[0]})")[t.columns]], ignore_index=True)
    order = {a: i for i, a in enumerate(hp.ARMS)}
    tab = t.pivot_table(index=["arm", "world_size", "kind"], columns="size_bytes", values="time_us")
    tab = tab.rename(columns=lambda c: f"{c / 1024:g} KiB (us)").round(1)
    return tab.sort_index(key=lambda idx: idx.map(order) if idx.name == "arm" else idx)
