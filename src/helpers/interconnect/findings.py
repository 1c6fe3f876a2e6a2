"""What the VM/P2P chapter says, computed: the rows it cites, its verdicts and the numbers its prose glues.

Every function here picks its rows by their columns (a method's fields, a tool setting, a quantity) and
raises `FindingError` naming what it looked for and what the table has, instead of returning nothing:
a renamed label or a missing row fails the chapter, it does not drop a sentence. Functions return dicts
of glue keys -> values (the chapter glues them as they are) and, where the chapter shows a table, the
DataFrame. Sentences whose wording depends on the machine or the mode (a GPU run, a CPU run, recorded
mode) are chosen here as whole variants (`*_text`), each tested; the rest of the prose is in the chapter.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from helpers.interconnect import fidelity, growth, settings
from helpers.interconnect.method import FIELDS, START_LEAD_US, Method, methods_of
from helpers.core.pick import PickError, describe, one, rows  # noqa: F401 - rows and one are this module's pickers too


FindingError = PickError   # one row-pick error type for the whole book (helpers.core.pick)


# ------------------------------------------------------------------------------------------ picking rows
_describe = describe


def by_method(table: pd.DataFrame, what: str, where: dict | None = None, **fields) -> pd.DataFrame:
    """The rows (with `where`) timed by the one method whose fields include `fields`: the method's label
    must agree with its fields (Method.from_row), and the fields must name one method, not several."""
    bad = [f for f in fields if f not in FIELDS]
    if bad:
        raise FindingError(f"{what}: {bad} are not method fields; choose from {FIELDS}")
    cand = rows(table, what, **(where or {})) if where else table
    cand = cand[cand.method.notna()]
    found = [m for m in methods_of(cand) if all(getattr(m, k) == v for k, v in fields.items())]
    if not found:
        raise FindingError(f"{what}: no row timed by a method with {_describe(fields)}"
                           + (f" where {_describe(where)}" if where else "")
                           + f"; the methods there: {[m.label for m in methods_of(cand)]}")
    if len(found) > 1:
        raise FindingError(f"{what}: {_describe(fields)} names {len(found)} methods {[m.label for m in found]}; "
                           "name more fields")
    return cand[cand.method == found[0].label]


def and_list(xs) -> str:
    xs = [str(x) for x in xs]
    return ", ".join(xs[:-1]) + f" and {xs[-1]}" if len(xs) > 1 else "".join(xs)


# ------------------------------------------------------------------------------------------ 1. recorded link
def recorded_link(recorded: pd.DataFrame, fit: pd.Series, decode: pd.DataFrame) -> dict:
    """The recorded VM's copy sweep and its alpha-beta fit, as the chapter's first section cites them."""
    if recorded.empty:
        raise FindingError("recorded link: the recorded copy sweep has no GPU-to-GPU rows (data/recorded/copy_sweep.csv)")
    small = recorded.sort_values("size_bytes").iloc[0]
    return {"hidden": int(decode.hidden_size.iloc[0]), "rec_small_us": float(small.time_us),
            "rec_small_kib": float(small.size_bytes / 1024), "rec_alpha_us": float(fit.alpha_us),
            "rec_beta_GBps": float(fit.beta_GBps), "rec_fit_err_pct": float(100 * fit.max_rel_err),
            "rec_crossover_kib": float(fit.alpha_us * fit.beta_GBps * 1e3 / 1024)}


# ------------------------------------------------------------------------------------------ 2. P2P matrix
@dataclass(frozen=True)
class P2PPanel:
    codes: list | None      # this machine's N x N codes, or None (nothing to draw)
    label: str              # under the panel: whose matrix, or why there is none
    note: str               # the sentence the chapter glues (p2p_note)


def p2p_panel(probe: dict | None, live: bool, gpus: int, cuda_matrix: pd.DataFrame | None = None) -> P2PPanel:
    """Where this machine's P2P matrix comes from: the environment probe of this run (`probe`, or None
    where it did not run), else CUDA's peer-access answer (`cuda_matrix`, copies.p2p_matrix) on a GPU
    machine, else none (no GPU, or recorded mode)."""
    if probe and probe.get("p2p_read"):
        return P2PPanel(probe["p2p_read"], "measured: this machine, environment probe",
                        "The P2P matrix of this machine comes from the environment probe of this run.")
    if live and gpus:
        if cuda_matrix is None:
            raise FindingError("P2P panel: a GPU machine without a probe matrix needs CUDA's peer-access answer "
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
def where_measured(live: bool, machine_label: str = "", sweep: str = "") -> str:
    return (f"measured on this machine ({machine_label}) with the `{sweep}` sweep" if live
            else "recorded mode: nothing measured on this machine")


def largest_copy(cs: pd.DataFrame | None) -> tuple[dict, pd.DataFrame | None]:
    """The bandwidth per path and harness at the largest size measured (GB/s) and the figure the text
    cites: the best harness of the same-device path (else the first path). Recorded mode: NaN."""
    if cs is None or not len(cs):
        return {"big_bw": float("nan"), "big_path": "none (recorded mode)", "big_mib": float("nan")}, None
    top = cs.size_bytes.max()
    big = cs[cs.size_bytes == top].pivot_table(index="path", columns="harness", values="bandwidth_GBps")
    path = "same_device" if "same_device" in big.index else big.index[0]
    table = big.rename(columns=lambda c: f"{c} (GB/s)").round(1)
    return {"big_bw": float(big.loc[path].max()), "big_path": path.replace("_", " "), "big_mib": float(top / 2**20)}, table


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


def harness_floor(cs: pd.DataFrame | None, recorded_small: pd.Series, machine_label: str = "") -> dict:
    """How much of the recorded one-token copy a Python-issued copy on this machine explains: the same
    copy within one GPU (or in CPU memory without a GPU) eager and in a CUDA graph, its share of the
    recorded time, and `harness_text`, the variant for a GPU run, a CPU run or recorded mode."""
    if cs is None or not len(cs):
        return {"floor_eager_us": float("nan"), "floor_graph_us": float("nan"), "floor_share_pct": float("nan"),
                "harness_text": "Recorded mode measures nothing, so the harness floor is unknown here; run the "
                                "chapter with `mode = \"auto\"` on a GPU machine to measure it."}
    gpu = (cs.path == "same_device").any()
    path, one_token, rec = ("same_device" if gpu else "cpu_memcpy"), int(recorded_small.size_bytes), float(recorded_small.time_us)
    eager, graph = _copy_time(cs, path, "eager", one_token), _copy_time(cs, path, "graph", one_token)
    if np.isnan(eager):
        raise FindingError(f"harness floor: no {path} eager copy of {one_token} B (one token) in the copy sweep")
    share = eager / rec
    out = {"floor_eager_us": eager, "floor_graph_us": graph, "floor_share_pct": 100 * share}
    if not gpu:
        out["harness_text"] = (
            f"This machine has no GPU, so there is no CUDA launch to measure: a Python-issued CPU copy of one token "
            f"costs {eager:.2f} us here (measured, cpu memcpy), {100 * share:.0f} % of the recorded {rec:.1f} us. "
            "That bounds only the Python and dispatch part of the harness; the launch and completion costs of a "
            "GPU copy need a GPU run (use `sweep = \"full\"` there).")
        return out
    hb_h = "graph" if np.isfinite(_copy_time(cs, "host_bounce", "graph", one_token)) else "queued"
    hb_e, hb_x = _copy_time(cs, "host_bounce", "eager", one_token), _copy_time(cs, "host_bounce", hb_h, one_token)
    text = (f"On this machine ({machine_label}; measured) a one-token copy within one GPU costs {eager:.1f} us issued "
            f"from Python and {graph:.2f} us inside a CUDA graph, so issuing it costs about {eager - graph:.1f} us. "
            f"That harness floor alone is {100 * share:.0f} % of the recorded {rec:.1f} us (derived: a different GPU, "
            "host and driver, so an estimate of the share, not a decomposition of the original measurement). "
            f"Through host memory the same copy takes {hb_e:.1f} us eager and {hb_x:.1f} us "
            f"{'in a graph' if hb_h == 'graph' else 'queued'} here.")
    pe, pq = _copy_time(cs, "peer", "eager", one_token), _copy_time(cs, "peer", "queued", one_token)
    if np.isfinite(pe) and np.isfinite(pq):
        text += (f" Directly from GPU 0 to GPU 1 it takes {pe:.1f} us issued from Python through torch, which "
                 f"fences the two GPUs' streams around every such copy, and {pq:.2f} us queued with "
                 "cudaMemcpyPeerAsync as p2pBandwidthLatencyTest issues it: on this link the fences and the "
                 "launch cost far more than the copy.")
    out["harness_text"] = text
    return out


# ------------------------------------------------------------------------------------------ 5. collectives
def collective_text(live: bool, coll: pd.DataFrame | None, machine_label: str = "") -> str:
    if not live:
        return "Recorded mode: the original investigation never ran a collective benchmark, so there is nothing to show."
    if coll is None or not len(coll):
        return "No collective point was measured on this machine; see the runs above."
    return f"{len(coll)} collective points measured on this machine ({machine_label})."


def plan_text(live: bool, statements) -> str:
    """What the suite could not run here and why (helpers.interconnect.suite.plan_collectives)."""
    if not live:
        return "Recorded mode launches nothing."
    return " ".join(statements) if statements else "Every collective sweep this machine allows was launched."


def decode_collectives(coll: pd.DataFrame | None, decode_sizes) -> pd.DataFrame | None:
    if coll is None or not len(coll):
        return None
    d = coll[coll.size_bytes.isin(list(decode_sizes)) & (coll.variant == "default")]
    return d[["op", "backend", "world_size", "method", "size_bytes", "time_us", "time_us_p10", "time_us_p90",
              "algbw_GBps", "busbw_GBps"]].round(3)


# ------------------------------------------------------------------------------------------ 6. NCCL variants
@dataclass
class Variants:
    rows: pd.DataFrame | None     # the all-reduce rows the comparison uses (the figure's)
    best: pd.DataFrame | None     # per decode size, the fastest variant (suite.best_variant)
    text: str                     # variant_text


def variants(coll: pd.DataFrame | None, decode_sizes, live: bool, gpus: int = 0, machine_label: str = "") -> Variants:
    """The NCCL variant comparison at the decode sizes and its sentence (variant_text): which variant
    won where, by how much, whether the win is clear of the launch-to-launch spread, how the variants
    were timed, and the notes of variants the investigation did not list."""
    from helpers.interconnect import suite

    var = suite.variant_rows(coll) if coll is not None and len(coll) else None
    var = var[var.world_size > 1] if var is not None else None
    if var is None or var.variant.nunique() <= 1:
        if not live:
            return Variants(None, None, "Recorded mode: the variants were never run on the original VM, so there is "
                                        "nothing to show.")
        why = ("this machine has fewer than two GPUs, so there is no GPU-to-GPU transfer for them to change."
               if gpus < 2 else "the parameter `nccl_variants` selected none (or only the default).")
        return Variants(var, None, "The NCCL variants were not run: " + why)
    best = suite.best_variant(coll, decode_sizes)
    if best.empty:
        raise FindingError(f"NCCL variants: no variant row at the decode sizes {list(decode_sizes)}")
    wins = best.best_variant.value_counts()
    spread = best.launch_spread_us.median()
    rule = ("the best variant's p90 below the default's p10, and a saving larger than the default's own move "
            f"between its two launches, {spread:.1f} us at the median size" if np.isfinite(spread) else
            "the best variant's p90 below the default's p10; the default ran once, so how far a setting moves "
            "between launches is not known in this run")
    text = (f"At the decode sizes, the fastest all-reduce came from `{wins.index[0]}` at {wins.iloc[0]} of {len(best)} "
            f"sizes (measured, {machine_label}); the median saving over the default there is "
            f"{(best.default_time_us - best.best_time_us).median():.1f} us per all-reduce, a clear win at "
            f"{int(best.clear_win.sum())} of {len(best)} sizes ({rule}). " + _variant_timing(var))
    noted = sorted(set(best.best_variant) & set(settings.VARIANT_NOTES))
    for v in noted:
        text += f" `{v}` is {settings.VARIANT_NOTES[v]}."
    if noted:   # and the winner among the investigation's own list
        own = suite.best_variant(coll, decode_sizes, exclude=list(settings.VARIANT_NOTES))
        if len(own):
            ow = own.best_variant.value_counts()
            text += (f" Among the settings the investigation listed, `{ow.index[0]}` was fastest at {ow.iloc[0]} of "
                     f"{len(own)} decode sizes, {(own.default_time_us - own.best_time_us).median():.1f} us below the "
                     f"default (median), a clear win by the same rule at {int(own.clear_win.sum())} of {len(own)}.")
    return Variants(var, best, text)


def _variant_timing(var: pd.DataFrame) -> str:
    """How the variant rows were timed, from their method (VARIANT_METHOD, or the eager harness of older runs)."""
    m = Method.from_row(var.iloc[0])
    if m.harness != "graph":
        return ("Each variant is a separate launch timed with the eager harness (this run predates the graph-timed "
                "variant sweep), whose per-call host cost can move between launches by as much as these "
                "differences; a ranking at decode sizes from it needs a second run that agrees.")
    late = var.late_starts.dropna()
    lates = (f"; {int(late.sum())} of {int(var.loc[late.index, 'repeats'].sum())} timed blocks had a rank that "
             "received the deadline late and launched at once" if len(late) else "")
    call = ", each an ncclAllReduce call of its own as sglang makes it" if m.api == "nccl" else ""
    if m.start == "aligned":
        start = (f"every rank launching at one shared deadline set {m.start_lead_us / 1000:g} ms ahead (median "
                 f"launch skew between ranks {var.start_skew_us.median():.1f} us{lates}, measured)")
    else:
        start = "every rank released by a barrier" + (f" (the ranks span {m.nodes} nodes, whose hosts share no clock "
                                                       "for an aligned start)" if m.nodes > 1 else "")
    return (f"Each variant is a separate launch whose all-reduces ({int(var.iters.iloc[0])} per block{call}) are "
            f"captured in one CUDA graph and timed by nccl-tests' host clock, {start}: no Python or dispatch cost "
            "is left in these figures.")


# ------------------------------------------------------------------------------------------ 7. fits
def fits_table(fits: pd.DataFrame) -> pd.DataFrame:
    show = fits.assign(beta_GBps=fits.beta_GBps.replace(np.inf, np.nan))
    return show[["scope", "path", "method", "variant", "backend", "world_size", "alpha_us", "beta_GBps",
                 "median_rel_err", "max_rel_err", "n_points", "kind"]].round(3)


def fit_text(fits: pd.DataFrame, recorded_fit: pd.Series) -> str:
    """This machine's host-bounce fit beside the recorded VM's, or why there is none."""
    hb = fits[(fits.path == "host_bounce") & (fits.harness == "eager")]
    if not len(hb):
        return ("This run has no host-bounce measurement (it needs a GPU), so only the recorded fit can be "
                "compared with later chapters.")
    return (f"Through host memory, issued from Python, this machine's copies fit alpha = {hb.alpha_us.iloc[0]:.1f} us "
            f"and beta = {hb.beta_GBps.iloc[0]:.1f} GB/s (measured, fitted), against alpha = "
            f"{recorded_fit.alpha_us:.1f} us and beta = {recorded_fit.beta_GBps:.1f} GB/s for the original VM's "
            "GPU-to-GPU copies (recorded, fitted).")


# ------------------------------------------------------------------------------------------ 8. fidelity
#: what the fidelity prose cites: our all-reduce methods by their fields (the study's rotation and lead
#: are whatever it recorded)
GRAPH_TORCH = {"api": "torch", "harness": "graph", "timer": "host", "start": "barrier"}
GRAPH_NCCL = {**GRAPH_TORCH, "api": "nccl"}
EAGER_TORCH_HOST = {"api": "torch", "harness": "eager", "timer": "host", "start": "barrier"}
ALIGNED_TORCH = {**GRAPH_TORCH, "start": "aligned"}


def largest_setup(fid: pd.DataFrame) -> str:
    """The comparison the all-reduce prose is about: the setup with the most GPUs."""
    setups = sorted(fid.setup.unique(), key=lambda s: int(str(s).split("x")[0]) if str(s)[0].isdigit() else 0)
    if not setups:
        raise FindingError("fidelity: the comparison table is empty")
    return setups[-1]


def verdicts(fid: pd.DataFrame) -> pd.DataFrame:
    """fidelity.verdict per setup, in the registry's order of setups."""
    return pd.concat([fidelity.verdict(fid[fid.setup == s]).assign(setup=s) for s in fid.setup.unique()],
                     ignore_index=True)


def verdict_table(fid: pd.DataFrame) -> pd.DataFrame:
    """The verdict per tolerance for a reader: setup, quantity, tool setting, our method (short), how
    many sizes hold, the worst ratio, the size from which it holds."""
    from helpers.core.plotting import bytes_label

    v = verdicts(fid)
    v["method"] = [Method.from_row(r).short if isinstance(r["method"], str) else r["ours_method"]
                   for _, r in v.iterrows()]
    v["holds at"] = [f"{w} of {n} sizes" for w, n in zip(v.within, v.rows)]
    v["within from"] = ["-" if np.isnan(b) else bytes_label(b) for b in v.within_from_bytes]
    return v[["setup", "quantity", "tool_setting", "method", "holds at", "worst_ratio", "within from", "holds"]].round(3)


def allreduce_ratio_table(fid: pd.DataFrame) -> pd.DataFrame:
    """Ours / nccl-tests per size (rows) and tool setting | method (columns), in place, largest setup."""
    f = fid[fid.setup == largest_setup(fid)]
    ar = f[(f.quantity == "all_reduce time per call") & f.same_method.astype(bool)
           & f.tool_setting.str.endswith("in-place")].copy()
    ar["method"] = [f"{ts.replace(', in-place', '')} | {Method.from_row(r).short}"
                    for ts, (_, r) in zip(ar.tool_setting, ar.iterrows())]
    return ar.pivot_table(index="size_bytes", columns="method", values="ratio").round(2)


def copy_table(fid: pd.DataFrame) -> pd.DataFrame:
    other = fid[~fid.quantity.str.startswith("all_reduce")]
    return other[["setup", "quantity", "tool_setting", "size_bytes", "unit", "tool_value", "ours_value",
                  "ours_method", "same_method", "ratio", "within_tolerance"]].round(3)


def gap_table(gap: pd.DataFrame) -> pd.DataFrame:
    s = fidelity.gap_summary(gap)
    return s[["iters", "method", "nccl_setting", "time_us", "gap_us", "ratio", "start_skew_us"]].round(2)


#: the copy verdicts the prose cites (setup role, quantity); a verdict the table has beyond these fails
COPY_VERDICTS = {
    "fid_copy_same": ("one", "same-device copy bandwidth, read+write counted"),
    "fid_copy_back": ("multi", "GPU 1 -> GPU 0 peer copy bandwidth"),
    "fid_copy_fwd": ("multi", "GPU 0 -> GPU 1 peer copy bandwidth"),
}


def fidelity_findings(fid: pd.DataFrame, gap_stream: pd.DataFrame, gap_idle: pd.DataFrame) -> dict:
    """Every number the fidelity section cites, from the registered studies (helpers.interconnect.studies):
    the copies against p2pBandwidthLatencyTest, the tool against itself, our all-reduce methods against
    nccl-tests on the largest setup (two GPUs: its launch shapes are -g 2, -t 2 -g 1 and -np 2 -g 1),
    and the two all-reduce gap studies."""
    out = {"fid_tol_ar_pct": 100 * fidelity.TOLERANCES["all_reduce_time"],
           "fid_tol_bw_pct": 100 * fidelity.TOLERANCES["copy_bandwidth"]}
    setups = list(fid.setup.unique())
    multi = largest_setup(fid)
    single = [s for s in setups if str(s).startswith("1x")]
    if not single:
        raise FindingError(f"fidelity: no one-GPU comparison among the setups {setups}")
    f = fid[fid.setup == multi]
    first = f.iloc[0]
    dates = and_list(sorted(str(d) for d in fid.date.unique())) if "date" in fid.columns else "date unrecorded"
    out.update(fid_label=(f"measured on {' and on '.join(sorted(setups))} (lent machines, {dates}) by "
                          f"benchmarks/fidelity.py (NCCL {first.nccl_version}, torch {first.torch_version})"),
               fid_setup_one=single[0], fid_setup_multi=multi)
    out.update(_copy_findings(fid, f, single[0], multi))
    out.update(_allreduce_findings(f, multi))
    out.update(_gap_findings(gap_stream, gap_idle, multi))
    return out


def _copy_findings(fid, f, single, multi) -> dict:
    v = verdicts(fid)
    bw = v[v.quantity.str.endswith("bandwidth") | v.quantity.str.endswith("read+write counted")]
    cited = {(single if who == "one" else multi, q) for who, q in COPY_VERDICTS.values()}
    extra = sorted(set(zip(bw.setup, bw.quantity)) - cited)
    if extra:
        raise FindingError(f"fidelity: copy verdicts {extra} are in the studies but the chapter does not cite "
                           "them (COPY_VERDICTS); add them to the text")
    out = {}
    for key, (who, q) in COPY_VERDICTS.items():
        r = one(bw, "fidelity: copy verdict", setup=single if who == "one" else multi, quantity=q)
        out[key + "_ratio"] = float(r.worst_ratio)
        out[key + "_verdict"] = "within" if bool(r.holds) else "outside"
    own = one(f, "fidelity: the tool's two peer directions",
              quantity="GPU 0 -> GPU 1 peer copy bandwidth, p2pBandwidthLatencyTest against its own other direction")
    back = one(f, "fidelity: our GPU 1 -> GPU 0 copy", quantity="GPU 1 -> GPU 0 peer copy bandwidth",
               copy_harness="queued")
    order = rows(f, "fidelity: the tool's peer directions timed in either turn", tool="p2pBandwidthLatencyTest")
    order = order[order.quantity.str.endswith("timed after the other direction against timed before it")]
    if len(order) != 2:
        raise FindingError(f"fidelity: expected the tool's two directions timed in either turn, found {len(order)} "
                           "rows (p2pBandwidthLatencyTest_reversed runs of benchmarks/fidelity.py)")
    lat = one(f, "fidelity: our 16-byte peer copy", quantity="GPU 0 -> GPU 1 peer copy, 16 B, GPU time per copy",
              copy_harness="queued")
    return {**out, "fid_tool_fwd_GBps": float(own.ours_value), "fid_tool_back_GBps": float(own.tool_value),
            "fid_tool_dir_ratio": float(own.ratio), "fid_back_ratio": float(back.ratio),
            "fid_order_lo": float(order.ratio.min()), "fid_order_hi": float(order.ratio.max()),
            "fid_lat_ours_us": float(lat.ours_value), "fid_lat_tool_us": float(lat.tool_value)}


def _verdict_of(v, setting, what, **fields) -> pd.Series:
    r = by_method(v, what, {"tool_setting": setting}, **fields)
    return r.iloc[0]


def _allreduce_findings(f: pd.DataFrame, setup: str) -> dict:
    n = int(str(setup).split("x")[0])
    g, np_, t_ = f"-g {n}", f"-np {n} -g 1", f"-t {n} -g 1"
    v = fidelity.verdict(f)
    ip = ", in-place"
    pg = _verdict_of(v, f"{np_} -G 1{ip}", "fidelity: our graph harness against -np -G 1", placement="in-place", **GRAPH_TORCH)
    tg = _verdict_of(v, f"{t_} -G 1{ip}", "fidelity: our graph harness against -t -G 1", placement="in-place", **GRAPH_TORCH)
    below = by_method(f, "fidelity: our graph harness's ratios", {"tool_setting": f"{np_} -G 1{ip}"},
                      placement="in-place", **GRAPH_TORCH)
    below = below[below.size_bytes < 2**20]
    self_runs = rows(v, "fidelity: nccl-tests against its own runs", tool_setting=f"{np_} -G 1{ip}")
    self_runs = self_runs[self_runs.ours_method.str.startswith("nccl-tests run")]
    if self_runs.empty:
        raise FindingError(f"fidelity: no nccl-tests run of {np_} -G 1 against the median of its runs")
    oop = _verdict_of(v, f"{np_} -G 1, out-of-place", "fidelity: our ncclAllReduce out of place",
                      placement="out-of-place", **GRAPH_NCCL)
    al = _verdict_of(v, f"{np_} -G 1{ip}", "fidelity: the aligned start", placement="in-place", **ALIGNED_TORCH)
    gg = _verdict_of(v, f"{g} -G 1{ip}", "fidelity: the -g shape", placement="in-place", **GRAPH_TORCH)
    ge = _verdict_of(v, f"{g}{ip}", "fidelity: eager torch.distributed", placement="in-place", **EAGER_TORCH_HOST)
    eager = by_method(f, "fidelity: eager torch.distributed calls", {"tool_setting": f"{g}{ip}"}, placement="in-place",
                      **EAGER_TORCH_HOST)
    from helpers.core.plotting import bytes_label

    return {"fid_n_gpus": n, "fid_graph_lo": float(below.ratio.min()), "fid_graph_hi": float(below.ratio.max()),
            "fid_graph_np_within": int(pg.within), "fid_graph_np_rows": int(pg.rows),
            "fid_graph_np_worst": float(pg.worst_ratio), "fid_graph_t_within": int(tg.within),
            "fid_graph_t_rows": int(tg.rows), "fid_graph_t_worst": float(tg.worst_ratio),
            "fid_self_runs": len(self_runs), "fid_self_within": and_list(int(w) for w in self_runs.within),
            "fid_self_rows": int(self_runs.rows.iloc[0]),
            "fid_nccl_oop_within": int(oop.within), "fid_nccl_oop_rows": int(oop.rows),
            "fid_nccl_oop_worst": float(oop.worst_ratio),
            "fid_aligned_lead_ms": float(al.start_lead_us) / 1000, "fid_aligned_within": int(al.within),
            "fid_aligned_rows": int(al.rows), "fid_aligned_worst": float(al.worst_ratio),
            "fid_g_within": int(gg.within), "fid_g_rows": int(gg.rows), "fid_g_worst": float(gg.worst_ratio),
            "fid_eager_floor_us": float(eager[eager.size_bytes <= 65536].ours_value.median()),
            "fid_eager_within_from": bytes_label(ge.within_from_bytes)}


def _gap_time(s: pd.DataFrame, what: str, iters: int, setting: str = "default", **fields) -> pd.Series:
    return by_method(s, what, {"iters": iters, "nccl_setting": setting, "who": "ours"}, **fields).iloc[0]


def _tool_time(s: pd.DataFrame, what: str, iters: int, shape: str, setting: str = "default") -> pd.Series:
    return one(s, what, iters=iters, nccl_setting=setting, who="nccl-tests", tool_shape=shape)


def _gap_findings(gap_stream: pd.DataFrame, gap_idle: pd.DataFrame, setup: str) -> dict:
    n = int(str(setup).split("x")[0])
    shape = f"-np {n} -g 1"
    # the idle lead: torch.distributed on a non-blocking stream at each lead the study ran, and a barrier start
    gi = fidelity.gap_summary(gap_idle)
    it = int(gi.iters.iloc[0])
    side = rows(gi, "idle study: torch.distributed, aligned, non-blocking stream", who="ours", nccl_setting="default",
                api="torch", stream="side", start="aligned").sort_values("start_lead_us")
    if len(side) < 2:
        raise FindingError(f"idle study: {len(side)} aligned leads of torch.distributed on a non-blocking stream; "
                           "the text compares two or more")
    bar = one(gi, "idle study: barrier start", who="ours", nccl_setting="default", api="torch", start="barrier")
    tool = _tool_time(gi, "idle study: nccl-tests", it, shape)
    out = {"fid_idle_iters": it, "fid_idle_leads": and_list(f"{lead / 1000:g}" for lead in side.start_lead_us),
           "fid_idle_times": and_list(f"{t:.2f}" for t in side.time_us), "fid_idle_barrier_us": float(bar.time_us),
           "fid_idle_tool_us": float(tool.time_us), "fid_worker_lead_ms": START_LEAD_US / 1000}
    # the launch stream, graph length and graph mixing
    gs = fidelity.gap_summary(gap_stream)
    its = sorted(gs.iters.unique())
    if len(its) < 2:
        raise FindingError(f"stream study: block lengths {its}; the text compares the shortest and the longest")
    lo, hi = its[0], its[-1]
    out.update(fid_gap_iters_lo=int(lo), fid_gap_iters_hi=int(hi))
    arm = {"api": "torch", "start": "aligned"}
    for key, what, setting, fields in [("legacy", "legacy default stream", "default", {**arm, "stream": "legacy"}),
                                       ("side", "non-blocking stream", "default", {**arm, "stream": "side"}),
                                       ("mix", "non-blocking stream, graph mixing off", "GRAPH_MIXING_SUPPORT=0",
                                        {**arm, "stream": "side"})]:
        for tag, i in (("lo", lo), ("hi", hi)):
            r = _gap_time(gs, f"stream study: {what}, {i} per graph", i, setting, **fields)
            out[f"fid_gap_{key}_{tag}_us"] = float(r.time_us)
            if key == "legacy" and tag == "lo":
                out["fid_gap_legacy_ratio"] = float(r.ratio)
    for key, setting in (("tool", "default"), ("mixt", "GRAPH_MIXING_SUPPORT=0")):
        for tag, i in (("lo", lo), ("hi", hi)):
            out[f"fid_gap_{key}_{tag}_us"] = float(_tool_time(gs, f"stream study: nccl-tests, {setting}", i, shape,
                                                              setting).time_us)
    return out


# ------------------------------------------------------------------------------------------ 9. host path
#: what the host-path section needs to run, for the sentences that say why it did not
HOSTPATH_NEEDS = ("a host with two GPUs or more (eight for the original VM's eight ranks; with four, the "
                  "eight-rank figure is extrapolated from two and four, derived) and the `vm-emulation` target")


def hostpath_findings(cfg) -> dict:
    """What the host-path section's expectation cites, from the study's configuration
    (hostpath.StudyConfig) and the recorded link: the sizes swept and the link the VM topology names."""
    from helpers.core.plotting import bytes_label
    from helpers.interconnect import topology

    link = topology.recorded_vm_link()
    return {"hp_link": f"PCIe Gen{link.generation} x{link.width}", "hp_min": bytes_label(cfg.min_bytes),
            "hp_max": bytes_label(cfg.max_bytes), "hp_tuning_max": bytes_label(min(cfg.max_bytes, settings.TUNING_MAX_BYTES))}


def hostpath_summary(res: dict | None, live: bool, gpus: int, selected, decode_sizes) -> str:
    """The summary's line on the host-path study: its one-token figures where it ran, else that it did not."""
    from helpers.interconnect import hostpath as hp

    if not (live and selected and gpus >= 2 and res is not None):
        return "not measured in this run (section 9 says what it needs)."
    s = res["sweep"]
    s = s[(s.op == "all_reduce") & (s.arm == hp.HOST_ARM)]
    if s.empty:
        return "the study ran, but its host arm gave no point (section 9, runs table)."
    n, one_tok = int(s.world_size.max()), int(min(decode_sizes))
    r = one(s, "host-path summary: the host arm's one-token point", world_size=n, size_bytes=one_tok)
    return (f"measured at {n} ranks on this machine, {r.time_us:.1f} us per all-reduce of {one_tok / 1024:g} KiB "
            "through host memory (section 9).")


def _launch_status(runs: pd.DataFrame, arm: str, n: int) -> str:
    r = runs[(runs.arm == arm) & (runs.world_size == n)] if runs is not None and len(runs) else runs
    return str(r.status.iloc[-1]) if r is not None and len(r) else "not planned"


def _hp_time(sweep: pd.DataFrame, runs: pd.DataFrame, arm: str, n: int, size: int) -> float | None:
    """An arm's all-reduce time at n ranks and `size` (measured), None where its launch did not succeed
    (the runs table says so); FindingError where the launch succeeded and the row is missing."""
    if _launch_status(runs, arm, n) not in ("ok", "timeout", "not started"):
        return None
    got = sweep[(sweep.arm == arm) & (sweep.world_size == n) & (sweep.size_bytes == size) & (sweep.op == "all_reduce")]
    if got.empty:
        if _launch_status(runs, arm, n) == "ok":
            raise FindingError(f"host-path study: arm {arm!r} ran at {n} ranks but has no all-reduce row at {size} B")
        return None
    return float(got.time_us.iloc[0])


def hostpath_text(res: dict | None, live: bool, gpus: int, selected, decode_sizes, machine_label: str = "") -> str:
    """The host-path section's sentence: what the study measured (at the largest world size the host arm
    ran, the one-token all-reduce per main arm, the growth from the smallest world size, the eight-rank
    figure derived where eight were not measured, the fastest tuning arm at the decode sizes and the
    launches that failed), or plainly why it did not run. `res` is hostpath.run_study's result or None."""
    from helpers.interconnect import hostpath as hp

    if not live:
        return ("Recorded mode measures nothing: no all-reduce was ever timed on the original VM, and this study "
                f"needs {HOSTPATH_NEEDS}.")
    if not selected:
        return (f"The host-path study was not selected in this run (`hostpath_arms = \"none\"`); it needs "
                f"{HOSTPATH_NEEDS}.")
    if gpus < 2 or res is None:
        return (f"The host-path study did not run: this machine has {gpus} GPU{'s' if gpus != 1 else ''}, and it "
                f"needs {HOSTPATH_NEEDS}.")
    sweep, runs = res["sweep"], res["runs"]
    host = sweep[(sweep.arm == hp.HOST_ARM) & (sweep.op == "all_reduce")]
    if host.empty:
        failed = runs[runs.arm == hp.HOST_ARM]
        why = "; ".join(f"{r.world_size} ranks: {r.status}" for r in failed.itertuples()) or "it was not selected"
        return (f"The host-path study ran on this machine ({machine_label}), but its host arm gave no point ({why}); "
                "see the runs table.")
    n = int(host.world_size.max())
    one_tok = int(min(decode_sizes))
    cite = {a: _hp_time(sweep, runs, a, n, one_tok) for a in hp.MAIN_ARMS}
    if cite[hp.HOST_ARM] is None:
        raise FindingError(f"host-path study: the host arm has rows at {n} ranks but none at {one_tok} B (one token)")

    def us(a):
        t = cite[a]
        return f"{t:.1f} us" if t is not None else f"no figure ({_launch_status(runs, a, n)})"

    text = (f"At {n} ranks (measured, {machine_label}; {hp.GPU_METHOD.label}), a one-token all-reduce "
            f"({one_tok / 1024:g} KiB) takes {us(hp.P2P_ARM)} on this machine's own path and {us(hp.HOST_ARM)} "
            "through host memory")
    if cite[hp.P2P_ARM]:
        text += f" ({cite[hp.HOST_ARM] / cite[hp.P2P_ARM]:.1f} times)"
    text += (f"; with copy-engine memcpy {us('host+cuda_memcpy')}, and with NCCL also told the original VM's "
             f"topology {us(hp.VM_ARM)}.")
    ns = sorted(int(x) for x in host.world_size.unique() if x >= 2)
    if len(ns) >= 2:
        lo = _hp_time(sweep, runs, hp.HOST_ARM, ns[0], one_tok)
        if lo is not None:
            text += (f" Through host memory it grows from {lo:.1f} us at {ns[0]} ranks to {cite[hp.HOST_ARM]:.1f} us "
                     f"at {n}.")
    target = 8
    if n < target:
        if len(ns) >= 2:
            d = growth.extrapolate(host[host.size_bytes == one_tok], target)
            r = d.iloc[0]
            text += (f" At {target} ranks, not measured here, it would take {r.time_us:.1f} us (derived: "
                     f"{r.assumption}; the other growth assumptions give {r.time_us_low:.1f} to "
                     f"{r.time_us_high:.1f} us).")
        else:
            text += f" {target} ranks were not measured, and one world size is too few to extrapolate to them."
    tune = [a for a in hp.ARM_GROUPS["tuning"] if a in set(sweep.arm)]
    if tune:
        rows_ = []
        for size in decode_sizes:
            base = _hp_time(sweep, runs, hp.HOST_ARM, n, int(size))
            ts = {a: _hp_time(sweep, runs, a, n, int(size)) for a in tune}
            ts = {a: t for a, t in ts.items() if t is not None}
            if base is not None and ts:
                best = min(ts, key=ts.get)
                rows_.append((best, base - ts[best]))
        if rows_:
            wins = pd.Series([b for b, _ in rows_]).value_counts()
            saving = float(np.median([s for b, s in rows_ if b == wins.index[0]]))
            text += (f" Of the tuning arms, `{wins.index[0]}` was fastest at {wins.iloc[0]} of {len(rows_)} decode "
                     f"sizes, {saving:.1f} us {'below' if saving >= 0 else 'above'} the plain host path (median).")
    bad = runs[runs.status.isin(["failed", "timeout"])]
    if len(bad):
        text += (f" {len(bad)} launch{'es' if len(bad) != 1 else ''} failed or timed out ("
                 + and_list(f"`{r.arm}` at {r.world_size} ranks" for r in bad.itertuples()) + "; see the runs table).")
    later = runs[runs.status == "not started"]
    if len(later):
        text += (f" {len(later)} launch{'es' if len(later) != 1 else ''} did not start within the time budget; "
                 "running the chapter again on the same run folder resumes them.")
    return text


def hostpath_decode_table(sweep: pd.DataFrame | None, decode_sizes, target: int = 8) -> pd.DataFrame | None:
    """Per arm, the all-reduce time at each decode size: at every measured world size, and at `target`
    ranks derived (growth.at_world_size) where the study could not run that many but ran two world sizes."""
    from helpers.interconnect import hostpath as hp

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
