"""The budget's inputs, from data/ and from a run: the memory bandwidth, the assumed launch floor, the
workload, the recorded copy and reference links, the run's own VM/P2P fits (read through chapter
07_diagnosis's declared need), the scenarios they make, and the whole prediction table."""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import pandas as pd

from helpers.interconnect import fits as alphabeta
from helpers.model import arith as ma
from helpers.core import layout, recorded

from .terms import DEFAULT_BATCHES, FITS_RELPATH, BudgetError, Link, Quantity, Scenario, predict

# --------------------------------------------------------------------------------------------------
# Inputs from data/ and from a run


def mem_bandwidth(system: str = "RTX PRO 6000 Blackwell Server Edition") -> Quantity:
    """Per-GPU memory bandwidth from data/reference/gpu_specs.csv (a datasheet figure: a bound)."""
    df = recorded.load("reference/gpu_specs.csv")
    rows = df[(df["system"] == system) & (df["metric"] == "memory_bandwidth")]
    if len(rows) != 1:
        known = sorted(df.loc[df["metric"] == "memory_bandwidth", "system"].unique())
        raise BudgetError(f"no single memory_bandwidth row for {system!r} in data/reference/gpu_specs.csv; "
                          f"known: {known}")
    r = rows.iloc[0]
    return Quantity(f"memory bandwidth ({system})", float(r["value"]), "GB/s", "reference",
                    f"{r['source']}: datasheet peak, a bound")


def assumed_launch() -> tuple[Quantity, Quantity]:
    """Per-kernel floor with and without CUDA graphs (assumed from data/reference/budget_assumptions.csv)."""
    df = recorded.load("reference/budget_assumptions.csv")
    get = {r.item: r for r in df.itertuples()}
    out = []
    for item in ("kernel_floor_graph", "kernel_floor_eager"):
        if item not in get:
            raise BudgetError(f"data/reference/budget_assumptions.csv lacks the row '{item}'")
        r = get[item]
        out.append(Quantity(item.replace("_", " "), float(r.value), r.unit, r.kind, f"{r.source}: {r.note}"))
    return out[0], out[1]


def workload_prefill_ratio() -> Quantity:
    """Prompt tokens per output token of the recorded 256/256 sweep (derived)."""
    df = recorded.load("recorded/serving.csv")
    r = df[(df["experiment"] == "sweep_256_256") & df["input_len"].notna()].iloc[0]
    return Quantity("prompt tokens per output token, nominal", int(r["input_len"]) / int(r["output_len"]), "ratio",
                    "derived", "recorded sweep_256_256: input_len / output_len (the benchmark's nominal lengths)")


def recorded_prefill_ratio(concurrency: int = 64) -> Quantity:
    """Prompt tokens per output token the recorded 256/256 sweep processed at `concurrency`, from its own totals:
    total tokens/s over output tokens/s, less one (derived). The nominal lengths (workload_prefill_ratio) say 1;
    the benchmark's random lengths need not, and the totals are what it processed."""
    df = recorded.load("recorded/serving.csv")
    g = df[(df["experiment"] == "sweep_256_256") & (df["concurrency"] == concurrency)]
    out = g.loc[g["metric"] == "output_throughput", "value"].astype(float).unique()
    tot = g.loc[g["metric"] == "total_throughput", "value"].astype(float).unique()
    if len(out) != 1 or len(tot) != 1:
        raise BudgetError(f"data/recorded/serving.csv: sweep_256_256 at concurrency {concurrency} has output "
                          f"throughputs {list(out)} and total throughputs {list(tot)}; expected one of each")
    return Quantity("prompt tokens per output token, from the recorded totals", tot[0] / out[0] - 1, "ratio",
                    "derived", f"recorded sweep_256_256 at concurrency {concurrency}: total {tot[0]:g} / output "
                    f"{out[0]:g} tokens/s - 1")


def recorded_context() -> Quantity:
    """Mean context during decode in the recorded 256/256 sweep: input + output/2 (derived)."""
    df = recorded.load("recorded/serving.csv")
    r = df[(df["experiment"] == "sweep_256_256") & df["input_len"].notna()].iloc[0]
    c = int(r["input_len"]) + int(r["output_len"]) // 2
    return Quantity("context during decode", c, "tokens", "derived",
                    "recorded sweep_256_256: input_len + output_len / 2")


def tokens_of_copy_sweep(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of the recorded copy sweep that have a token count and a latency."""
    return df[df["tokens"].notna() & df["latency_us"].notna()].copy()


def vm_copy_link(m: ma.ModelConfig) -> tuple[Link, pd.DataFrame]:
    """Alpha-beta fit of the recorded GPU-to-GPU copy sweep on the original VM (measured there, by the
    investigation: so in this book the fit is derived from recorded points, never "measured", which means
    by code in this run; reader review, defect 4).

    Sizes are derived from the token counts: tokens x hidden x 2 bytes."""
    df = tokens_of_copy_sweep(recorded.load("recorded/copy_sweep.csv"))
    df = df[df["path"] == "gpu0_to_gpu1"]
    sizes = ma.allreduce_bytes(m, df["tokens"].astype(int).to_numpy())
    f = alphabeta.fit(sizes, df["latency_us"].astype(float).to_numpy())
    pts = pd.DataFrame({"tokens": df["tokens"].astype(int).to_numpy(), "size_bytes": sizes,
                        "latency_us": df["latency_us"].astype(float).to_numpy(),
                        "fit_us": f.time_us(sizes)})
    link = Link.from_fit("VM copy (recorded)", f, "derived",
                         "recorded copy sweep, GPU0->GPU1 on the original VM (P2P NS); alpha-beta fit to it")
    return link, pts


def held_flat(alpha_us: float, beta_GBps: float) -> bool:
    """Whether an alpha-beta fit is flat: its size term adds under 1 % of alpha even at 1 GiB (a fit to equal times
    gives a bandwidth that is infinite, or finite only by rounding). Beyond its points such a fit is held flat."""
    return math.isinf(beta_GBps) or 2 ** 30 / (beta_GBps * 1e3) < 0.01 * alpha_us


def reference_allreduce_link(gpus: int) -> Link:
    """A fit of the bare-metal NCCL all-reduce reference for `gpus` GPUs (data/reference/baremetal.csv)."""
    df = recorded.load("reference/baremetal.csv")
    rows = df[(df["metric"] == "allreduce_time") & (df["gpus"] == gpus)]
    if len(rows) < 2:
        raise BudgetError(f"data/reference/baremetal.csv has {len(rows)} allreduce_time rows for "
                          f"{gpus} GPUs; a fit needs two")
    f = alphabeta.fit(rows["message_bytes"].astype(float), rows["value"].astype(float))
    return Link.from_fit(f"NCCL all-reduce, {gpus} GPUs, P2P (reference)", f, "reference",
                         f"{rows['source'].iloc[0]}: {rows['system'].iloc[0]}; fitted "
                         f"{int(f.min_bytes)}-{int(f.max_bytes)} B, "
                         f"{'held flat' if held_flat(f.alpha_us, f.beta_GBps) else 'extrapolated'} beyond (assumed)",
                         collective=True, world_size=gpus)


def reference_p2p_link(vm_link: Link) -> Link:
    """Copy latency with P2P enabled (reference, midpoint of its range) and, for lack of a bare-metal
    bandwidth figure, the VM fit's bandwidth (assumed stand-in)."""
    df = recorded.load("reference/baremetal.csv")
    r = df[(df["metric"] == "p2p_latency") & df["system"].str.contains("with P2P")].iloc[0]
    mid = (float(r["value_low"]) + float(r["value_high"])) / 2 if pd.isna(r["value"]) else float(r["value"])
    return Link("P2P copy (reference latency)", mid, vm_link.beta_GBps, "reference",
                f"{r['source']}: {r['note']}; bandwidth from the VM fit (assumed stand-in)")


#: the chapter whose prediction predict_from_run reproduces: the run's fits are read through its declared need
FITS_READER = "07_diagnosis"


def read_fits(run_dir: str | Path) -> pd.DataFrame | None:
    """The run's VM/P2P fits (helpers.core.layout checks their columns), or None when the run has none. Read as
    the diagnosis reads them, through its declared need (helpers.core.layout.NEEDS: 07_diagnosis needs
    06_vm_p2p's fits); that need is required of a run that executes the diagnosis (the runbook checks it),
    while a rendered run without fits is still checked here, on the recorded inputs alone."""
    try:
        return layout.Run(run_dir, FITS_READER).need("06_vm_p2p", "fits")
    except layout.MissingResult:
        return None


def select_run_link(fits: pd.DataFrame) -> Link | None:
    """The link a run measured, chosen by the fit table's fields: among rows with kind 'measured', an
    all-reduce fit first (scope 'collective', path 'all_reduce': used as a collective), else a copy fit;
    then NCCL before other backends, the default variant first, the CUDA-graph harness before the eager one
    (the decode step runs its all-reduces inside CUDA graphs, and the budget counts launches in a term of
    its own), the larger world size, the smaller median relative error. None if nothing usable. The link's
    source names the fit's method label (the `method` column the VM/P2P chapter writes).

    Only a link between two GPUs counts: every fit needs two ranks or GPUs or more (a one-GPU NCCL
    "all-reduce" moves nothing between GPUs, and a one-GPU copy through host memory comes back to the GPU it
    left), gloo's ranks are CPU processes, and a copy within one GPU (path `same_device`) is no link; among copies, one GPU to another (`peer`) comes first, then
    through host memory (`host_bounce`, the path a VM without P2P takes), then the rest."""
    df = fits[fits["kind"].astype(str) == "measured"]
    df = df[pd.to_numeric(df["alpha_us"], errors="coerce").notna()
            & (pd.to_numeric(df["beta_GBps"], errors="coerce") > 0)]
    ws = pd.to_numeric(df["world_size"], errors="coerce").fillna(0)
    coll = df["scope"] == "collective"
    # a link joins two GPUs: nothing of one GPU (a one-rank all-reduce, a copy to host memory and back to the
    # same GPU) is priced as GLM-5's link (issue 44), and gloo's ranks are CPU processes
    df = df[(ws >= 2) & ~(coll & (df["backend"].astype(str) == "gloo")) & (df["path"] != "same_device")]
    if not len(df):
        return None
    df = df.assign(_ar=(df["scope"] == "collective") & (df["path"] == "all_reduce"),
                   _between=df["path"].map({"peer": 0, "host_bounce": 1}).fillna(2),
                   _nccl=df["backend"] == "nccl", _default=df["variant"] == "default", _graph=df["harness"] == "graph",
                   _ws=pd.to_numeric(df["world_size"], errors="coerce").fillna(0),
                   _err=pd.to_numeric(df["median_rel_err"], errors="coerce").fillna(1e9))
    df = df.sort_values(["_ar", "_between", "_nccl", "_default", "_graph", "_ws", "_err"],
                        ascending=[False, True, False, False, False, False, True], kind="stable")
    r = df.iloc[0]
    desc = ", ".join(f"{c}={r[c]}" for c in ("path", "method", "variant", "backend", "world_size", "device")
                     if c in r.index and pd.notna(r[c]))
    ws = int(r["_ws"]) if r["_ws"] else None
    return Link(f"this run: {r['path']}" + (" (all-reduce)" if r["_ar"] else " (copy)"),
                float(r["alpha_us"]), float(r["beta_GBps"]), "measured", f"{FITS_RELPATH}: {desc}",
                collective=bool(r["_ar"]), world_size=ws)


VM_SCENARIO = "VM as deployed (TP8, graphs on)"
BAREMETAL_SCENARIO = "what-if: P2P on (bare-metal all-reduce)"
PP_SCENARIO = "what-if: TP4+PP2 (VM)"
TP4_SCENARIO = "what-if: 4 GPUs TP4 (VM)"
GRAPHS_OFF_SCENARIO = "what-if: CUDA graphs off (VM)"
RUN_SCENARIO = "this run's measured link"
COMPARED = (VM_SCENARIO, BAREMETAL_SCENARIO)


def baseline_scenario(m: ma.ModelConfig | None = None) -> Scenario:
    """The original deployment: TP8, CUDA graphs on, the recorded VM copy fit mapped by a ring."""
    m = m or ma.load_model("glm5")
    link, _ = vm_copy_link(m)
    g, e = assumed_launch()
    tp = int(recorded.load("recorded/launch_config.csv").query("name == '--tp-size'")["value"].iloc[0])
    return Scenario(VM_SCENARIO, mem_bandwidth(), link, g, e, recorded_context(),
                    tp=tp, note="recorded copy fit, ring mapping")


def scenarios(m: ma.ModelConfig, run_link: Link | None = None) -> list[Scenario]:
    """The baseline, the mapping alternatives and the what-ifs."""
    base = baseline_scenario(m)
    nvl = [r for r in recorded.load("reference/budget_assumptions.csv").itertuples()
           if r.item == "nvlink_allreduce_us"]
    out = [
        base,
        replace(base, name="VM, tree mapping", algorithm="tree", note="recorded copy fit, tree mapping"),
        replace(base, name="VM, one-shot mapping", algorithm="one_shot",
                note="recorded copy fit, one-shot mapping"),
        replace(base, name=BAREMETAL_SCENARIO, link=reference_allreduce_link(base.tp),
                note="reference NCCL all-reduce on 8 GPUs with P2P"),
        replace(base, name="what-if: P2P copy latency, ring", link=reference_p2p_link(base.link),
                note="reference P2P copy latency mapped by a ring"),
        replace(base, name=PP_SCENARIO, tp=base.tp // 2, pp=2, note="recorded copy fit, ring over 4"),
        replace(base, name=TP4_SCENARIO, tp=base.tp // 2, note="recorded copy fit, ring over 4"),
        replace(base, name=GRAPHS_OFF_SCENARIO, cuda_graphs=False, note="eager launches"),
    ]
    if nvl:
        r = nvl[0]
        out.insert(5, replace(base, name="what-if: NVLink-class all-reduce",
                              link=Link("NVLink-class all-reduce (assumed)", float(r.value), math.inf,
                                        r.kind, f"{r.source}: {r.note}", collective=True),
                              note="assumed flat all-reduce time"))
    if run_link is not None:
        out.append(replace(base, name=RUN_SCENARIO, link=run_link,
                           note="fit from the run's 06_vm_p2p/fits.csv (not the original VM)"))
    return out


def predict_all(m: ma.ModelConfig, fits: pd.DataFrame | None = None,
                batches: Sequence[int] = DEFAULT_BATCHES) -> pd.DataFrame:
    """The prediction table for every scenario, from data/ and, where given, a run's VM/P2P fit table
    (`fits`: scenario "this run's measured link"). `fits=None` predicts from the recorded inputs only, on
    purpose (the diagnosis in recorded mode). Deterministic: the same inputs give the same table."""
    link = select_run_link(fits) if fits is not None else None
    scs = scenarios(m, link)
    tabs = [predict(m, sc, batches) for sc in scs]
    # the two scenarios checked against observations, again with the workload's prompt tokens mixed in
    for ratio in (workload_prefill_ratio().value, recorded_prefill_ratio().value):
        tabs += [predict(m, sc, batches, prefill_ratio=ratio) for sc in scs if sc.name in COMPARED]
    return pd.concat(tabs, ignore_index=True)


def predict_from_run(run_dir: str | Path, model: str = "glm5",
                     batches: Sequence[int] = DEFAULT_BATCHES) -> pd.DataFrame:
    """`predict_all` with the run directory's 06_vm_p2p fits where it has them (a rendered run can be
    checked without re-measuring anything)."""
    if not str(run_dir):
        raise BudgetError("run_dir is empty; pass the run directory (runs/<run-id>)")
    if not Path(run_dir).is_dir():
        raise BudgetError(f"run directory {run_dir} does not exist; pass an existing runs/<run-id>")
    m = ma.load_model(model)
    return predict_all(m, read_fits(run_dir), batches)
