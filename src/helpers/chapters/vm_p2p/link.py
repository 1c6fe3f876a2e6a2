"""Chapter 06, sections 1 and 2: the recorded link, the P2P matrix, the copy sweeps and the harness floor.

The values each section glues are a frozen dataclass whose fields are the glue keys (glue_all glues them);
the sentences that depend on the machine or the mode are whole variants chosen here."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from helpers.core.pick import PickError
from helpers.chapters.vm_p2p.words import and_list


# ------------------------------------------------------------------------------------------ 1. recorded link
@dataclass(frozen=True)
class RecordedLink:
    """The recorded VM's copy sweep and its alpha-beta fit, as section 1 cites them."""
    hidden: int                 # hidden size (elements per token)
    rec_small_us: float         # the smallest recorded copy's time (recorded)
    rec_small_kib: float        # its size
    rec_alpha_us: float         # the fit's alpha (derived)
    rec_beta_GBps: float        # the fit's beta (derived)
    rec_fit_err_pct: float      # the fit's largest relative error
    rec_crossover_kib: float    # where alpha and size/beta are equal (derived)
    rec_regime_words: str       # up to how many tokens decode's copy is latency-bound (regime_words; derived)


def recorded_link(recorded: pd.DataFrame, fit: pd.Series, decode: pd.DataFrame) -> RecordedLink:
    """The recorded VM's copy sweep and its alpha-beta fit, as the chapter's first section cites them."""
    if recorded.empty:
        raise PickError("recorded link: the recorded copy sweep has no GPU-to-GPU rows (data/recorded/copy_sweep.csv)")
    small = recorded.sort_values("size_bytes").iloc[0]
    cross = float(fit.alpha_us * fit.beta_GBps * 1e3)    # bytes where size/beta equals alpha
    return RecordedLink(hidden=int(decode.hidden_size.iloc[0]), rec_small_us=float(small.time_us),
                        rec_small_kib=float(small.size_bytes / 1024), rec_alpha_us=float(fit.alpha_us),
                        rec_beta_GBps=float(fit.beta_GBps), rec_fit_err_pct=float(100 * fit.max_rel_err),
                        rec_crossover_kib=cross / 1024, rec_regime_words=regime_words(decode, cross))


def regime_words(decode: pd.DataFrame, crossover_bytes: float) -> str:
    """Up to how many tokens a decode copy costs mostly its fixed latency (size/beta below alpha), and what the
    bandwidth term is against alpha at the largest decode size (`decode`: copies.decode_message_sizes)."""
    if decode.empty or crossover_bytes <= 0:
        raise PickError(f"latency regime: no decode sizes ({len(decode)}) or a crossover of {crossover_bytes} B")
    per_token = float(decode.size_bytes.iloc[0]) / float(decode.tokens.iloc[0])
    top = decode.sort_values("size_bytes").iloc[-1]
    x = float(top.size_bytes) / crossover_bytes
    if x <= 1:
        return f"so every decode message, up to {int(top.tokens)} tokens, is a latency problem, not a bandwidth one"
    return (f"so decoding is latency-bound up to about {crossover_bytes / per_token:.0f} tokens (derived); at "
            f"{int(top.tokens)} tokens the bandwidth term is {x:.1f} times α")


# ------------------------------------------------------------------------------------------ 2. P2P matrix
@dataclass(frozen=True)
class P2PPanel:
    codes: list | None      # this machine's N x N codes, or None (nothing to draw)
    label: str              # under the panel: whose matrix, or why there is none
    note: str               # the sentence the chapter glues (p2p_note)


def p2p_panel(probe: dict | None, live: bool, gpus: int, cuda_matrix: pd.DataFrame | None = None,
              replayed: bool = False) -> P2PPanel:
    """Where this machine's P2P matrix comes from: the environment probe of this run (`probe`, or None
    where it did not run), else CUDA's peer-access answer (`cuda_matrix`, copies.p2p_matrix) on a GPU
    machine, else none (no GPU, or recorded mode)."""
    if probe and probe.get("p2p_read"):
        return P2PPanel(probe["p2p_read"], "measured: this machine, environment probe",
                        "The P2P matrix of this machine comes from the environment probe of this run.")
    if live and gpus:
        if cuda_matrix is None and replayed:
            return P2PPanel(None, "the run's machine: P2P matrix not recorded",
                            "This run saved neither a probe P2P matrix nor CUDA's peer-access answer, so the P2P "
                            "matrix of its machine is not shown (not recorded).")
        if cuda_matrix is None:
            raise PickError("P2P panel: a GPU machine without a probe matrix needs CUDA's peer-access answer "
                            "(pass cuda_matrix=helpers.interconnect.copies.p2p_matrix())")
        codes = [["X" if v == "self" else ("OK" if v == "yes" else "NS") for v in r] for r in cuda_matrix.values]
        why = ("The environment probe of this run has no P2P matrix (it needs two GPUs or more)" if probe
               else "The environment probe did not run in this run")
        return P2PPanel(codes, "measured: this machine, CUDA peer access",
                        why + ", so this machine's matrix is CUDA's peer-access answer "
                              "(torch.cuda.can_device_access_peer), shown as OK or NS.")
    why = "this machine has no GPU, so it has no P2P matrix." if live else "in recorded mode this machine is not examined."
    lead = "" if probe else "The environment probe did not run in this run; "
    return P2PPanel(None, "this machine: " + ("no GPU" if live else "recorded mode, nothing measured"),
                    lead + (why if lead else why[0].upper() + why[1:]))


# ------------------------------------------------------------------------------------------ 3. copy sweeps
def where_measured(live: bool, machine_label: str = "", sweep: str = "", replayed: bool = False) -> str:
    """Where the page's figures were measured; `replayed`: measured on the run's machine, presented again."""
    if live and replayed:
        return (f"measured by this run on its machine ({machine_label}, `{sweep}` sweep) and presented again from "
                "its saved results (nothing measured where this page was made)")
    return (f"measured on this machine ({machine_label}) with the `{sweep}` sweep" if live
            else "recorded mode: nothing measured on this machine")


@dataclass(frozen=True)
class LargestCopy:
    """The bandwidth at the largest size measured, as section 2 cites it (recorded mode: NaN)."""
    big_bw: float       # GB/s, the best harness of the cited path
    big_path: str       # the path cited: same device where there is one, else the first
    big_mib: float      # the largest size measured


def largest_copy(cs: pd.DataFrame | None) -> tuple[LargestCopy, pd.DataFrame | None]:
    """The bandwidth per path and harness at the largest size measured (GB/s) and the figure the text
    cites: the best harness of the same-device path (else the first path). Recorded mode: NaN."""
    if cs is None or not len(cs):
        return LargestCopy(float("nan"), "none (recorded mode)", float("nan")), None
    top = cs.size_bytes.max()
    big = cs[cs.size_bytes == top].pivot_table(index="path", columns="harness", values="bandwidth_GBps")
    path = "same_device" if "same_device" in big.index else big.index[0]
    table = big.rename(columns=lambda c: f"{c} (GB/s)").round(1)
    return LargestCopy(float(big.loc[path].max()), path.replace("_", " "), float(top / 2**20)), table


# ------------------------------------------------------------------------------------------ 4. harness floor
def decode_copy_table(cs: pd.DataFrame | None, decode_sizes) -> pd.DataFrame | None:
    """Median time per copy at the decode sizes, per path and harness (measured), or None."""
    if cs is None or not len(cs):
        return None
    tab = cs[cs.size_bytes.isin(list(decode_sizes))].pivot_table(index=["path", "harness"], columns="size_bytes",
                                                                  values="time_us")
    return tab.rename(columns=lambda c: f"{c / 1024:g} KiB (us)").round(2)


def _copy_time(cs, path, harness, size) -> float:
    g = cs[(cs.path == path) & (cs.harness == harness) & (cs.size_bytes == size)]
    return float(g.time_us.iloc[0]) if len(g) else float("nan")


@dataclass(frozen=True)
class HarnessFloor:
    """How much of the recorded one-token copy a Python-issued copy on this machine explains (section 2)."""
    floor_eager_us: float       # the one-token copy issued from Python (measured; NaN in recorded mode)
    floor_graph_us: float       # the same inside a CUDA graph
    floor_share_pct: float      # the eager copy's share of the recorded one-token time (derived): an upper estimate
    harness_text: str           # the variant for a GPU run, a CPU run or recorded mode
    cheapest_eager_us: float = float("nan")   # the cheapest eager one-token copy of any path here (measured)
    cheapest_path: str = ""                   # its path


def harness_floor(cs: pd.DataFrame | None, recorded_small: pd.Series, machine_label: str = "") -> HarnessFloor:
    """How much of the recorded one-token copy a Python-issued copy on this machine explains: the same
    copy within one GPU (or in CPU memory without a GPU) eager and in a CUDA graph, its share of the
    recorded time, and `harness_text`, the variant for a GPU run, a CPU run or recorded mode."""
    if cs is None or not len(cs):
        return HarnessFloor(float("nan"), float("nan"), float("nan"),
                            "Recorded mode measures nothing, so the harness floor is unknown here; run the "
                            "chapter with `mode = \"auto\"` on a GPU machine to measure it.")
    gpu = (cs.path == "same_device").any()
    path, one_token, rec = ("same_device" if gpu else "cpu_memcpy"), int(recorded_small.size_bytes), float(recorded_small.time_us)
    eager, graph = _copy_time(cs, path, "eager", one_token), _copy_time(cs, path, "graph", one_token)
    if np.isnan(eager):
        raise PickError(f"harness floor: no {path} eager copy of {one_token} B (one token) in the copy sweep")
    share = eager / rec
    low = cs[(cs.harness == "eager") & (cs.size_bytes == one_token)].dropna(subset=["time_us"])
    cheapest = low.loc[low.time_us.idxmin()]
    text = _gpu_floor_text(cs, one_token, eager, graph, share, rec, machine_label) if gpu else (
        f"This machine has no GPU, so there is no CUDA launch to measure: a Python-issued CPU copy of one token "
        f"costs {eager:.2f} us here (measured, cpu memcpy), {100 * share:.0f} % of the recorded {rec:.1f} us. "
        "That bounds only the Python and dispatch part of the harness; the launch and completion costs of a "
        "GPU copy need a GPU run (use `sweep = \"full\"` there).")
    return HarnessFloor(eager, graph, 100 * share, text, float(cheapest.time_us), str(cheapest.path))


def _gpu_floor_text(cs, one_token: int, eager: float, graph: float, share: float, rec: float, machine_label: str) -> str:
    """The GPU run's harness sentence: within one GPU, through host memory, and GPU to GPU where measured."""
    hb_h = "graph" if np.isfinite(_copy_time(cs, "host_bounce", "graph", one_token)) else "queued"
    hb_e, hb_x = _copy_time(cs, "host_bounce", "eager", one_token), _copy_time(cs, "host_bounce", hb_h, one_token)
    text = (f"On this machine ({machine_label}; measured) a one-token copy within one GPU costs {eager:.1f} us issued "
            f"from Python and {graph:.2f} us inside a CUDA graph, so issuing that copy costs about {eager - graph:.1f} us "
            f"(its issue cost: eager minus graph time). "
            + _issue_cost_words(cs, one_token, eager, share, rec) + ". "
            f"Through host memory the same copy takes {hb_e:.1f} us eager{_outlier(cs, 'host_bounce', 'eager', one_token)} "
            f"and {hb_x:.1f} us {'in a graph' if hb_h == 'graph' else 'queued'}"
            f"{_outlier(cs, 'host_bounce', hb_h, one_token)} here.")
    return text + _peer_clause(cs, one_token)


#: the copy paths in words, for the sentence that names a cheaper eager copy than the one within one GPU
PATH_WORDS = {"d2h": "GPU to host", "h2d": "host to GPU", "host_bounce": "through host memory", "peer": "GPU to GPU",
              "same_device": "within one GPU"}


def _issue_cost_words(cs, one_token: int, eager: float, share: float, rec: float) -> str:
    """The same-device copy's issue cost is not a floor for every path: the one-token copies of other paths issued
    the same way that take less, and the harness's share of the recorded time as a range from the cheapest of them
    (lower) to the same-device copy (upper), or that same-device share alone where no path is cheaper."""
    e = cs[(cs.harness == "eager") & (cs.size_bytes == one_token) & (cs.path != "same_device")].dropna(subset=["time_us"])
    cheaper = e[e.time_us < eager].sort_values("time_us")
    if not len(cheaper):
        return (f"No other path's one-token copy issued the same way is cheaper here; its whole eager time is "
                f"{100 * share:.0f} % of the recorded {rec:.1f} us ({DERIVED_SHARE})")
    named = and_list(f"{r.time_us:.2f} us {PATH_WORDS.get(r.path, r.path)}" for r in cheaper.itertuples())
    low, low_path = float(cheaper.time_us.iloc[0]), str(cheaper.path.iloc[0])
    low_graph = _copy_time(cs, low_path, "graph", one_token)
    issue = (f"; by the issue cost (eager minus graph) it is {100 * (low - low_graph) / rec:.0f} % for the "
             f"{PATH_WORDS.get(low_path, low_path)} copy and {100 * (eager - _copy_time(cs, 'same_device', 'graph', one_token)) / rec:.0f} % "
             f"for the copy within one GPU" if np.isfinite(low_graph) else "")
    return (f"Neither is a floor for every path: one-token copies issued the same "
            f"way take {named} here. Taking whole eager copy times as bounds (the definition the takeaway's rule uses), "
            f"the Python harness's share of the recorded {rec:.1f} us is between "
            f"{100 * low / rec:.0f} %, the cheapest copy's, and {100 * share:.0f} %, the copy within one GPU's, an "
            f"upper estimate{issue} ({DERIVED_SHARE})")


#: how the harness's share of the recorded copy is known
DERIVED_SHARE = ("derived: a different GPU, host and driver, so an estimate of the share, not a decomposition of the "
                 "original measurement")


#: a copy slower than this multiple of a larger copy on the same path and harness is flagged as an outlier
OUTLIER_X = 1.25


def _outlier(cs, path: str, harness: str, size: int) -> str:
    """' (an outlier: N x the X us of a larger copy, at S KiB)' where the copy at `size` is slower than OUTLIER_X
    times the fastest larger copy of the same path and harness, else ''."""
    t = _copy_time(cs, path, harness, size)
    big = cs[(cs.path == path) & (cs.harness == harness) & (cs.size_bytes > size)].dropna(subset=["time_us"])
    if not np.isfinite(t) or not len(big):
        return ""
    fast = big.loc[big.time_us.idxmin()]
    if t <= OUTLIER_X * float(fast.time_us):
        return ""
    # the ratio and the time it divides by at two decimals each, so a reader dividing the shown figures gets the
    # shown ratio (at one decimal 13.29 / 8.05 printed as "1.7 times the 8.1 us", which reads as 1.6)
    return (f" (an outlier: {t / float(fast.time_us):.2f} times the {float(fast.time_us):.2f} us of a larger copy, "
            f"at {float(fast.size_bytes) / 1024:g} KiB)")


def _peer_clause(cs, one_token: int) -> str:
    """GPU 0 to GPU 1, eager and queued: none where the sweep has no peer copy (one GPU); PickError where it
    has peer copies but not the one-token eager or queued one the clause cites (copy_skipped says why)."""
    if not (cs.path == "peer").any():
        return ""
    pe, pq = _copy_time(cs, "peer", "eager", one_token), _copy_time(cs, "peer", "queued", one_token)
    if not (np.isfinite(pe) and np.isfinite(pq)):
        raise PickError(f"harness floor: the copy sweep has peer copies but no one-token ({one_token} B) peer copy "
                        f"{'eager' if np.isnan(pe) else 'queued'}; its skipped table (copy_skipped) says why")
    return (f" Directly from GPU 0 to GPU 1 it takes {pe:.1f} us issued from Python through torch, which "
            f"fences the two GPUs' streams around every such copy, and {pq:.2f} us queued with "
            "cudaMemcpyPeerAsync as p2pBandwidthLatencyTest issues it: on this link the fences and the "
            "launch cost far more than the copy.")


def _pairs(codes) -> tuple[int, int]:
    """(ordered GPU pairs, those marked OK) of an N x N matrix of `nvidia-smi topo -p2p r` codes."""
    cells = [c for i, r in enumerate(codes or []) for j, c in enumerate(r) if i != j]
    return len(cells), sum(c == "OK" for c in cells)


def p2p_answer(recorded_codes, panel: P2PPanel) -> str:
    """The answer box's P2P sentence: the original VM's pairs (recorded) and this machine's (the panel's
    source), counted; where this machine has no matrix, why."""
    n_rec, ok_rec = _pairs(recorded_codes)
    if not n_rec:
        raise PickError("P2P answer: the recorded P2P matrix has no GPU pair (data/recorded hardware, p2p_read)")
    rec = (f"P2P: the original VM allowed it on {ok_rec} of its {n_rec} ordered GPU pairs "
           f"(its `nvidia-smi topo -p2p r` matrix recorded, the pairs counted from it: derived)")
    if panel.codes is None:
        return rec + f"; {panel.label.removeprefix('this machine: ')} here."
    n, ok = _pairs(panel.codes)
    if not n:
        return rec + "; this machine has one GPU, so no pair to test."
    return rec + f"; this machine allows it on {ok} of {n} ({panel.label.removeprefix('measured: this machine, ')})."


def largest_copy_text(big: LargestCopy) -> str:
    """Section 2's sentence on the largest copy: its bandwidth where the run measured copies, else why
    there is none (no NaN on the page)."""
    if not np.isfinite(big.big_bw):
        return "This run measured no copy, so the figure above shows the original VM's copies only."
    return (f"The largest copy measured here, {big.big_mib:g} MiB, reached {big.big_bw:.1f} GB/s on the "
            f"{big.big_path} path (measured).")


def harness_rule(h: HarnessFloor) -> str:
    """Section 2's takeaway: the harness floor as a rule, with this run's numbers where it measured them."""
    rule = ("a Python-timed copy carries its own issue cost; only the time above the same-size copy within one "
            "GPU, timed the same way, belongs to the link")
    if not np.isfinite(h.floor_eager_us):
        return rule[0].upper() + rule[1:] + " (this run measured no copy: a GPU run gives the floor)."
    graph = f", {h.floor_graph_us:.2f} us in a CUDA graph" if np.isfinite(h.floor_graph_us) else ""
    cheaper = (f"; a copy {PATH_WORDS.get(h.cheapest_path, h.cheapest_path)} issued the same way takes "
               f"{h.cheapest_eager_us:.2f} us, so that whole eager time is an upper estimate of the harness's part, not "
               f"a floor for every path" if np.isfinite(h.cheapest_eager_us) and h.cheapest_eager_us < h.floor_eager_us
               else "")
    return (rule[0].upper() + rule[1:] + f" ({h.floor_eager_us:.1f} us here for one token issued from Python"
            f"{graph}{cheaper}).")


DIAGNOSIS_FITS_RECORDED = ("in recorded mode the diagnosis reads no run's fits: it prices the recorded and reference "
                           "links only.")
DIAGNOSIS_FITS_NONE = ("this run's fits cross no link between two GPUs (a copy within one GPU or through host memory "
                       "and back to it, a collective on one rank, or CPU processes), so the diagnosis prices none of "
                       "them as GLM-5's link; on two GPUs or more it puts the measured link in the VM's place and "
                       "multiplies it by the model's all-reduces per step (its section 5).")
DIAGNOSIS_FITS_LINK = ("it puts this run's {name} in the VM's place and multiplies it by the model's all-reduces per "
                       "step (its section 5): a prediction for a link like this one, not a check of the original VM.")


def diagnosis_fits_text(fits: pd.DataFrame | None, mode: str) -> str:
    """What the diagnosis takes from this chapter's fits, said of this run: the link between two GPUs it prices
    (helpers.model.budget.select_run_link, the diagnosis's own choice), or that it prices none, or recorded mode."""
    from helpers.model import budget as bd

    if mode == "recorded" or fits is None:
        return DIAGNOSIS_FITS_RECORDED
    link = bd.select_run_link(fits)
    return DIAGNOSIS_FITS_NONE if link is None else DIAGNOSIS_FITS_LINK.format(name=link.name)


def decode_sizes_text(decode: pd.DataFrame) -> str:
    """Section 1's message sizes in words: '12 KiB for 1 token, 48 KiB for 4, ...' (derived)."""
    if decode.empty:
        raise PickError("decode sizes: the table of decode message sizes is empty")
    parts = [f"{r.size_bytes / 1024:g} KiB for {r.tokens} token{'s' if r.tokens != 1 else ''}"
             for r in decode.itertuples()]
    return ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else parts[0]
