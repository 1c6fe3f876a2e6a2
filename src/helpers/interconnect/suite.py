"""The interconnect suite of the VM/P2P chapter: copy sweeps, collective sweeps, NCCL variants, fits.

`run_suite(preset, workdir, save=...)` measures whatever this machine has (a SuiteResult):
- GPUs: every copy path and harness (helpers.interconnect.copies); NCCL collectives with one process per GPU, and
  one sweep per NCCL variant where there are two GPUs or more.
- one GPU: the peer path and the variants are skipped with the reason; NCCL on one rank shows the
  library's own floor (no data crosses a link) and gloo between two CPU processes is measured too.
- no GPU: CPU memcpy and gloo between CPU processes, labelled as such.

Past one node (`nodes=Nodes(count, endpoint)`, helpers.interconnect.nodes) the collective sweeps span every
node, each launch through torchrun's rendezvous, while the copy sweep stays on this node; the methods
are the same but for the node count, and across nodes the variant method's ranks start at a barrier
(`eager_method(n)`, `variant_method(n)`).

`fit_table` gives the alpha-beta fits that the diagnosis chapter reads (`FIT_COLUMNS`, and `method`:
the label of a collective fit's method); `recorded_fit` fits the original VM's copy sweep. Every
collective run is timed by one helpers.interconnect.method.Method; the figures are in helpers.core.plotting.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from helpers.interconnect import fits as alphabeta, collectives, copies as copybench
from helpers.interconnect.method import Method, MethodError
from helpers.interconnect import nodes as multinode
from helpers.interconnect.nodes import Nodes, NodesError
from helpers.interconnect import settings
from helpers.core import layout, recorded

#: the diagnosis reads these (helpers.core.layout); `harness` is the method's harness field ('graph' for
#: the CUDA-graph harness) and `method` the collective method's label (a copy fit: its copy harness)
FIT_COLUMNS = list(layout.FIT_COLUMNS) + ["method"]

RECORDED_PATH = "recorded_vm_gpu0_to_gpu1"
#: How the NCCL variants are timed on two GPUs or more: as sglang's decode step issues its all-reduce when
#: the custom all-reduce is off (the investigation's case), ncclAllReduce called directly (its pynccl
#: binding; here helpers.interconnect.nccl) inside one CUDA graph, timed by nccl-tests' host clock with every
#: rank launching at one shared deadline, on a non-blocking stream. With the eager harness a per-call host
#: cost of tens of us, which moves between launches, decided which variant "won" at decode sizes; this
#: method leaves only what NCCL and the link do.
VARIANT_METHOD = Method(harness="graph", timer="host", start="aligned", api="nccl")
#: how the investigation timed (and the suite times every sweep but the variants)
EAGER_METHOD = Method()
#: The default launched once more after every variant, by VARIANT_METHOD: how far one setting moves
#: between two launches, which a variant's win must exceed before it counts.
REPEAT_VARIANT = "default, second launch"
GLOO_MAX_BYTES = 16 * 2**20   # gloo sweeps stop at 16 MiB whatever the preset


def eager_method(nodes: int = 1) -> Method:
    """EAGER_METHOD on `nodes` nodes."""
    return EAGER_METHOD if nodes == 1 else EAGER_METHOD.but(nodes=nodes)


def variant_method(nodes: int = 1) -> Method:
    """VARIANT_METHOD on `nodes` nodes: across nodes the ranks share no clock, so they start at a barrier."""
    return VARIANT_METHOD if nodes == 1 else VARIANT_METHOD.but(start="barrier", nodes=nodes)


@dataclass(frozen=True)
class Preset:
    """Sizes and repetition counts of one suite; `quick` is for CPU machines and CI, `full` for GPUs."""
    copy_min: str
    copy_max: str
    copy_factor: int
    copy_iters: int
    copy_repeats: int
    copy_warmup: int
    copy_budget: int          # bytes one timed block may move
    coll_min: str
    coll_max: str
    coll_factor: int
    coll_iters: int
    coll_repeats: int
    coll_warmup: int


PRESETS = {
    "quick": Preset("64", "4MiB", 4, 50, 5, 3, 2**26, "64", "1MiB", 16, 10, 3, 2),
    "full": Preset("4", "256MiB", 2, 200, 7, 10, 2**31, "8", "256MiB", 2, 20, 5, 5),
}


@dataclass
class Machine:
    gpus: int
    gpu_name: str
    cpus: int
    p2p_pairs: int            # ordered GPU pairs with peer access

    @property
    def label(self) -> str:
        return f"{self.gpus}x {self.gpu_name}" if self.gpus else f"CPU only, {self.cpus} cores"


def machine() -> Machine:
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    pairs = sum(torch.cuda.can_device_access_peer(i, j) for i in range(n) for j in range(n) if i != j) if n else 0
    return Machine(n, torch.cuda.get_device_name(0) if n else "", os.cpu_count() or 1, int(pairs))


def message_sizes(preset: Preset, scope: str = "copy", multiple_of: int = 1) -> list[int]:
    dec = copybench.decode_message_sizes()["size_bytes"].tolist()
    if scope == "copy":
        return copybench.sweep_sizes(preset.copy_min, preset.copy_max, preset.copy_factor, dec, multiple_of)
    return copybench.sweep_sizes(preset.coll_min, preset.coll_max, preset.coll_factor, dec, multiple_of)


@dataclass
class CollectivePlan:
    runs: list = field(default_factory=list)      # (backend, world_size, variant, note, Method)
    statements: list = field(default_factory=list)


def plan_collectives(m: Machine, world_size: int = 0, variants="all", nodes: int = 1) -> CollectivePlan:
    """Which collective sweeps this machine can run, and a plain statement for what it cannot. Each run
    is (backend, world_size, variant, note, method): EAGER_METHOD is the eager harness with CUDA events
    (the investigation's way); on two GPUs or more the default also runs, with every variant, by
    VARIANT_METHOD. Across `nodes` nodes (each assumed to have this machine's GPUs), see plan_nodes."""
    p = CollectivePlan()
    names = list(settings.VARIANTS) if variants == "all" else ([] if variants in ("none", "") else
                                                                [v.strip() for v in variants.split(",")])
    unknown = [v for v in names if v not in settings.VARIANTS]
    if unknown:
        raise collectives.CollectiveConfigError(
            f"nccl_variants: unknown variant(s) {unknown}; use 'all', 'none' or names from {list(settings.VARIANTS)}")
    if nodes > 1:
        return plan_nodes(m, world_size, names, nodes)
    if m.gpus >= 2:
        n = world_size or m.gpus
        if n > m.gpus:
            raise collectives.CollectiveConfigError(
                f"world_size = {n} is more ranks than the {m.gpus} GPUs here; use world_size <= {m.gpus} (0 = all)")
        p.runs.append(("nccl", n, "default", "one process per GPU, eager", EAGER_METHOD))
        if names:
            for v in (["default"] if "default" not in names else []) + names:
                p.runs.append(("nccl", n, v, "one process per GPU, variant sweep", VARIANT_METHOD))
            p.runs.append(("nccl", n, REPEAT_VARIANT, "the default again: the launch-to-launch spread",
                           VARIANT_METHOD))
    else:
        if m.gpus == 1:
            p.runs.append(("nccl", 1, "default", "one rank: the library floor, no data crosses a link", EAGER_METHOD))
            p.statements.append(
                "This machine has one GPU, so no collective crosses a GPU-to-GPU link and the NCCL variants "
                "(which change how data crosses links) have nothing to change: they are skipped. NCCL on one "
                "rank is measured to show the library's own floor; the CPU processes below show a real exchange.")
        else:
            p.statements.append(
                "This machine has no GPU: the collectives run with gloo between CPU processes (process to "
                "process through shared memory and sockets), not between GPUs, and the NCCL variants are skipped.")
        n = world_size or min(2, m.cpus)
        if n >= 2:
            p.runs.append(("gloo", n, "default", "CPU processes", EAGER_METHOD))
        else:
            p.statements.append("Only one CPU core: a two-process gloo exchange would time the scheduler; skipped.")
    return p


def plan_nodes(m: Machine, world_size: int, names: list[str], nodes: int) -> CollectivePlan:
    """The collective sweeps across `nodes` nodes: world_size ranks in all (0: one per GPU on every node,
    or one CPU process per node without a GPU), an equal share per node; NCCL where this node has a GPU
    (every variant too), gloo between CPU processes where it has none."""
    p = CollectivePlan()
    if world_size and world_size % nodes:
        raise collectives.CollectiveConfigError(
            f"world_size = {world_size} is not a multiple of nnodes = {nodes}: every node starts the same number of "
            f"processes; use a multiple of {nodes}, or 0 for one per GPU on every node")
    per = multinode.share(world_size, nodes, m.gpus)
    n = per * nodes
    where = f"{per} per node on {nodes} nodes"
    if m.gpus:
        if per > m.gpus:
            raise collectives.CollectiveConfigError(
                f"world_size = {world_size} puts {per} ranks on each node, more than the {m.gpus} GPU(s) here; use "
                f"world_size <= {m.gpus * nodes} (0 = one per GPU on every node)")
        p.runs.append(("nccl", n, "default", f"one process per GPU, {where}, eager", eager_method(nodes)))
        if names:
            vm = variant_method(nodes)
            for v in (["default"] if "default" not in names else []) + names:
                p.runs.append(("nccl", n, v, f"one process per GPU, {where}, variant sweep", vm))
            p.runs.append(("nccl", n, REPEAT_VARIANT, "the default again: the launch-to-launch spread", vm))
    else:
        p.runs.append(("gloo", n, "default", f"CPU processes, {where}", eager_method(nodes)))
        p.statements.append(
            "This node has no GPU: the collectives run with gloo between CPU processes on the nodes, over their "
            "network (or loopback where the nodes share a host), not between GPUs, and the NCCL variants are skipped.")
    p.statements.append(
        f"The collectives span {nodes} nodes through torchrun's rendezvous, {where} (every node is assumed to have "
        "this node's GPUs; a node that starts another count is refused), with every rank released by a barrier: the "
        "hosts share no clock for an aligned start. The copy sweep and the host-path study stay on this node.")
    return p


@dataclass
class SuiteResult:
    """What run_suite measured: the machine, what it could not run (statements), the wall time per part
    (timings_s: copies, collectives, total), the copy sweep and the paths/harnesses it skipped, every
    collective launch (collective_results, collectives.RunResult) with its tidy points and its run table,
    and the alpha-beta fits (the recorded VM's first). TABLES are the ones a chapter saves, by these names."""
    machine: Machine
    statements: list
    timings_s: dict
    copy_sweep: pd.DataFrame | None
    copy_skipped: pd.DataFrame | None
    collective_results: list
    collective_sweep: pd.DataFrame
    collective_runs: pd.DataFrame
    fits: pd.DataFrame

    TABLES = ("copy_sweep", "copy_skipped", "collective_sweep", "collective_runs", "fits")


def _save_tables(save: Callable[[str, pd.DataFrame], None] | None, tables: dict) -> None:
    for name, df in tables.items():
        if save is not None and df is not None:
            save(name, df)


def run_suite(preset: str | Preset = "quick", workdir: str | Path | None = None, world_size: int = 0,
              variants: str = "all", timeout_s: float = 180, progress: bool = False,
              do_copies: bool = True, do_collectives: bool = True, nodes: Nodes = Nodes(),
              save: Callable[[str, pd.DataFrame], None] | None = None) -> SuiteResult:
    """Measure everything this machine can; returns a SuiteResult. `workdir`: the folder where each
    collective launch keeps its finished points (a launch resumes from it); `save(name, table)`: called
    with each of SuiteResult.TABLES (the copy tables as soon as the copies are done, to keep them even if a
    collective launch later takes the process down, then every table at the end), e.g. a chapter's
    helpers.core.layout.Run.save. `nodes` (helpers.interconnect.nodes.Nodes): the collective sweeps span that
    many nodes, each launch through torchrun's rendezvous at nodes.endpoint, while every other node runs
    nodes.join_command(); each launch's limit is then `timeout_s` plus the time it may wait for the other
    nodes (nodes.join_timeout_s)."""
    pr = PRESETS[preset] if isinstance(preset, str) else preset
    t0 = time.perf_counter()
    m = machine()
    dec = copybench.decode_message_sizes()
    token_of = dict(zip(dec["size_bytes"], dec["tokens"]))
    statements, timings = [], {}
    cs = skipped = None
    if do_copies:
        cfg = copybench.CopyConfig(sizes=message_sizes(pr, "copy"), iters=pr.copy_iters, repeats=pr.copy_repeats,
                                   warmup=pr.copy_warmup, budget_bytes=pr.copy_budget)
        cs, skipped = copybench.run_copy_sweep(cfg, progress, token_of)
        _save_tables(save, {"copy_sweep": cs, "copy_skipped": skipped})
    timings["copies"] = time.perf_counter() - t0
    results = []
    if do_collectives:
        plan = plan_collectives(m, world_size, variants, nodes.count)
        statements += plan.statements
        results = _run_plan(plan, pr, workdir, timeout_s, progress, nodes)
    coll = collectives.tidy(results)
    runs = pd.DataFrame([r.summary() for r in results], columns=collectives.SUMMARY_COLUMNS)
    timings["collectives"] = time.perf_counter() - t0 - timings["copies"]
    fits = pd.concat([recorded_fit(), fit_table(cs, coll, m)], ignore_index=True)
    timings["total"] = time.perf_counter() - t0
    out = SuiteResult(m, statements, timings, cs, skipped, results, coll, runs, fits)
    _save_tables(save, {name: getattr(out, name) for name in SuiteResult.TABLES})
    return out


def _run_plan(plan: CollectivePlan, pr: Preset, workdir, timeout_s: float, progress: bool, nodes: Nodes) -> list:
    """Every launch of `plan`, resumed from `workdir`; a launch refused before it starts is a failed RunResult."""
    results = []
    it = plan.runs
    if progress:
        from tqdm.auto import tqdm
        it = tqdm(plan.runs, desc="collectives")
    for backend, n, variant, _note, method in it:
        sizes = message_sizes(pr, "collective", multiple_of=4)
        if backend == "gloo":  # CPU processes: large messages only add minutes
            sizes = [x for x in sizes if x <= GLOO_MAX_BYTES] or sizes[:1]
        try:
            results.append(collectives.resume_collectives(
                backend, n, sizes, variant=variant, env=settings.env("default" if variant == REPEAT_VARIANT else variant),
                warmup=pr.coll_warmup, iters=pr.coll_iters, repeats=pr.coll_repeats, timeout_s=timeout_s,
                workdir=Path(workdir) if workdir else None, method=method, nodes=nodes))
        except (collectives.CollectiveConfigError, MethodError, NodesError) as e:
            results.append(collectives.RunResult(variant, backend, n, "failed", None, 0.0, str(e), method=method))
    return results


# ------------------------------------------------------------------------------------------ fits
def _fit_row(sizes, times, **meta) -> dict:
    f = alphabeta.fit(sizes, times)
    return {**meta, "alpha_us": f.alpha_us, "beta_GBps": f.beta_GBps, "median_rel_err": f.median_rel_err,
            "max_rel_err": f.max_rel_err, "n_points": f.n_points, "min_bytes": int(f.min_bytes),
            "max_bytes": int(f.max_bytes)}


def recorded_copy_sweep() -> pd.DataFrame:
    """The original VM's GPU0->GPU1 copy sweep, with message sizes derived from tokens x hidden x 2 B."""
    rec = recorded.load("recorded/copy_sweep.csv")
    rec = rec[rec["tokens"].notna() & rec["latency_us"].notna()].copy()
    dec = copybench.decode_message_sizes()
    rec["size_bytes"] = rec["tokens"].astype(int).map(dict(zip(dec["tokens"], dec["size_bytes"])))
    rec["time_us"] = rec["latency_us"].astype(float)
    rec["bandwidth_GBps"] = rec["bandwidth_GBps"].astype(float)
    return rec[["path", "label", "tokens", "size_bytes", "time_us", "bandwidth_GBps", "source"]].reset_index(drop=True)


def recorded_device() -> str:
    hw = recorded.hardware()
    return f"recorded: original VM ({hw['gpu_count'].value}x {hw['gpu_model'].value}, P2P {hw['p2p_read_all_pairs'].value})"


def recorded_fit() -> pd.DataFrame:
    rec = recorded_copy_sweep()
    row = _fit_row(rec["size_bytes"], rec["time_us"], scope="copy", path=RECORDED_PATH, harness="eager",
                   method="eager", variant="n/a", backend="cuda", world_size=2, device=recorded_device(),
                   kind="derived: fit to recorded")
    return pd.DataFrame([row], columns=FIT_COLUMNS)


def fit_table(copy_sweep: pd.DataFrame | None, collective_sweep: pd.DataFrame | None, m: Machine | None = None) -> pd.DataFrame:
    """Alpha-beta fits per copy path x harness and per collective x variant x backend x world size."""
    rows = []
    if copy_sweep is not None and len(copy_sweep):
        for (path, harness), g in copy_sweep.groupby(["path", "harness"], sort=False):
            if harness not in ("eager", "graph") or g["size_bytes"].nunique() < 2:
                continue
            two = path in ("peer",) or (path == "host_bounce" and m is not None and m.gpus > 1)
            rows.append(_fit_row(g["size_bytes"], g["time_us"], scope="copy", path=path, harness=harness,
                                 method=harness, variant="default", backend="cpu" if path == "cpu_memcpy" else "cuda",
                                 world_size=2 if two else 1, device=g["device"].iloc[0], kind="measured"))
    if collective_sweep is not None and len(collective_sweep):
        keys = ["op", "method", "variant", "backend", "world_size"]
        for (op, method, variant, backend, n), g in collective_sweep.groupby(keys, sort=False):
            if g["size_bytes"].nunique() < 2:
                continue
            dev = g["device"].iloc[0]
            rows.append(_fit_row(g["size_bytes"], g["time_us"], scope="collective", path=op,
                                 harness=g["harness"].iloc[0], method=method, variant=variant, backend=backend, world_size=int(n),
                                 device=f"{n}x {dev}" if backend == "nccl" else f"{n} CPU processes",
                                 kind="measured"))
    return pd.DataFrame(rows, columns=FIT_COLUMNS)


# ------------------------------------------------------------------------------------------ variants
def variant_rows(sweep: pd.DataFrame) -> pd.DataFrame:
    """The NCCL all-reduce rows the variant comparison uses: those timed by VARIANT_METHOD (on the run's
    node count: variant_method) where the run has them, else (runs made before it existed) those timed by
    EAGER_METHOD. `sweep` is a tidy table
    with method columns (a run recorded before them: helpers.interconnect.recorded_labels.from_tidy)."""
    if "method" not in sweep.columns:
        raise MethodError("variant_rows needs the sweep's method columns (collectives.tidy writes them; map an "
                          "older table with helpers.interconnect.recorded_labels.from_tidy)")
    s = sweep[(sweep.backend == "nccl") & (sweep.op == "all_reduce")]
    counts = sorted({int(n) for n in s["nodes"].dropna()} or {1}) if "nodes" in s.columns else [1]
    graph = {variant_method(n).label for n in counts}
    if s.method.isin(graph).any():
        return s[s.method.isin(graph)]
    return s[s.method.isin({eager_method(n).label for n in counts})]


def best_variant(sweep: pd.DataFrame, sizes, exclude=()) -> pd.DataFrame:
    """Per decode size, the NCCL variant with the lowest all-reduce time (and the default's time),
    leaving out the variants named in `exclude`. A win is clear when the best variant's slow repeats
    (p90) beat the default's fast ones (p10) within their launches and, where the default was launched
    twice (REPEAT_VARIANT), the saving exceeds how far the default moved between its two launches
    (`launch_spread_us`; NaN where it was launched once)."""
    s = variant_rows(sweep)
    s = s[s.world_size > 1]
    rep = s[s.variant == REPEAT_VARIANT]
    s = s[(s.variant != REPEAT_VARIANT) & ~s.variant.isin(list(exclude))]
    rows = []
    for size in sizes:
        g = s[s.size_bytes == size]
        if not len(g):
            continue
        b = g.loc[g.time_us.idxmin()]
        d = g[g.variant == "default"]
        r = rep[rep.size_bytes == size]
        d_t = float(d.time_us.iloc[0]) if len(d) else np.nan
        spread = abs(float(r.time_us.iloc[0]) - d_t) if len(r) and len(d) else np.nan
        clear = bool(len(d)) and "time_us_p90" in g and float(b.time_us_p90) < float(d.time_us_p10.iloc[0])
        if np.isfinite(spread):
            clear = clear and (d_t - float(b.time_us)) > spread
        rows.append({"size_bytes": int(size), "best_variant": b.variant, "best_time_us": b.time_us,
                     "default_time_us": d_t, "launch_spread_us": spread, "clear_win": clear})
    return pd.DataFrame(rows, columns=["size_bytes", "best_variant", "best_time_us", "default_time_us",
                                       "launch_spread_us", "clear_win"])
