"""Chapter 06's sections that gather several of the chapter's pieces, one function each, returning a
helpers.chapters.parts.Part (its glued dataclasses, kept tables, shown tables and figure data): the page's
opening values (the answer, section 1 and the summary), the fidelity checks (section 4) and the host-path study
(section 5).
The notebook keeps the parameters, the calls, the figures, the glue and the display."""
from __future__ import annotations

from dataclasses import dataclass

from helpers.chapters.parts import Part
from helpers.chapters.vm_p2p import fidelity as fi
from helpers.chapters.vm_p2p import hostpath as hpc
from helpers.chapters.vm_p2p import link, replay
from helpers.chapters.vm_p2p.words import md
from helpers.core import recorded
from helpers.interconnect import fidelity as ifid, hostpath, nodes as multinode, studies
from helpers.machine import probe


@dataclass(frozen=True)
class OverviewTexts:
    """The sentences of the answer, section 1 and the summary that follow the run: the decode sizes, the P2P answer and its
    note, and where the collectives ran (plain and as Markdown)."""

    dec_sizes: object
    ans_p2p: object
    p2p_note: object
    nodes_text: str
    nodes_md: object


@dataclass(frozen=True)
class HostpathTexts:
    """What the host-path study found here, in the page's words (section 5 and the Summary)."""

    hp_text: object
    hp_summary: object


def overview_section(run, mode: str, gpus: int, decode, rec, rec_fit, nodes, per_node) -> Part:
    """The values the prose of the answer, section 1 and the summary cites (glued only; nothing to show): the recorded link,
    the fidelity answer, this machine's P2P matrix (measured and saved in auto, the saved one in replay) and
    where the collectives ran. `data["fidelity"]`: the committed fidelity tables section 4 reads."""
    live, replayed = mode != "recorded", mode == "replay"
    fid = studies.fidelity_tables()
    probed = run.need("01_environment", "probe")
    panel = link.p2p_panel(probed, live, gpus, replay.cuda_p2p(run, mode, gpus, probed), replayed=replayed)
    nodes_text = multinode.run_text(live, nodes, per_node)
    texts = OverviewTexts(md(link.decode_sizes_text(decode)),
                          md(link.p2p_answer(probe.from_recorded(recorded.hardware())["p2p_read"], panel)),
                          md(panel.note), nodes_text, md(nodes_text))
    return Part(values=(texts, link.recorded_link(rec, rec_fit, decode), fi.answer_values(fid)), data={"fidelity": fid})


def fidelity_section(fid) -> Part:
    """Section 4: our timing against nccl-tests and p2pBandwidthLatencyTest, and the small-message gap."""
    gap, idle = studies.gap("allreduce-gap-stream"), studies.gap("allreduce-gap-idle")
    shown = ((fi.verdict_table(fid), dict(fold_after=0, summary="Every size and quantity compared, with its ratio and verdict")),
             (fi.allreduce_ratio_table(fid), dict(digits=2, fold_after=0,
                                                  summary="All-reduce time per call against nccl-tests', by size and method")),
             (fi.copy_table(fid), dict(fold_after=0, summary="Copies against p2pBandwidthLatencyTest")),
             (fi.gap_shown(gap), dict(fold_after=0, summary="Where the small-message gap goes: the legacy-stream study")),
             (fi.gap_shown(idle), dict(fold_after=0, summary="The aligned start's idle wait: the idle-lead study")))
    return Part(values=(fi.fidelity_findings(fid, gap, idle),), shown=shown,
                figure={"fig_fidelity": {"table": fid[fid.setup == fi.largest_setup(fid)],
                                         "tolerance": ifid.TOLERANCES["all_reduce_time"]}})


def hostpath_section(run, p, mode: str, gpus: int, arms, decode_sizes, machine_label: str) -> Part:
    """Section 5: the host-path study, run here in auto on two GPUs or more where arms are chosen (its
    launches shown, its tables kept), loaded back in replay, none otherwise."""
    live = mode != "recorded"
    cfg = hostpath.StudyConfig(arms=arms or tuple(hostpath.ARMS), world_sizes=tuple(p["hostpath_world_sizes"]),
                               timeout_s=max(p["worker_timeout_s"], hostpath.PRESETS["full"].timeout_s))
    res, tabs, shown = None, {}, []
    if mode == "replay":
        res = replay.saved_hostpath(run)
    elif live and arms and gpus >= 2:
        res = hostpath.run_study(cfg, run.path("hostpath"), resume_from=p["hostpath_from"] or None)
        tabs = {"hostpath_sweep": res.sweep, "hostpath_runs": res.runs}
        shown.append((res.runs, dict(fold_after=0, summary="The host-path launches, with their status")))
    dec = hpc.hostpath_decode_table(res.sweep if res else None, decode_sizes)
    if dec is not None:
        shown.append((dec, dict(fold_after=0, summary="All-reduce time per arm, world size and decode size")))
    texts = HostpathTexts(md(hpc.hostpath_text(res, live, gpus, arms, decode_sizes, machine_label)),
                          md(hpc.hostpath_summary(res, live, gpus, arms, decode_sizes)))
    return Part(values=(hpc.hostpath_findings(cfg), texts), tables=tabs, shown=tuple(shown))
