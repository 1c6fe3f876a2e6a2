"""The verdict: every prediction with its band, the VM predicted scenario by scenario, the share of the
VM's loss each scenario explains, the decision rule that would settle it, and the remedies ranked.

Nothing here is fitted to an observation it is checked against. The inputs:

* **Compute, measured**: aiconfigurator's SGLang 0.5.14 kernels timed on the recorded GPU (8x RTX PRO
  6000 Blackwell Server Edition), composed on GLM-5's op list (helpers.model.measured.kernel_terms), with
  the graph-replay floor measured on this run's GPU for the small operations.
* **Uncertain inputs, each a stated range** (`data/reference/prediction_ranges.csv`, with its reason and
  source, plus two derived here): expert routing (aiconfigurator's power law to uniform), the attention
  kernel (its roofline to the measured stand-in), the indexer on bare metal (skipped by the dense path or
  priced), the shared expert's hidden fraction (measured in the decode-step study, its spread over batch,
  context and precision), per-step CPU time (0 to the overlap scheduler's gain), the bare-metal
  collectives (aiconfigurator's NCCL table to the fastest the community's latency and P2P bandwidth
  allow) and, on the VM at
  nominal concurrency 64, the decode batch (the recorded achieved concurrency to the nominal).
* **The VM's collectives, one scenario per model with evidence behind it** (`host_path_scenarios`): the
  recorded two-GPU copy mapped by ring, tree and one-shot (band: the fit's 90 % confidence), NCCL's own
  cost model for an 8-rank shared-memory ring (helpers.interconnect.ncclmodel), the two-GPU host-path
  all-reduces in hand scaled to eight ranks (ring steps; band: tree to ring), this run's host-path study
  where it has one, and an all-reduce measured on a VM where the reader gives one.

The band: `SAMPLES` draws (seeded, `SEED`) of every input at once, each from its own distribution (a
triangular one through low, mid and high unless the table says otherwise), and of every scenario's
quantile; 5-95 % of the resulting tokens/s. The point prediction takes every input at its mid.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np
import pandas as pd

from helpers.core import recorded
from helpers.model import arith as ma
from helpers.model import budget as bd
from helpers.model import kernels as kt
from helpers.model import measured as mb

SEED = 20261201
SAMPLES = 4000
BAND = (5, 95)
VM, BARE = "original VM", "bare metal (reference)"
TP = mb.TP
#: the batch grid the nominal-64 softness is interpolated on (kernel tables are priced at each point)
SOFT_GRID = (35, 42, 49, 56, 64)
#: the decision rule's shares: at least this much for "explains", at most this much for "cannot explain"
EXPLAINS, CANNOT = 0.80, 0.25
#: the command that measures the missing term on a reader's own VM (the decision rule's sizes)
MEASURE_COMMANDS = (
    "make run TARGET=vm-emulation",
    "mpirun -np 8 ./build/all_reduce_perf -b 12288 -e 786432 -f 4 -g 1 -n 200 -w 50",
)


class VerdictInputError(ValueError):
    """An input of the verdict that is missing, contradictory or out of range; the message names it."""


# -------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class Range:
    """One uncertain input: its range, how it is drawn, and why it is what it is."""

    name: str
    system: str
    low: float
    mid: float
    high: float
    unit: str
    distribution: str = "triangular"     # triangular | uniform | fixed
    kind: str = "assumed"
    source: str = ""
    why: str = ""

    def __post_init__(self):
        where = f"input '{self.name}' ({self.system})"
        vals = (self.low, self.mid, self.high)
        if not all(isinstance(v, (int, float, np.floating)) and math.isfinite(float(v)) for v in vals):
            raise VerdictInputError(f"{where}: low, mid and high must be finite numbers, got {vals}; fix its "
                                    f"row in data/reference/prediction_ranges.csv")
        if not self.low <= self.mid <= self.high:
            raise VerdictInputError(f"{where}: expected low <= mid <= high, got {vals}; fix its row in "
                                    f"data/reference/prediction_ranges.csv")
        if self.distribution not in ("triangular", "uniform", "fixed"):
            raise VerdictInputError(f"{where}: distribution {self.distribution!r} is not triangular, uniform or fixed")
        if self.distribution == "fixed" and self.low != self.high:
            raise VerdictInputError(f"{where}: a fixed input needs low == high, got {vals}")

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.low == self.high:
            return np.full(n, float(self.mid))
        if self.distribution == "uniform":
            return rng.uniform(self.low, self.high, n)
        return rng.triangular(self.low, self.mid, self.high, n)

    def row(self) -> dict:
        return {"input": self.name, "system": self.system, "low": self.low, "mid": self.mid, "high": self.high,
                "unit": self.unit, "drawn": self.distribution, "kind": self.kind, "source": self.source,
                "why": self.why}


#: the inputs every prediction draws (name -> the systems it must be given for)
INPUTS = ("routing_skew", "attention_kernel", "indexer", "shared_hidden", "cpu_step_fraction",
          "collective_spread", "batch_at_nominal_64")


def table_ranges(table: pd.DataFrame | None = None) -> list[Range]:
    """The ranges of data/reference/prediction_ranges.csv (or of `table`, the same columns), checked."""
    t = recorded.load("reference/prediction_ranges.csv") if table is None else table
    out = []
    for r in t.itertuples(index=False):
        try:
            vals = [float(r.low), float(r.mid), float(r.high)]
        except (TypeError, ValueError) as e:
            raise VerdictInputError(f"input '{r.input}' ({r.system}): low/mid/high {r.low!r}, {r.mid!r}, "
                                    f"{r.high!r} are not numbers ({e})") from None
        out.append(Range(str(r.input), str(r.system), *vals, str(r.unit), str(r.distribution), str(r.kind),
                         str(r.source), str(r.why)))
    return out


def overlap_fractions(study: mb.PrecisionStudy) -> pd.DataFrame:
    """The share of the shared expert's time the second stream hid, per precision, batch and context:
    (step with the shared expert on one stream - step with it beside the routed experts) / the shared
    expert's own ops (gate_up, activation, down, and its FP8 quantization), all measured with graphs."""
    t = study.timings
    rows = []
    for (dtype, b, ctx), _ in t[t["what"] == "step"].groupby(["dtype", "batch", "context"]):
        try:
            on = float(study.row(dtype, int(b), int(ctx), "step", overlap=True)["median_us"])
            off = float(study.row(dtype, int(b), int(ctx), "step", overlap=False)["median_us"])
        except mb.MeasuredBudgetError:
            continue
        ops = t[(t["dtype"] == dtype) & (t["batch"] == b) & (t["context"] == ctx) & (t["mode"] == "graph")
                & t["what"].astype(str).str.startswith("op:shared") & t["overlap"].astype(bool)]
        ops = ops[ops["what"].astype(str).str.contains("shared")]
        if not len(ops):
            continue
        shared = float(ops["median_us"].sum())
        rows.append({"dtype": dtype, "batch": int(b), "context": int(ctx), "saved_us": off - on,
                     "shared_us": shared, "hidden_fraction": min(1.0, max(0.0, (off - on) / shared))})
    if not rows:
        raise VerdictInputError(f"{study.where}: no batch with the step timed both with the shared expert "
                                f"overlapped and not; the hidden fraction cannot be measured")
    return pd.DataFrame(rows)


def overlap_range(study: mb.PrecisionStudy | None) -> Range:
    """The shared expert's hidden fraction (measured): median and spread of overlap_fractions."""
    if study is None:
        raise VerdictInputError("no decode-step study with the shared expert overlapped and not (role "
                                f"{mb.PRECISION_ROLE}); register one under data/measured/ or run the decode-step "
                                "chapter on a GPU with fp8 and shared_overlap on")
    f = overlap_fractions(study)["hidden_fraction"]
    return Range("shared_hidden", "all", float(f.min()), float(f.median()), float(f.max()), "fraction",
                 "triangular", "measured", study.where,
                 f"The share of the shared expert's time hidden beside the routed experts, measured on "
                 f"{study.device} over {len(f)} batch, context and precision points (min, median, max)")


def collective_range() -> Range:
    """Bare-metal collectives between the evidence's two ends, as a fraction x of the way from the fastest
    the public figures allow (0) to aiconfigurator's NCCL table (1, the point estimate): an 8-GPU all-reduce
    costs lo + x (table - lo), lo = the community's small-message 8-GPU latency plus the ring's bytes at the
    one-way P2P bandwidth (`bare_floor_us`)."""
    lat, bw = _bare_evidence()
    return Range("collective_spread", "bare metal", 0.0, 1.0, 1.0, "fraction", "triangular", "reference",
                 "rtx6kpro-pcie",
                 f"NCCL over 8 GPUs with P2P: aiconfigurator's table (1, measured on its collection host, the point "
                 f"estimate) against the fastest the public figures allow (0): the community's {lat:.0f} us 8-GPU "
                 f"latency plus the ring's 2(n-1)/n of the message at {bw:.0f} GB/s one-way P2P")


def _bare_evidence() -> tuple[float, float]:
    """(8-GPU all-reduce latency us, one-way P2P bandwidth GB/s) on bare metal, from baremetal.csv."""
    ref = recorded.load("reference/baremetal.csv")
    lat = ref[(ref["metric"] == "allreduce_time") & (ref["gpus"] == TP)]
    bw = ref[ref["metric"] == "p2p_bandwidth"]
    if not len(lat) or not len(bw):
        raise VerdictInputError("data/reference/baremetal.csv needs an 8-GPU allreduce_time row and a p2p_bandwidth "
                                "row: the bare-metal collective range is built from them")
    return float(lat["value"].min()), float(bw["value"].iloc[0])


def bare_floor_us(kind: str, size: float, table_us: float, ranks: int = TP) -> float:
    """The fastest collective the public bare-metal figures allow (never above the table's own time)."""
    lat, bw = _bare_evidence()
    steps = (2 if kind == "all_reduce" else 1) * (ranks - 1) / ranks
    return min(table_us, lat + steps * size / (bw * 1e3))


@dataclass(frozen=True)
class Inputs:
    """Every uncertain input, by (name, system); `get` falls back from a system to 'all'."""

    ranges: tuple[Range, ...]

    def get(self, name: str, system: str) -> Range:
        key = "bare metal" if system == BARE else system
        for want in (key, "all"):
            for r in self.ranges:
                if r.name == name and r.system == want:
                    return r
        raise VerdictInputError(f"no range for input '{name}' on {system!r}: add a row to "
                                f"data/reference/prediction_ranges.csv (systems: all, bare metal, original VM)")

    def table(self) -> pd.DataFrame:
        return pd.DataFrame([r.row() for r in self.ranges])

    def check(self) -> "Inputs":
        for name in INPUTS:
            for system in (BARE, VM):
                if name == "collective_spread" and system == VM:
                    continue
                self.get(name, system)
        return self


def inputs(study: mb.PrecisionStudy | None, table: pd.DataFrame | None = None) -> Inputs:
    """The table's ranges, the measured overlap and the derived collective range, checked complete."""
    return Inputs(tuple(table_ranges(table)) + (overlap_range(study), collective_range())).check()


# -------------------------------------------------------------------------------------------- compute
@dataclass(frozen=True)
class Parts:
    """One rank's decode step at one batch on the recorded GPU, split where an input acts (us per step)."""

    batch: int
    fixed: float              # everything not listed below (projections, norms, dense MLP, head, ...)
    attention_standin: float  # the measured dense MLA decode kernel, every layer
    attention_roofline: float  # the KV cache read at datasheet bandwidth + one graph floor, every layer
    indexer: float
    router: float
    shared: float             # the shared expert's two GEMMs, every MoE layer
    routed_power: float       # the fused MoE kernel, aiconfigurator's power-law routing (alpha 1.01)
    routed_uniform: float     # the same, uniform routing
    routed_skewed: float      # the same, its more skewed power law (alpha 1.2)
    collectives: tuple        # (name, kind, per step, message bytes, bare-metal us each)


@lru_cache(maxsize=64)
def _parts(model: str, batch: int, context: int, floor_us: float) -> Parts:
    m = ma.load_model(model)
    pw = mb.kernel_terms(m, batch, context, floor_us, distribution=kt.AIC_DISTRIBUTION, overlap_shared=False)
    un = mb.kernel_terms(m, batch, context, floor_us, distribution="balanced", overlap_shared=False)
    sk = mb.kernel_terms(m, batch, context, floor_us, distribution="power_law_1.2", overlap_shared=False)
    op = lambda t, name: float(t.loc[t["op"] == name, "us_step"].sum())  # noqa: E731
    routed = "routed experts (fused MoE kernel)"
    coll = pw[pw["component"] == "collectives"]
    sched = {c.name: c for c in ma.collective_schedule(m)}
    colls = tuple((r.op, sched[r.op].kind, int(r["count"]), batch * sched[r.op].bytes_per_token, float(r.us_each))
                  for _, r in coll.iterrows())
    indexer = float(pw.loc[pw["component"] == "indexer", "us_step"].sum())
    core = op(pw, "attention")
    kv = batch * context * (m.kv_lora_rank + m.qk_rope_head_dim) * ma.FORMATS[m.fmt("kv_cache")]["bytes_per_value"]
    roof = m.layers * (kv / (mb.gpu_bandwidth(kt.RTX).value * 1e3) + floor_us)
    fixed = float(pw["us_step"].sum()) - indexer - core - op(pw, routed) - float(coll["us_step"].sum())
    return Parts(batch, fixed, core, roof, indexer, op(pw, "router"), op(pw, "shared expert (gate_up + down)"),
                 op(pw, routed), op(un, routed), op(sk, routed), colls)


def parts(model: str, batch: int, context: int, floor_us: float) -> Parts:
    return _parts(model, int(batch), int(context), round(float(floor_us), 6))


def routed_us(p: Parts, skew) -> np.ndarray:
    """The routed experts' kernel at routing `skew`: 0 aiconfigurator's power law (alpha 1.01), toward 1
    uniform, toward -1 its more skewed power law (alpha 1.2), linearly between the measured tables."""
    u = np.asarray(skew, dtype=float)
    return np.where(u >= 0, p.routed_power + u * (p.routed_uniform - p.routed_power),
                    p.routed_power - u * (p.routed_skewed - p.routed_power))


def compute_us(p: Parts, draw: dict) -> np.ndarray:
    """The step's compute (no collectives, no CPU time) for each draw of the inputs."""
    routed = routed_us(p, draw["routing_skew"])
    att = p.attention_roofline + draw["attention_kernel"] * (p.attention_standin - p.attention_roofline)
    hidden = draw["shared_hidden"] * np.minimum(p.shared, p.router + routed)
    return p.fixed + att + draw["indexer"] * p.indexer + routed - hidden


def bare_collectives_us(p: Parts, draw: dict) -> np.ndarray:
    x = draw["collective_spread"]
    total = 0.0
    for _, kind, n, size, us in p.collectives:
        lo = bare_floor_us(kind, size, us)
        total = total + n * (lo + x * (us - lo))
    return total


# -------------------------------------------------------------------------------------------- host path
@dataclass(frozen=True)
class HostPath:
    """One model of an all-reduce through host memory over `ranks` GPUs, with the evidence behind it.
    `allreduce(bytes, ranks)` returns (low, mid, high) us; an all-gather costs half an all-reduce of the
    same gathered size (a ring's n-1 steps against 2(n-1), each moving 1/n of the message)."""

    key: str
    label: str
    evidence: str
    kind: str
    allreduce: Callable[[np.ndarray, int], tuple]

    def time(self, kind: str, size, ranks: int = TP) -> tuple:
        lo, mid, hi = (np.asarray(v, dtype=float) for v in self.allreduce(np.asarray(size, dtype=float), ranks))
        f = 0.5 if kind == "all_gather" else 1.0
        return f * lo, f * mid, f * hi


def _at(lo, mid, hi, q):
    """The value at quantile q of a scenario's band: uniform on low..mid below 0.5, on mid..high above."""
    q = np.asarray(q, dtype=float)
    return np.where(q < 0.5, lo + (mid - lo) * 2 * q, mid + (hi - mid) * (2 * q - 1))


def _ols(x: np.ndarray, y: np.ndarray):
    """Least squares y = a + b x, with the standard error of the fitted mean at any x and Student's t at
    90 % two-sided for its degrees of freedom."""
    n = len(x)
    X = np.column_stack([np.ones(n), x])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ coef
    dof = max(1, n - 2)
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.inv(X.T @ X)
    t90 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015}.get(dof, 1.645 + 2.5 / dof)
    se = lambda xs: np.sqrt(cov[0, 0] + 2 * cov[0, 1] * xs + cov[1, 1] * xs ** 2)  # noqa: E731
    return coef, se, t90


def copy_scenarios(m: ma.ModelConfig) -> list[HostPath]:
    """The recorded VM copy (two GPUs, through host memory) mapped to an all-reduce by ring, tree and
    one-shot (helpers.model.budget.collective_time_us); band: the fit's 90 % confidence per step."""
    link, pts = bd.vm_copy_link(m)
    x, y = pts["size_bytes"].to_numpy(dtype=float), pts["latency_us"].to_numpy(dtype=float)
    coef, se, t90 = _ols(x, y)

    def make(alg):
        def ar(s, n):
            mid = np.asarray(bd.collective_time_us(link, "all_reduce", s, n, alg), dtype=float)
            step = {"ring": s / n, "tree": s, "one_shot": s}[alg]
            per = np.maximum(1e-9, coef[0] + coef[1] * step)
            rel = t90 * se(step) / per
            return np.maximum(0.0, mid * (1 - rel)), mid, mid * (1 + rel)
        return ar

    ev = (f"the recorded two-GPU copy through host memory ({len(pts)} sizes, seed), alpha {link.alpha_us:.1f} us, "
          f"beta {link.beta_GBps:.1f} GB/s")
    return [HostPath("copy_ring", "recorded copy, mapped by a ring", ev + "; 2(n-1) steps of 1/n of the message",
                     "derived", make("ring")),
            HostPath("copy_tree", "recorded copy, mapped by a tree", ev + "; 2 log2 n steps of the whole message",
                     "derived", make("tree")),
            HostPath("copy_one_shot", "recorded copy, mapped by a one-shot", ev + "; one latency, all the bytes",
                     "derived", make("one_shot"))]


def _pair_fit(sizes: np.ndarray, times: np.ndarray) -> tuple[float, float]:
    """A two-rank all-reduce t2(S) = 2 alpha + S / beta (two ring steps of S/2 each): (alpha us, beta B/us)."""
    coef, _, _ = _ols(sizes, times)
    if coef[1] <= 0:
        raise VerdictInputError(f"a two-GPU host-path sweep whose time does not grow with size ({coef}): "
                                f"cannot scale it to eight ranks")
    return coef[0] / 2, 1 / coef[1]


def _scaled(alpha: float, beta: float):
    """Two-rank ring steps carried to n ranks: ring 2(n-1) (alpha + S/n/beta) (the mid and, above it, the
    high end where it is the slower), tree 2 log2 n (alpha + S/beta); low and high: the faster and slower."""
    def ar(s, n):
        ring = 2 * (n - 1) * (alpha + s / n / beta)
        tree = 2 * math.ceil(math.log2(n)) * (alpha + s / beta)
        return np.minimum(ring, tree), ring, np.maximum(ring, tree)
    return ar


PAIR_PR = "host memory"        # two GPUs without P2P (sglang PR #39605)
PAIR_H200 = "P2P_DISABLE=1"    # two H200s with NCCL's P2P disabled (this book's two-GPU run)


def pair_scenarios() -> list[HostPath]:
    """The two-GPU host-path all-reduces in hand (data/reference/host_allreduce.csv), scaled to n ranks."""
    d = recorded.load("reference/host_allreduce.csv")
    out = []
    pr = d[(d["variant"] == PAIR_PR) & (d["gpus"] == 2)]
    h = d[(d["variant"] == PAIR_H200) & (d["gpus"] == 2) & (d["message_bytes"] <= 1 << 20)]
    if not len(pr) or len(h) < 3:
        raise VerdictInputError(f"data/reference/host_allreduce.csv: expected a 2-GPU row of variant {PAIR_PR!r} "
                                f"and 3 or more of {PAIR_H200!r} up to 1 MiB, found {len(pr)} and {len(h)}; its "
                                f"variants: {sorted(set(d['variant']))}")
    if len(pr):
        r = pr.iloc[0]
        # sglang PR #39605 gives a point (39 us at 10 KB) and a bandwidth (1.9 GB/s at 20 MB), both 2 GPUs
        beta = 1.9e3   # B/us
        alpha = (float(r["time_us"]) - float(r["message_bytes"]) / beta) / 2
        out.append(HostPath("pair_pr39605", "2-GPU host path (sglang PR #39605), scaled to the ranks",
                            f"{float(r['time_us']):.0f} us at {float(r['message_bytes']) / 1024:.0f} KiB and 1.9 GB/s "
                            f"at 20 MB over 2 GPUs (reference): alpha {alpha:.1f} us a step; ring steps to n ranks "
                            f"(tree as the other end)", "derived", _scaled(alpha, beta)))
    if len(h) >= 3:
        alpha, beta = _pair_fit(h["message_bytes"].to_numpy(dtype=float), h["time_us"].to_numpy(dtype=float))
        out.append(HostPath("pair_h200", "2x H200 with P2P off (this book), scaled to the ranks",
                            f"NCCL all-reduce over 2 H200s with NCCL_P2P_DISABLE=1, {len(h)} sizes to 1 MiB "
                            f"(measured, run h200x2-20261129f): alpha {alpha:.1f} us a step, beta "
                            f"{beta / 1e3:.1f} GB/s; ring steps to n ranks (tree as the other end)",
                            "derived", _scaled(alpha, beta)))
    return out


@lru_cache(maxsize=256)
def _nccl_band(size: int, ranks: int) -> tuple:
    from helpers.interconnect import ncclmodel

    b = ncclmodel.band(size, ranks)
    return b.low_us, b.mid_us, b.high_us, b.nccl_version


def nccl_scenario() -> list[HostPath]:
    """NCCL's own cost model for a ring through host memory (helpers.interconnect.ncclmodel): the tuner's
    pick at the three readings of the GPUs' PCIe links a VM can give it (low: Gen5 x16; mid: 24 GB/s;
    high: the 12 GB/s fallback, priced as one ring channel)."""
    def ar(s, n):
        s = np.atleast_1d(np.asarray(s, dtype=float))
        vals = np.array([_nccl_band(int(round(x)), int(n))[:3] for x in s])
        return vals[:, 0], vals[:, 1], vals[:, 2]
    version = _nccl_band(12288, TP)[3]
    return [HostPath("nccl_model", "NCCL's cost model (shared-memory ring)",
                     f"NCCL {version}'s own tuning estimate from its source constants: the tuner's pick (ring, LL or "
                     f"Simple) with the links read as PCIe Gen5 x16, at 24 GB/s, or at its 12 GB/s fallback", "derived", ar)]


def study_scenario(hostpath_sweep: pd.DataFrame | None) -> list[HostPath]:
    """This run's host-path study (helpers.interconnect.hostpath, arm 'host': P2P off), at eight ranks
    measured or extrapolated, where the run has one."""
    if hostpath_sweep is None or not len(hostpath_sweep):
        return []
    from helpers.interconnect import growth

    at8 = growth.at_world_size(hostpath_sweep, TP)
    h = at8[at8["arm"] == "host"].sort_values("size_bytes")
    if len(h) < 2:
        return []
    xs = np.log(h["size_bytes"].to_numpy(dtype=float))

    def ar(s, n):
        if n != TP:
            raise VerdictInputError(f"this run's host-path study is priced at {TP} ranks only, not {n}")
        f = lambda col: np.interp(np.log(s), xs, h[col].to_numpy(dtype=float))  # noqa: E731
        return f("time_us_low"), f("time_us"), f("time_us_high")
    return [HostPath("run_study", "this run's host-path study (P2P off)", f"{h['kind'].iloc[0]}", "measured", ar)]


def measured_scenario(us_12k: float, us_768k: float, m: ma.ModelConfig) -> list[HostPath]:
    """An 8-rank all-reduce measured on a VM, given at the decode rule's two sizes (chapter parameters):
    a straight line through both (time = a + b x size), nothing else assumed."""
    if not us_12k and not us_768k:
        return []
    if not (us_12k > 0 and us_768k > 0) or not (math.isfinite(us_12k) and math.isfinite(us_768k)):
        raise VerdictInputError(f"vm_allreduce_12k_us = {us_12k!r}, vm_allreduce_768k_us = {us_768k!r}: give both "
                                f"as positive microseconds (or both 0 for 'not measured')")
    s1, s2 = rule_sizes(m)
    b = (us_768k - us_12k) / (s2 - s1)
    a = us_12k - b * s1

    def ar(s, n):
        if n != TP:
            raise VerdictInputError(f"the VM all-reduce given was measured over {TP} ranks, not {n}")
        v = np.maximum(a + b * s, 0.0)
        return v, v, v
    return [HostPath("vm_measured", "measured on a VM (given)", f"{us_12k:.1f} us at {s1 / 1024:.0f} KiB and "
                     f"{us_768k:.1f} us at {s2 / 1024:.0f} KiB over {TP} ranks (measured, given as parameters)",
                     "measured", ar)]


def rule_sizes(m: ma.ModelConfig) -> tuple[float, float]:
    """The decision rule's message sizes: one token and 64 tokens of the hidden state in bf16."""
    return float(ma.allreduce_bytes(m, 1)), float(ma.allreduce_bytes(m, 64))


def vm_collectives_us(p: Parts, hp: HostPath, q: np.ndarray, ranks: int = TP) -> np.ndarray:
    """The step's collectives under one host-path scenario, at the scenario quantiles q."""
    total = 0.0
    for _, kind, n, size, _ in p.collectives:
        lo, mid, hi = hp.time(kind, size, ranks)
        total = total + n * _at(lo, mid, hi, q)
    return total


# -------------------------------------------------------------------------------------------- prediction
@dataclass(frozen=True)
class Observation:
    key: str
    system: str
    label: str
    concurrency: int         # nominal
    observed_tok_s: float
    soft: bool               # the decode batch at a nominal 64 is uncertain
    source: str


def observations() -> list[Observation]:
    """Every observation the predictions are scored against (primary figures by the book's fixed rule,
    the server-log decode batch, the decode-heavy sweep)."""
    prim = bd.primary_observations()

    def pick(system, conc):
        r = prim[(prim["system"] == system) & (prim["concurrency"] == conc)]
        if len(r) != 1:
            raise VerdictInputError(f"the primary observations have {len(r)} rows for {system!r} at concurrency "
                                    f"{conc} (expected one): see data/recorded/serving.csv and "
                                    f"data/reference/baremetal.csv")
        return float(r["observed"].iloc[0])
    srv = recorded.load("recorded/serving.csv")

    def rec(experiment, metric, conc):
        r = srv[(srv["experiment"] == experiment) & (srv["metric"] == metric) & (srv["concurrency"] == conc)]
        if not len(r):
            raise VerdictInputError(f"data/recorded/serving.csv has no {experiment} {metric} at concurrency {conc}")
        return float(r["value"].iloc[0]), str(r["source"].iloc[0])

    log, log_src = rec("server_log_decode_batch", "generation_throughput", 17)
    dh1, dh_src = rec("sweep_128_512", "output_throughput", 1)
    dh64, _ = rec("sweep_128_512", "output_throughput", 64)
    return [Observation("bm_1", BARE, "one stream", 1, pick(BARE, 1), False, "rtx6kpro-glm5"),
            Observation("bm_64", BARE, "concurrency 64", 64, pick(BARE, 64), False, "rtx6kpro-glm5"),
            Observation("vm_1", VM, "one stream (256/256)", 1, pick(VM, 1), False, "seed-000"),
            Observation("vm_64", VM, "concurrency 64 (256/256)", 64, pick(VM, 64), True, "seed-000"),
            Observation("vm_17", VM, "server log, 17 running requests", 17, log, False, log_src),
            Observation("vm_dh_1", VM, "decode-heavy 128/512, one stream", 1, dh1, False, dh_src),
            Observation("vm_dh_64", VM, "decode-heavy 128/512, concurrency 64", 64, dh64, True, dh_src)]


@dataclass
class Verdict:
    """Every band the chapter shows, built once from its inputs."""

    model: ma.ModelConfig
    context: int
    floor_us: float
    inputs: Inputs
    scenarios: list[HostPath]
    samples: int = SAMPLES
    seed: int = SEED
    _draws: dict = field(default_factory=dict)

    @classmethod
    def build(cls, model: str, context: int, floor_us: float, study: mb.PrecisionStudy | None,
              hostpath_sweep: pd.DataFrame | None = None, vm_allreduce_us: tuple = (0.0, 0.0),
              ranges: pd.DataFrame | None = None, samples: int = SAMPLES, seed: int = SEED,
              scenarios: tuple[str, ...] | None = None) -> "Verdict":
        """Check every input before anything is computed (VerdictInputError naming it)."""
        m = ma.load_model(model)
        if not (isinstance(samples, int) and 100 <= samples <= 100_000):
            raise VerdictInputError(f"samples = {samples!r}: expected an integer from 100 to 100000")
        ins = inputs(study, ranges)
        hps = (copy_scenarios(m) + nccl_scenario() + pair_scenarios() + study_scenario(hostpath_sweep)
               + measured_scenario(float(vm_allreduce_us[0]), float(vm_allreduce_us[1]), m))
        if scenarios is not None:
            known = {h.key for h in hps}
            unknown = [s for s in scenarios if s not in known]
            if unknown:
                raise VerdictInputError(f"unknown host-path scenario(s) {unknown}; this run has {sorted(known)}")
            hps = [h for h in hps if h.key in scenarios]
        if not hps:
            raise VerdictInputError("no host-path scenario has evidence: the VM cannot be predicted")
        observations()          # every observation it is scored against, present (VerdictInputError naming one)
        check_remedies()
        return cls(m, int(context), float(floor_us), ins, hps, samples, seed)

    # -- draws
    def draw(self, system: str) -> dict:
        """SAMPLES draws of every input for `system` (seeded: the same for every call); 'q' is the
        host-path scenarios' shared quantile (one all-reduce cost level per draw, correlated across sizes)."""
        if system not in self._draws:
            rng = np.random.default_rng(self.seed)
            d = {}
            for name in INPUTS:
                if name == "collective_spread" and system == VM:
                    d[name] = np.ones(self.samples)
                    rng.uniform(size=self.samples)   # keep the streams aligned across systems
                    continue
                d[name] = self.inputs.get(name, system).draw(rng, self.samples)
            d["q"] = rng.uniform(size=self.samples)
            self._draws[system] = d
        return self._draws[system]

    def mids(self, system: str) -> dict:
        d = {n: np.array([self.inputs.get(n, system).mid]) for n in INPUTS if not (n == "collective_spread" and system == VM)}
        if system == VM:
            d["collective_spread"] = np.ones(1)
        d["q"] = np.array([0.5])
        return d

    def scenario(self, key: str) -> HostPath:
        for h in self.scenarios:
            if h.key == key:
                return h
        raise VerdictInputError(f"unknown host-path scenario {key!r}; this run has {[h.key for h in self.scenarios]}")

    # -- steps
    def _batches(self, obs_conc: int, soft: bool, draw: dict) -> np.ndarray:
        if soft:
            return np.asarray(draw["batch_at_nominal_64"], dtype=float) * obs_conc / 64.0
        return np.full(len(draw["q"]), float(obs_conc))

    def step_us(self, system: str, batch: np.ndarray, draw: dict, scenario: HostPath | None = None,
                collectives: bool = True) -> np.ndarray:
        """Step time per draw at the (possibly fractional) batches given: compute, collectives (bare
        metal's or the scenario's) and CPU time; fractional batches are interpolated on SOFT_GRID."""
        batch = np.asarray(batch, dtype=float)
        uniq = np.unique(batch)
        if len(uniq) == 1 and float(uniq[0]).is_integer():
            return self._step_at(system, int(uniq[0]), draw, scenario, collectives)
        grid = sorted(set(SOFT_GRID) | {int(math.floor(batch.min())), int(math.ceil(batch.max()))})
        at = {g: self._step_at(system, g, draw, scenario, collectives) for g in grid}
        gs = np.array(grid, dtype=float)
        idx = np.clip(np.searchsorted(gs, batch) - 1, 0, len(gs) - 2)
        lo, hi = gs[idx], gs[idx + 1]
        w = (batch - lo) / (hi - lo)
        stack = np.array([at[g] for g in grid])
        rows = np.arange(len(batch))
        return stack[idx, rows] * (1 - w) + stack[idx + 1, rows] * w

    def _step_at(self, system, batch, draw, scenario, collectives):
        p = parts(self.model.key, batch, self.context, self.floor_us)
        gpu = compute_us(p, draw)
        if collectives:
            gpu = gpu + (bare_collectives_us(p, draw) if scenario is None else vm_collectives_us(p, scenario, draw["q"]))
        return gpu * (1 + draw["cpu_step_fraction"])

    def predict(self, obs: Observation, scenario: HostPath | None = None) -> dict:
        """Point prediction, 5-95 % band and median of tokens/s for one observation (aggregate at the
        nominal concurrency, per stream at 1), and whether the observation falls inside the band."""
        system = obs.system
        d, mid = self.draw(system), self.mids(system)
        b = self._batches(obs.concurrency, obs.soft, d)
        tok = b * 1e6 / self.step_us(system, b, d, scenario)
        bm = self._batches(obs.concurrency, obs.soft, mid)
        point = float((bm * 1e6 / self.step_us(system, bm, mid, scenario))[0])
        lo, hi = np.percentile(tok, BAND)
        return {"observation": obs.key, "system": system, "what": obs.label, "concurrency": obs.concurrency,
                "scenario": scenario.label if scenario else "bare-metal NCCL (aiconfigurator)",
                "scenario_key": scenario.key if scenario else "bare",
                "observed_tok_s": obs.observed_tok_s, "predicted_tok_s": point, "band_low_tok_s": float(lo),
                "band_median_tok_s": float(np.median(tok)), "band_high_tok_s": float(hi),
                "rel_err": (point - obs.observed_tok_s) / obs.observed_tok_s,
                "inside_band": bool(lo <= obs.observed_tok_s <= hi)}

    def split(self, batch: int) -> dict:
        """Bare metal's point-prediction step at `batch` by term (ms): experts (routed and router, less the
        hidden shared expert), attention (its core, projections' share is in 'other'), indexer,
        collectives, everything else, and CPU time."""
        p = parts(self.model.key, batch, self.context, self.floor_us)
        d = self.mids(BARE)
        comp = float(compute_us(p, {**d, "indexer": np.zeros(1)})[0])   # compute without the indexer
        att = float((p.attention_roofline + d["attention_kernel"] * (p.attention_standin - p.attention_roofline))[0])
        idx = float((d["indexer"] * p.indexer)[0])
        moe = float(routed_us(p, d["routing_skew"])[0]) + p.router
        coll = float(bare_collectives_us(p, d)[0])
        other = comp - moe - att
        cpu = (comp + idx + coll) * float(d["cpu_step_fraction"][0])
        return {"experts": moe / 1e3, "attention": att / 1e3, "indexer": idx / 1e3, "collectives": coll / 1e3,
                "other": other / 1e3, "cpu": cpu / 1e3, "step": (comp + idx + coll + cpu) / 1e3}

    def bare_metal(self) -> pd.DataFrame:
        return pd.DataFrame([self.predict(o) for o in observations() if o.system == BARE])

    def vm(self) -> pd.DataFrame:
        return pd.DataFrame([self.predict(o, h) for h in self.scenarios for o in observations() if o.system == VM])

    # -- attribution
    def loss_ms(self, c: int) -> tuple[float, float, float]:
        """The VM's lost time per step against bare metal at nominal concurrency c (both observed):
        c/observed_vm - c/observed_bm; at 64 its band follows the decode batch (low: the achieved)."""
        prim = {(o.system, o.concurrency): o for o in observations() if o.key in ("bm_1", "bm_64", "vm_1", "vm_64")}
        per_tok = 1e3 / prim[(VM, c)].observed_tok_s - 1e3 / prim[(BARE, c)].observed_tok_s
        if c == 1:
            return per_tok, per_tok, per_tok
        r = self.inputs.get("batch_at_nominal_64", VM)
        return per_tok * r.low * c / 64, per_tok * r.mid * c / 64, per_tok * r.high * c / 64

    def excess_ms(self, c: int, hp: HostPath, q: float, batch: float | None = None) -> float:
        """The scenario's collectives minus bare metal's (mid factor) per step at batch c, in ms."""
        b = int(round(batch if batch is not None else c))
        p = parts(self.model.key, b, self.context, self.floor_us)
        bare = sum(n * us for _, _, n, _, us in p.collectives)
        return float((vm_collectives_us(p, hp, np.array([q]))[0] - bare) / 1e3)

    def attribution(self) -> pd.DataFrame:
        """Per scenario and end (1, 64): the share of the VM's lost time per step its host path explains,
        with its band (scenario low/high; at 64 also the decode batch) and what is left unexplained."""
        rows = []
        for c in (1, 64):
            lo_l, mid_l, hi_l = self.loss_ms(c)
            rng = self.inputs.get("batch_at_nominal_64", VM)
            batches = (1,) if c == 1 else (rng.low, rng.high)
            for hp in self.scenarios:
                mid = self.excess_ms(c, hp, 0.5) / mid_l
                ends = []
                for b in batches:
                    loss = mid_l * (b / c) if c != 1 else mid_l
                    for q in (0.0, 1.0):
                        ends.append(self.excess_ms(c, hp, q, b if c != 1 else None) / loss)
                rows.append({"concurrency": c, "scenario": hp.label, "scenario_key": hp.key, "kind": hp.kind,
                             "lost_ms_per_step": mid_l, "lost_ms_low": lo_l, "lost_ms_high": hi_l,
                             "host_path_excess_ms": self.excess_ms(c, hp, 0.5),
                             "share_explained": mid, "share_low": min(ends), "share_high": max(ends),
                             "unexplained": 1 - mid})
        return pd.DataFrame(rows)

    def residuals(self) -> pd.DataFrame:
        """What the VM's step leaves beyond its predicted compute (mid inputs, bare-metal collectives) at
        the observed batches 1 and 17: the same left-over at both points fits a latency-bound collective
        and a fixed per-step tax alike."""
        mid = self.mids(VM)
        out = []
        for o in observations():
            if o.key not in ("vm_1", "vm_17"):
                continue
            step = o.concurrency / o.observed_tok_s * 1e3
            comp = float(self.step_us(VM, np.array([o.concurrency]), mid, None)[0]) / 1e3
            out.append({"observation": o.key, "batch": o.concurrency, "observed_step_ms": step,
                        "predicted_with_bare_metal_collectives_ms": comp, "left_over_ms": step - comp})
        return pd.DataFrame(out)

    # -- the decision rule
    def thresholds(self) -> pd.DataFrame:
        """What an 8-rank all-reduce on the VM must cost for its host path to explain at least EXPLAINS
        (and at most CANNOT) of the lost time: at one token (c=1) and at 64 tokens (c=64). Counted: the
        step's all-reduces; the logits all-gather (one a step) is left at bare metal's cost."""
        s1, s64 = rule_sizes(self.model)
        rows = []
        for c, size in ((1, s1), (64, s64)):
            p = parts(self.model.key, c, self.context, self.floor_us)
            n_ar = sum(n for _, kind, n, _, _ in p.collectives if kind == "all_reduce")
            bare = next(us for _, kind, _, _, us in p.collectives if kind == "all_reduce")
            _, loss, _ = self.loss_ms(c)
            rows.append({"concurrency": c, "message_bytes": size, "all_reduces_per_step": n_ar,
                         "bare_metal_us": bare, "lost_ms_per_step": loss,
                         "explains_80_us": bare + EXPLAINS * loss * 1e3 / n_ar,
                         "explains_25_us": bare + CANNOT * loss * 1e3 / n_ar})
        return pd.DataFrame(rows)

    def evidence(self) -> pd.DataFrame:
        """Each scenario's 8-rank all-reduce at the rule's two sizes (low, mid, high) and the share of the
        loss it would explain there."""
        th = self.thresholds()
        rows = []
        for hp in self.scenarios:
            for t in th.itertuples():
                lo, mid, hi = (float(np.ravel(v)[0]) for v in hp.time("all_reduce", t.message_bytes, TP))
                share = lambda us: (us - t.bare_metal_us) * t.all_reduces_per_step / 1e3 / t.lost_ms_per_step  # noqa: E731
                rows.append({"scenario": hp.label, "scenario_key": hp.key, "kind": hp.kind,
                             "concurrency": t.concurrency, "message_bytes": t.message_bytes, "low_us": lo,
                             "mid_us": mid, "high_us": hi, "share_low": share(lo), "share_mid": share(mid),
                             "share_high": share(hi), "evidence": hp.evidence})
        return pd.DataFrame(rows)


# -------------------------------------------------------------------------------------------- conclusion
CONCLUSIONS = {
    "explains": ("The all-reduce measured on a VM ({how}) costs at least what the host path needs to explain "
                 "{pct_hi:.0f} % of the lost time at both ends: the seeds' claim holds; restoring P2P is the remedy."),
    "cannot": ("The all-reduce measured on a VM ({how}) costs too little for the host path to explain more than "
               "{pct_lo:.0f} % of the lost time at both ends: the seeds' claim fails, and the loss lies elsewhere "
               "(the named alternatives)."),
    "partly": ("The all-reduce measured on a VM ({how}) puts the host path's share of the lost time at "
               "{share_1:.0f} % for one stream and {share_64:.0f} % at concurrency 64: a real part of the loss, "
               "not all of it."),
    "unsettled": ("Unsettled: the scenarios with evidence put the host path's share of the lost time between "
                  "{lo_1:.0f} % and {hi_1:.0f} % for one stream and between {lo_64:.0f} % and {hi_64:.0f} % at "
                  "concurrency 64, across the {explain_lo:.0f} % and {explain_hi:.0f} % marks. An 8-rank "
                  "all-reduce timed on that VM decides it: at least {t80_1:.0f} µs at {kib_1:.0f} KiB and "
                  "{t80_64:.0f} µs at {kib_64:.0f} KiB means the host path explains {explain_hi:.0f} % or more; "
                  "at most {t25_1:.0f} µs and {t25_64:.0f} µs means {explain_lo:.0f} % or less."),
    "settled_low": ("Every scenario with evidence puts the host path's share of the lost time at {hi_1:.0f} % or "
                    "less for one stream and {hi_64:.0f} % or less at concurrency 64: on this evidence the seeds' "
                    "claim fails."),
    "settled_high": ("Every scenario with evidence puts the host path's share of the lost time at {lo_1:.0f} % or "
                     "more for one stream and {lo_64:.0f} % or more at concurrency 64: on this evidence the seeds' "
                     "claim holds."),
}


def decide(evidence: pd.DataFrame, thresholds: pd.DataFrame) -> tuple[str, dict]:
    """The chapter's conclusion, chosen from data: a measured scenario (kind 'measured') decides where
    there is one; otherwise the envelope of the derived scenarios, against EXPLAINS and CANNOT."""
    if not len(evidence):
        raise VerdictInputError("no host-path evidence to decide from")
    th = {int(t.concurrency): t for t in thresholds.itertuples()}
    vals = {"explain_hi": 100 * EXPLAINS, "explain_lo": 100 * CANNOT}
    for c in (1, 64):
        vals.update({f"t80_{c}": th[c].explains_80_us, f"t25_{c}": th[c].explains_25_us,
                     f"kib_{c}": th[c].message_bytes / 1024})
    measured = evidence[evidence["kind"] == "measured"]
    if len(measured):
        key = measured["scenario_key"].iloc[0]
        mrows = measured[measured["scenario_key"] == key]
        sh = {int(r.concurrency): r.share_mid for r in mrows.itertuples()}
        vals.update({"how": mrows["scenario"].iloc[0], "share_1": 100 * sh[1], "share_64": 100 * sh[64],
                     "pct_hi": 100 * EXPLAINS, "pct_lo": 100 * CANNOT})
        if min(sh.values()) >= EXPLAINS:
            return "explains", vals
        if max(sh.values()) <= CANNOT:
            return "cannot", vals
        return "partly", vals
    for c in (1, 64):
        e = evidence[evidence["concurrency"] == c]
        vals[f"lo_{c}"] = 100 * max(0.0, float(e["share_low"].min()))
        vals[f"hi_{c}"] = 100 * min(1.0, float(e["share_high"].max()))   # a model can price more than the loss
    if vals["hi_1"] <= 100 * CANNOT and vals["hi_64"] <= 100 * CANNOT:
        return "settled_low", vals
    if vals["lo_1"] >= 100 * EXPLAINS and vals["lo_64"] >= 100 * EXPLAINS:
        return "settled_high", vals
    return "unsettled", vals


#: the one-line status page 1 gives, by the decision rule's case
STATUS = {
    "unsettled": "No all-reduce was ever timed on that VM, so the question stays open.",
    "settled_low": "Every model with evidence prices it below the 25 % mark: the seeds' claim fails on this evidence.",
    "settled_high": "Every model with evidence prices it above the 80 % mark: the seeds' claim holds on this evidence.",
    "explains": "An all-reduce measured on a VM settles it: the host path is the loss.",
    "cannot": "An all-reduce measured on a VM settles it: the host path is not the loss.",
    "partly": "An all-reduce measured on a VM puts it between the 25 % and 80 % marks: part of the loss.",
}


def conclusion(evidence: pd.DataFrame, thresholds: pd.DataFrame) -> tuple[str, str]:
    """(case, sentence) of the decision rule."""
    case, vals = decide(evidence, thresholds)
    return case, CONCLUSIONS[case].format(**vals)


# -------------------------------------------------------------------------------------------- ceilings
def ceiling(m: ma.ModelConfig, batch: int) -> dict:
    """The weight-bytes floor of one decode step per GPU at TP8 (derived): every byte one rank must read
    at the checkpoint's precisions (weights of the active experts at this batch, and the KV cache), over
    the recorded GPU's datasheet bandwidth; and the tokens/s it allows."""
    base = bd.baseline_scenario(m)
    bytes_ = float(bd.step_terms(m, base, batch)["bytes_per_gpu"])
    bw = mb.gpu_bandwidth(kt.RTX).value
    us = bytes_ / (bw * 1e3)
    return {"batch": batch, "bytes_per_gpu_GB": bytes_ / 1e9, "floor_ms": us / 1e3, "ceiling_tok_s": batch * 1e6 / us,
            "bandwidth_GBps": bw}


# -------------------------------------------------------------------------------------------- remedies
def check_remedies() -> pd.DataFrame:
    """data/reference/remedies.csv, each mechanism one the verdict can price (or says it cannot)."""
    t = recorded.load("reference/remedies.csv")
    bad = sorted(set(t["mechanism"]) - set(PRICED_AS))
    if bad:
        raise VerdictInputError(f"data/reference/remedies.csv: mechanism(s) {bad} are not priced by "
                                f"helpers.model.verdict; known: {sorted(PRICED_AS)}")
    return t


def remedies(v: Verdict, fits_tp4: bool) -> pd.DataFrame:
    """Each remedy of data/reference/remedies.csv with its predicted tokens/s at 1 and 64 (band over the
    host-path scenarios) and gain over the VM as observed; what the investigation tried and found."""
    table = check_remedies()
    att = v.attribution()
    obs = {o.key: o for o in observations()}
    rows = []
    for r in table.itertuples(index=False):
        row = {"remedy": r.remedy, "tried": r.tried, "finding": r.finding, "source": r.source}
        for c, key in ((1, "vm_1"), (64, "vm_64")):
            observed = obs[key].observed_tok_s
            step = c / observed * 1e3   # ms at the nominal batch
            gains = _remedy_gains(v, r.mechanism, c, step, att, fits_tp4)
            if gains is None:
                row.update({f"tok_s_low @{c}": np.nan, f"tok_s_mid @{c}": np.nan, f"tok_s_high @{c}": np.nan,
                            f"gain_mid @{c}": np.nan})
                continue
            lo, mid, hi = gains
            row.update({f"tok_s_low @{c}": observed * lo, f"tok_s_mid @{c}": observed * mid,
                        f"tok_s_high @{c}": observed * hi, f"gain_mid @{c}": mid})
        row["priced_as"] = PRICED_AS[r.mechanism] if r.mechanism != "fewer_gpus" or fits_tp4 else \
            "not possible: at TP4 the weights do not fit on the recorded GPUs"
        rows.append(row)
    out = pd.DataFrame(rows)
    out = out.sort_values("gain_mid @1", ascending=False, na_position="last", kind="stable").reset_index(drop=True)
    out.insert(0, "rank", range(1, len(out) + 1))
    return out


PRICED_AS = {
    "p2p_in_vm": "the host path replaced by bare metal's NCCL: the step loses each scenario's excess (band over scenarios)",
    "enabler": "no gain alone: it is what a clique needs",
    "condition": "not a remedy: it decides whether the clique can work",
    "nccl_tuning": "NCCL's own cost model already picks its fastest protocol; only a measurement under the host path (make run TARGET=vm-emulation) can show a knob that beats it",
    "tp4_pp2": "four ranks per all-reduce (each scenario at 4 ranks), compute doubled (the stages run one after the other at one batch)",
    "fewer_gpus": "TP4 on four GPUs",
    "mtp": "not priced: no acceptance rate for GLM-5 on this deployment is recorded",
}


def _remedy_gains(v: Verdict, mech: str, c: int, step_ms: float, att: pd.DataFrame, fits_tp4: bool):
    """(low, mid, high) of observed-step / remedied-step, or None where it is not priced."""
    if mech in ("enabler", "condition"):
        return 1.0, 1.0, 1.0
    if mech in ("mtp",) or (mech == "fewer_gpus" and not fits_tp4):
        return None
    if mech == "nccl_tuning":
        return 1.0, 1.0, 1.0
    a = att[att["concurrency"] == c]
    if mech == "p2p_in_vm":
        saved = a["host_path_excess_ms"].to_numpy()
        lo_s, hi_s = float(np.clip(saved.min(), 0, None)), float(np.clip(saved.max(), 0, None))
        mid_s = float(np.clip(np.median(saved), 0, None))
        f = lambda s: step_ms / max(step_ms - s, 1e-9)  # noqa: E731
        return f(lo_s), f(mid_s), f(hi_s)
    if mech in ("tp4_pp2", "fewer_gpus"):
        mid = v.mids(VM)
        p = parts(v.model.key, c, v.context, v.floor_us)
        comp = float(compute_us(p, mid)[0]) / 1e3
        deltas = []
        for hp in v.scenarios:
            try:
                c8 = float(vm_collectives_us(p, hp, np.array([0.5]))[0]) / 1e3
                c4 = float(vm_collectives_us(p, hp, np.array([0.5]), ranks=4)[0]) / 1e3
            except VerdictInputError:
                continue
            deltas.append((c8 - c4) - comp)   # TP4 (+PP2 or not): twice the bytes per GPU, compute doubled
        if not deltas:
            return None
        f = lambda dlt: step_ms / max(step_ms - dlt, 1e-9)  # noqa: E731
        return f(min(deltas)), f(float(np.median(deltas))), f(max(deltas))
    raise VerdictInputError(f"remedy mechanism {mech!r} is unknown; data/schema.yaml lists the allowed ones")
