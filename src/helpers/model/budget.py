"""A decode-step latency budget: where the time of one decode step goes, and what changes it.

    time per step(batch) = (weight + KV bytes read per GPU) / memory bandwidth
                           + kernel-launch floor (kernels per step x time per kernel)
                           + sum over collectives of count x collective_time(message_size(batch))

Every input is a `Quantity` labelled measured, derived, assumed or reference (a public figure from
another machine), with where it came from. Collective time comes from an alpha-beta `Link`: either a
fit of the collective itself (used as is) or a fit of a point-to-point copy, mapped to a collective by
an explicit algorithm (`ring`, `tree`, `one_shot`; see `collective_time_us`).

`predict_all(model, fits)` builds the whole prediction table from data/ and a run's VM/P2P fits (`fits=None`:
the recorded inputs only, on purpose); `predict_from_run(run_dir)` does so from a run directory, so a
rendered run can be checked without re-measuring anything. Nothing here is fitted to the
observations the prediction is compared with.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from helpers.interconnect import fits as alphabeta
from helpers.model import arith as ma
from helpers.core import layout, recorded

KINDS = ("measured", "derived", "assumed", "reference")
ALGORITHMS = ("ring", "tree", "one_shot")
TERMS = ("memory_us", "launch_us", "comm_us")
TERM_NAMES = {"memory_us": "weight + KV reads", "launch_us": "kernel-launch floor",
              "comm_us": "collectives"}
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)
FITS_RELPATH = "results/06_vm_p2p/fits.csv"  # for labels only: helpers.core.layout owns the path


class BudgetError(ValueError):
    """An input to the budget is missing or unusable."""


@dataclass(frozen=True)
class Quantity:
    """One input of the budget, with its provenance."""

    name: str
    value: float
    unit: str
    kind: str      # measured | derived | assumed | reference
    source: str    # where and how

    def __post_init__(self):
        if self.kind not in KINDS:
            raise BudgetError(f"quantity '{self.name}': kind {self.kind!r} is not one of {KINDS}")
        if not (isinstance(self.value, (int, float)) and math.isfinite(self.value) and self.value > 0):
            raise BudgetError(f"quantity '{self.name}' = {self.value!r} {self.unit}: expected a positive number")


@dataclass(frozen=True)
class Link:
    """time(size) = alpha + size / beta, of a copy (`collective=False`) or of a collective itself."""

    name: str
    alpha_us: float
    beta_GBps: float
    kind: str
    source: str
    collective: bool = False      # True: a fit of the all-reduce itself; no algorithm mapping
    world_size: int | None = None  # for a collective fit: the GPUs it was measured on

    def __post_init__(self):
        if self.kind not in KINDS:
            raise BudgetError(f"link '{self.name}': kind {self.kind!r} is not one of {KINDS}")
        if not (self.alpha_us >= 0 and self.beta_GBps > 0):
            raise BudgetError(f"link '{self.name}': alpha {self.alpha_us} us must be >= 0 and "
                              f"beta {self.beta_GBps} GB/s > 0")

    def time_us(self, size_bytes):
        s = np.asarray(size_bytes, dtype=float)
        per_byte = 0.0 if math.isinf(self.beta_GBps) else 1.0 / (self.beta_GBps * 1e3)
        out = self.alpha_us + s * per_byte
        return float(out) if out.ndim == 0 else out

    @classmethod
    def from_fit(cls, name: str, f: alphabeta.Fit, kind: str, source: str, collective: bool = False,
                 world_size: int | None = None) -> "Link":
        return cls(name, f.alpha_us, f.beta_GBps, kind, source, collective, world_size)


def collective_time_us(link: Link, kind: str, size_bytes, n: int, algorithm: str = "ring"):
    """Time of one collective of `size_bytes` (the full message) over `n` GPUs.

    A collective fit (`link.collective`) is used as is. A copy fit t(s) = alpha + s/beta is mapped:
      ring      all-reduce: 2(n-1) sequential steps of t(S/n); all-gather: (n-1) steps of t(S/n)
      tree      all-reduce: reduce up and broadcast down a binary tree, 2 ceil(log2 n) steps of t(S)
                (unpipelined); all-gather as ring
      one_shot  every GPU reads the n-1 peers' buffers at once: alpha + (n-1) S / beta (one latency,
                the bytes through its own link); all-gather: alpha + (n-1) (S/n) / beta
    """
    if algorithm not in ALGORITHMS:
        raise BudgetError(f"algorithm {algorithm!r}: expected one of {ALGORITHMS}")
    if kind not in ("all_reduce", "all_gather"):
        raise BudgetError(f"collective kind {kind!r}: expected 'all_reduce' or 'all_gather'")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise BudgetError(f"n = {n!r}: expected a positive integer number of GPUs")
    s = np.asarray(size_bytes, dtype=float)
    if np.any(s <= 0):
        raise BudgetError(f"message size {size_bytes!r}: expected positive bytes")
    if n == 1:
        return 0.0 if s.ndim == 0 else np.zeros_like(s)
    if link.collective:
        return link.time_us(s)
    per_byte = 0.0 if math.isinf(link.beta_GBps) else 1.0 / (link.beta_GBps * 1e3)
    if kind == "all_gather":
        if algorithm == "one_shot":
            return link.alpha_us + (n - 1) * (s / n) * per_byte
        return (n - 1) * link.time_us(s / n)
    if algorithm == "ring":
        return 2 * (n - 1) * link.time_us(s / n)
    if algorithm == "tree":
        return 2 * math.ceil(math.log2(n)) * link.time_us(s)
    return link.alpha_us + (n - 1) * s * per_byte


# --------------------------------------------------------------------------------------------------
# Kernels per step (assumed: one kernel per operation, no fusion beyond what is listed)

ATTENTION_OPS = ("input rmsnorm", "fused q_a + kv_a projection", "q_a rmsnorm", "kv_a rmsnorm",
                 "q_b projection", "absorbed k (bmm)", "rope", "kv-cache store", "attention",
                 "absorbed v (bmm)", "o_proj", "all-reduce", "residual add + rmsnorm")
INDEXER_OPS = ("indexer wq_b", "indexer wk", "indexer k_norm", "indexer rope", "indexer weights_proj",
               "indexer key store", "index scores", "top-k")
DENSE_MLP_OPS = ("gate_up", "activation", "down", "all-reduce")
MOE_OPS = ("router", "top-k select", "shared gate_up", "shared activation", "shared down",
           "quantize input", "permute", "grouped gemm 1", "activation + quantize", "grouped gemm 2",
           "unpermute + reduce", "add shared", "all-reduce")
HEAD_OPS = ("embedding", "embedding all-reduce", "final rmsnorm", "lm_head", "logits all-gather",
            "sampling")


def kernel_table(m: ma.ModelConfig) -> pd.DataFrame:
    """Kernels per decode step, by layer kind (assumed op lists; see the *_OPS tuples)."""
    att = len(ATTENTION_OPS)
    if m.has_indexer:
        att += len(INDEXER_OPS)
    rows = [
        {"part": "dense layer", "layers": m.dense_layers, "kernels_per_layer": att + len(DENSE_MLP_OPS)},
        {"part": "MoE layer", "layers": m.moe_layers, "kernels_per_layer": att + len(MOE_OPS)},
        {"part": "embedding + head", "layers": 1, "kernels_per_layer": len(HEAD_OPS)},
    ]
    df = pd.DataFrame(rows)
    df["kernels"] = df["layers"] * df["kernels_per_layer"]
    return df


def kernels_per_step(m: ma.ModelConfig) -> int:
    return int(kernel_table(m)["kernels"].sum())


# --------------------------------------------------------------------------------------------------
# Scenario and step time


@dataclass(frozen=True)
class Scenario:
    """One way of running the model: parallel layout, memory bandwidth, link, launch mode."""

    name: str
    mem_bw: Quantity              # per GPU, GB/s
    link: Link
    launch_graph: Quantity        # us per kernel with CUDA graphs
    launch_eager: Quantity        # us per kernel without
    context: Quantity             # tokens of context per sequence during decode
    tp: int = 8
    pp: int = 1
    algorithm: str = "ring"
    cuda_graphs: bool = True
    note: str = ""
    extra: tuple = field(default_factory=tuple)   # more Quantities shown in the inputs table

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    def inputs(self) -> list[Quantity]:
        q = [self.mem_bw, self.launch_graph if self.cuda_graphs else self.launch_eager, self.context]
        return q + list(self.extra)


def _check_batch(batch) -> int:
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise BudgetError(f"batch = {batch!r}: expected a positive integer number of sequences "
                          f"decoding together (1 = a single stream)")
    return int(batch)


def step_terms(m: ma.ModelConfig, sc: Scenario, batch: int, prefill_tokens: int = 0) -> dict:
    """The budget's terms (microseconds) for one decode step of `batch` sequences.

    `prefill_tokens`: prompt tokens processed in the same step (a mixed batch); they add to the
    experts touched and to the collective message size, not to the KV reads or the kernel count.

    With pipeline parallelism (pp > 1) the batch is split into pp micro-batches; each stage holds
    layers/pp layers on tp GPUs; a step is pp stage-times (every micro-batch passes every stage) plus
    the activations sent between stages."""
    b = _check_batch(batch)
    ma.check_tp(m, sc.tp)
    if sc.pp < 1 or m.layers % sc.pp:
        raise BudgetError(f"pp = {sc.pp} must be a positive divisor of the {m.layers} layers")
    if sc.algorithm not in ALGORITHMS:
        raise BudgetError(f"scenario '{sc.name}': algorithm {sc.algorithm!r} not one of {ALGORITHMS}")
    pp, tp = sc.pp, sc.tp
    if isinstance(prefill_tokens, bool) or not isinstance(prefill_tokens, (int, np.integer)) or prefill_tokens < 0:
        raise BudgetError(f"prefill_tokens = {prefill_tokens!r}: expected a non-negative integer")
    mb = math.ceil(b / pp)
    mt = mb + math.ceil(prefill_tokens / pp)   # tokens through the layers per micro-batch
    w = ma.step_weight_bytes(m, mt)
    per_gpu = float(sum(r.read_bytes / (tp if r.tp_placement == "sharded" else 1) for r in w.itertuples()))
    kv = ma.kv_read_bytes(m, mb, int(sc.context.value))
    stage_bytes = (per_gpu + kv) / pp
    bw_bytes_per_us = sc.mem_bw.value * 1e3
    memory = stage_bytes / bw_bytes_per_us
    per_kernel = (sc.launch_graph if sc.cuda_graphs else sc.launch_eager).value
    launch = kernels_per_step(m) / pp * per_kernel
    comm = 0.0
    for c in ma.collective_schedule(m):
        tokens = mb if c.kind == "all_gather" else mt   # logits only for the decoding sequences
        comm += c.per_step / pp * collective_time_us(sc.link, c.kind, tokens * c.bytes_per_token, tp,
                                                     sc.algorithm)
    send = 0.0
    if pp > 1:  # one point-to-point send of the micro-batch's activations out of every stage but the last
        send = (pp - 1) / pp * sc.link.time_us(mt * m.hidden * 2) if not sc.link.collective else \
            (pp - 1) / pp * sc.link.alpha_us
    out = {"memory_us": pp * memory, "launch_us": pp * launch, "comm_us": pp * (comm + send),
           "bytes_per_gpu": pp * stage_bytes, "kernels": kernels_per_step(m),
           "collectives": ma.collectives_per_step(m)}
    out["total_us"] = out["memory_us"] + out["launch_us"] + out["comm_us"]
    return out


def predict(m: ma.ModelConfig, sc: Scenario, batches: Sequence[int] = DEFAULT_BATCHES,
            prefill_ratio: float = 0.0) -> pd.DataFrame:
    """Predicted step time, its terms and shares, and tokens/s per stream and in aggregate.

    `prefill_ratio`: prompt tokens per output token of the workload (input_len / output_len); each
    step of batch b then carries round(b x ratio) prompt tokens (steady state). 0: pure decode."""
    if not (isinstance(prefill_ratio, (int, float)) and prefill_ratio >= 0):
        raise BudgetError(f"prefill_ratio = {prefill_ratio!r}: expected a number >= 0")
    rows = []
    for b in batches:
        t = step_terms(m, sc, b, int(round(_check_batch(b) * prefill_ratio)))
        total = t["total_us"]
        row = {"scenario": sc.name, "link": sc.link.name, "link_kind": sc.link.kind,
               "algorithm": "measured collective" if sc.link.collective else sc.algorithm,
               "gpus": sc.gpus, "tp": sc.tp, "pp": sc.pp, "cuda_graphs": sc.cuda_graphs,
               "prefill_ratio": prefill_ratio, "batch": b}
        row.update({k: t[k] for k in TERMS})
        row["total_ms"] = total / 1e3
        for k in TERMS:
            row["share_" + k[:-3]] = t[k] / total
        row["tok_s_per_stream"] = 1e6 / total
        row["tok_s_aggregate"] = b * 1e6 / total
        rows.append(row)
    return pd.DataFrame(rows)


def dominant_term(row) -> str:
    shares = {k: row["share_" + k[:-3]] for k in TERMS}
    return TERM_NAMES[max(shares, key=shares.get)]


def verdict(table: pd.DataFrame) -> str:
    """One sentence naming the dominant term at the smallest and largest batch of one scenario."""
    if table["scenario"].nunique() != 1:
        raise BudgetError("verdict() takes the prediction table of one scenario")
    lo, hi = table.loc[table["batch"].idxmin()], table.loc[table["batch"].idxmax()]
    a, b = dominant_term(lo), dominant_term(hi)
    s_lo = max(lo["share_" + k[:-3]] for k in TERMS)
    s_hi = max(hi["share_" + k[:-3]] for k in TERMS)
    second = f"still at batch {int(hi['batch'])}" if a == b else f"{b} at batch {int(hi['batch'])}"
    return (f"{table['scenario'].iloc[0]}: {a} dominate at batch {int(lo['batch'])} "
            f"({s_lo:.0%} of the step) and {second} ({s_hi:.0%}).")


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
    return Quantity("prompt tokens per output token", int(r["input_len"]) / int(r["output_len"]), "ratio",
                    "derived", "recorded sweep_256_256: input_len / output_len")


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
    """Alpha-beta fit of the recorded GPU-to-GPU copy sweep on the original VM (measured there).

    Sizes are derived from the token counts: tokens x hidden x 2 bytes."""
    df = tokens_of_copy_sweep(recorded.load("recorded/copy_sweep.csv"))
    df = df[df["path"] == "gpu0_to_gpu1"]
    sizes = ma.allreduce_bytes(m, df["tokens"].astype(int).to_numpy())
    f = alphabeta.fit(sizes, df["latency_us"].astype(float).to_numpy())
    pts = pd.DataFrame({"tokens": df["tokens"].astype(int).to_numpy(), "size_bytes": sizes,
                        "latency_us": df["latency_us"].astype(float).to_numpy(),
                        "fit_us": f.time_us(sizes)})
    link = Link.from_fit("VM copy (recorded)", f, "measured",
                         "recorded copy sweep, GPU0->GPU1 on the original VM (P2P NS); alpha-beta fit")
    return link, pts


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
                         f"{int(f.min_bytes)}-{int(f.max_bytes)} B, extrapolated beyond",
                         collective=True, world_size=gpus)


def reference_p2p_link(vm_link: Link) -> Link:
    """Copy latency with P2P enabled (reference, midpoint of its range) and, for lack of a bare-metal
    bandwidth figure, the VM fit's bandwidth (assumed stand-in)."""
    df = recorded.load("reference/baremetal.csv")
    r = df[(df["metric"] == "p2p_latency") & df["system"].str.contains("with P2P")].iloc[0]
    mid = (float(r["value_low"]) + float(r["value_high"])) / 2 if pd.isna(r["value"]) else float(r["value"])
    return Link("P2P copy (reference latency)", mid, vm_link.beta_GBps, "reference",
                f"{r['source']}: {r['note']}; bandwidth from the VM fit (assumed stand-in)")


def read_fits(run_dir: str | Path) -> pd.DataFrame | None:
    """The run's VM/P2P fits (helpers.core.layout checks their columns), or None when the run has none."""
    return layout.load_if_present(run_dir, "06_vm_p2p", "fits")


def select_run_link(fits: pd.DataFrame) -> Link | None:
    """The link a run measured, chosen by the fit table's fields: among rows with kind 'measured', an
    all-reduce fit first (scope 'collective', path 'all_reduce': used as a collective), else a copy fit;
    then NCCL before other backends, the default variant first, the CUDA-graph harness before the eager one
    (the decode step runs its all-reduces inside CUDA graphs, and the budget counts launches in a term of
    its own), the larger world size, the smaller median relative error. None if nothing usable. The link's
    source names the fit's method label (the `method` column the VM/P2P chapter writes)."""
    df = fits[fits["kind"].astype(str) == "measured"]
    df = df[pd.to_numeric(df["alpha_us"], errors="coerce").notna()
            & (pd.to_numeric(df["beta_GBps"], errors="coerce") > 0)]
    if not len(df):
        return None
    df = df.assign(_ar=(df["scope"] == "collective") & (df["path"] == "all_reduce"),
                   _nccl=df["backend"] == "nccl", _default=df["variant"] == "default", _graph=df["harness"] == "graph",
                   _ws=pd.to_numeric(df["world_size"], errors="coerce").fillna(0),
                   _err=pd.to_numeric(df["median_rel_err"], errors="coerce").fillna(1e9))
    df = df.sort_values(["_ar", "_nccl", "_default", "_graph", "_ws", "_err"],
                        ascending=[False, False, False, False, False, True], kind="stable")
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
    ratio = workload_prefill_ratio().value
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


# --------------------------------------------------------------------------------------------------
# Observations


def observations() -> pd.DataFrame:
    """Output tokens/s at concurrency 1 and 64: the original VM (recorded) and bare metal (reference)."""
    s = recorded.load("recorded/serving.csv")
    s = s[(s["metric"] == "output_throughput") & s["concurrency"].isin([1, 64]) & (s["experiment"] != "target")]
    vm = pd.DataFrame({"system": "original VM", "kind": "recorded", "experiment": s["experiment"],
                       "concurrency": s["concurrency"].astype(int), "value": s["value"],
                       "value_low": s["value_low"], "value_high": s["value_high"],
                       "approx": s["approx"], "source": s["source"], "note": s["note"]})
    b = recorded.load("reference/baremetal.csv")
    b = b[(b["metric"] == "output_throughput") & b["concurrency"].isin([1, 64])]
    bm = pd.DataFrame({"system": b["system"], "kind": "reference", "experiment": "community bare metal",
                       "concurrency": b["concurrency"].astype(int), "value": b["value"],
                       "value_low": b["value_low"], "value_high": b["value_high"],
                       "approx": b["approx"], "source": b["source"], "note": b["note"]})
    out = pd.concat([vm, bm], ignore_index=True)
    out["mid"] = out["value"].fillna((out["value_low"] + out["value_high"]) / 2).astype(float)
    return out


def primary_observations() -> pd.DataFrame:
    """One observed figure per (system, concurrency), chosen by rule, with the spread of the others.

    Rule: the original VM's figure is the best-configuration sweep (sweep_256_256, exact values);
    bare metal's is the cutlass MoE runner (the runner the VM used). The spread is min..max of every
    figure for that system and concurrency."""
    o = observations()
    rows = []
    for (vm, c), g in o.groupby([o["kind"] == "recorded", "concurrency"]):
        if vm:
            p = g[g["experiment"] == "sweep_256_256"]
            system = "original VM"
        else:
            p = g[g["system"].str.contains("cutlass")]
            system = "bare metal (reference)"
        if not len(p):
            continue
        rows.append({"system": system, "concurrency": int(c), "observed": float(p["mid"].iloc[0]),
                     "observed_min": float(g[["mid", "value_low"]].min().min()),
                     "observed_max": float(g[["mid", "value_high"]].max().max()),
                     "n_figures": len(g), "source": p["source"].iloc[0]})
    return pd.DataFrame(rows)


def compare(pred: pd.DataFrame, vm_scenario: str = VM_SCENARIO, bm_scenario: str = BAREMETAL_SCENARIO,
            model: str = "glm5", prefill_ratio: float = 0.0, tolerance: float = 0.25) -> pd.DataFrame:
    """Predicted vs observed at concurrency 1 (tokens/s per stream) and 64 (aggregate), both systems.

    `prefill_ratio` selects the prediction rows (0: pure decode; the workload's ratio: mixed steps).
    `missing_us_per_collective` is what each collective would have to add to close the gap (derived)."""
    obs = primary_observations()
    n_coll = ma.collectives_per_step(ma.load_model(model))
    out = []
    for r in obs.itertuples():
        scen = vm_scenario if r.system == "original VM" else bm_scenario
        p = pred[(pred["scenario"] == scen) & (pred["batch"] == r.concurrency)
                 & np.isclose(pred["prefill_ratio"].astype(float), prefill_ratio)]
        if not len(p):
            raise BudgetError(f"the prediction table has no row for scenario {scen!r} at batch {r.concurrency}")
        p = p.iloc[0]
        predicted = float(p["tok_s_aggregate"])
        obs_step_ms = r.concurrency / r.observed * 1e3
        rel = (predicted - r.observed) / r.observed
        out.append({"system": r.system, "concurrency": r.concurrency, "scenario": scen,
                    "observed_tok_s": r.observed, "observed_min": r.observed_min, "observed_max": r.observed_max,
                    "predicted_tok_s": predicted, "rel_err": rel, "within_tolerance": abs(rel) <= tolerance,
                    "observed_step_ms": obs_step_ms, "predicted_step_ms": float(p["total_ms"]),
                    "missing_ms": obs_step_ms - float(p["total_ms"]),
                    "missing_us_per_collective": (obs_step_ms - float(p["total_ms"])) * 1e3 / n_coll})
    return pd.DataFrame(out)


# --------------------------------------------------------------------------------------------------
# The investigation's open next steps, ranked by the gain the budget predicts

#: keyword in the step's text -> (scenario that models it or None, how)
NEXT_STEP_MODEL = (
    ("NCCL tuning", None, "acts on the collectives' unexplained cost, which the budget has no term for"),
    ("bare-metal", BAREMETAL_SCENARIO, "bare metal with P2P: the reference all-reduce"),
    ("fewer GPUs", TP4_SCENARIO, "TP4 on four of the GPUs"),
    ("IOMMU", BAREMETAL_SCENARIO, "passthrough that enables P2P: modelled as the reference all-reduce"),
    ("NCCL_ALGO", "VM, tree mapping", "tree instead of ring over the same copy latency"),
    ("Profile", None, "a measurement: it would supply the missing term, not a speed-up"),
    ("TP4+PP2", PP_SCENARIO, "two pipeline stages of TP4"),
    ("CUDA 13.1", None, "kernel speed, which the budget does not model"),
)


def rank_next_steps(pred: pd.DataFrame, fits_on_gpus: dict[str, bool] | None = None,
                    base: str = VM_SCENARIO) -> pd.DataFrame:
    """data/recorded/next_steps.csv with the predicted speed-up over `base` at batch 1 and at the
    largest batch, ranked by the batch-1 gain (steps the budget cannot price last).

    `fits_on_gpus`: scenario -> whether its weights fit; a scenario that does not fit gains nothing."""
    steps = recorded.load("recorded/next_steps.csv")
    fits_on_gpus = fits_on_gpus or {}
    pure = pred[np.isclose(pred["prefill_ratio"].astype(float), 0.0)]
    bmax = int(pure["batch"].max())

    def tok(scen, b, col):
        r = pure[(pure["scenario"] == scen) & (pure["batch"] == b)]
        return float(r[col].iloc[0]) if len(r) else float("nan")

    rows = []
    for s in steps.itertuples():
        match = [(k, sc, how) for k, sc, how in NEXT_STEP_MODEL if k.lower() in s.step.lower()]
        if not match:
            raise BudgetError(f"data/recorded/next_steps.csv step {s.order} ({s.step!r}) contains none of the "
                              f"keywords of helpers.model.budget.NEXT_STEP_MODEL {[k for k, _, _ in NEXT_STEP_MODEL]}; "
                              "add the step there (with the scenario that models it, or None)")
        k, sc, how = match[0]
        g1 = gmax = float("nan")
        feasible = True
        if sc is not None:
            feasible = fits_on_gpus.get(sc, True)
            g1 = tok(sc, 1, "tok_s_per_stream") / tok(base, 1, "tok_s_per_stream")
            gmax = tok(sc, bmax, "tok_s_aggregate") / tok(base, bmax, "tok_s_aggregate")
            if not feasible:
                how += " (the weights do not fit: no gain)"
                g1 = gmax = 0.0
        rows.append({"order": s.order, "step": s.step, "category": s.category, "status": s.status,
                     "modelled_as": sc or "not modelled", "how": how,
                     "gain_batch1": g1, f"gain_batch{bmax}": gmax, "source": s.source})
    df = pd.DataFrame(rows)
    df = df.sort_values("gain_batch1", ascending=False, na_position="last", kind="stable")
    df.insert(0, "rank", range(1, len(df) + 1))
    return df.reset_index(drop=True)
