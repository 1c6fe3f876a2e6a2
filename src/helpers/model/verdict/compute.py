"""The verdict's compute: one rank's decode step on the recorded GPU from aiconfigurator's measured kernels,
split where an uncertain input acts, and the step's compute and bare-metal collectives per draw."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from helpers.model import arith as ma
from helpers.model import kernels as kt
from helpers.model import measured as mb
from helpers.model.verdict import collectives as cl
from helpers.model.verdict.ranges import bare_floor_us

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
    #: per collective, aligned with `collectives`: (table low, table high, community tuned us or None, SGLang
    #: custom all-reduce us or None) (helpers.model.verdict.collectives.curve_points)
    curves: tuple = ()
    kernels: int = 0          # kernels per step: one per listed operation (assumed), collectives included


@lru_cache(maxsize=256)
def _parts(model: str, batch: int, context: int, floor_us: float, system: str = kt.RTX, attention: str = "dense",
           moe_kernel: str | None = None) -> Parts:
    m = ma.load_model(model)
    kw = {"system": system, "overlap_shared": False, "attention": attention, "moe_kernel": moe_kernel}
    pw = mb.kernel_terms(m, batch, context, floor_us, distribution=kt.AIC_DISTRIBUTION, **kw)
    un = mb.kernel_terms(m, batch, context, floor_us, distribution="balanced", **kw)
    sk = mb.kernel_terms(m, batch, context, floor_us, distribution="power_law_1.2", **kw)
    op = lambda t, name: float(t.loc[t["op"] == name, "us_step"].sum())  # noqa: E731
    routed = "routed experts (fused MoE kernel)"
    coll = pw[pw["component"] == "collectives"]
    sched = {c.name: c for c in ma.collective_schedule(m)}
    colls = tuple((r.op, sched[r.op].kind, int(r["count"]), batch * sched[r.op].bytes_per_token, float(r.us_each))
                  for _, r in coll.iterrows())
    indexer = float(pw.loc[pw["component"] == "indexer", "us_step"].sum())
    core = op(pw, "attention")
    if attention == "dense":
        kv = batch * context * (m.kv_lora_rank + m.qk_rope_head_dim) * ma.FORMATS[m.fmt("kv_cache")]["bytes_per_value"]
        roof = m.layers * (kv / (mb.gpu_bandwidth(system).value * 1e3) + floor_us)
    else:   # the DSA module is timed whole: no roofline stands beside it (the attention range collapses)
        roof = core
    fixed = float(pw["us_step"].sum()) - indexer - core - op(pw, routed) - float(coll["us_step"].sum())
    curves = tuple(cl.curve_points(system, kind, size) for _, kind, _, size, _ in colls)
    return Parts(batch, fixed, core, roof, indexer, op(pw, "router"), op(pw, "shared expert (gate_up + down)"),
                 op(pw, routed), op(un, routed), op(sk, routed), colls, curves, int(pw["count"].sum()))


def parts(model: str, batch: int, context: int, floor_us: float, system: str = kt.RTX, attention: str = "dense",
          moe_kernel: str | None = None) -> Parts:
    """One rank's decode step at `batch` on `system` (default the recorded GPU), split where an input acts;
    `attention` and `moe_kernel` as helpers.model.measured.kernel_terms takes them."""
    return _parts(model, int(batch), int(context), round(float(floor_us), 6), system, attention, moe_kernel)


def routed_us(p: Parts, skew) -> np.ndarray:
    """The routed experts' kernel at routing `skew`: 0 aiconfigurator's power law (alpha 1.01), toward 1
    uniform, toward -1 its more skewed power law (alpha 1.2), linearly between the measured tables."""
    u = np.asarray(skew, dtype=float)
    return np.where(u >= 0, p.routed_power + u * (p.routed_uniform - p.routed_power),
                    p.routed_power - u * (p.routed_skewed - p.routed_power))


def compute_us(p: Parts, draw: dict, moe_factor=1.0) -> np.ndarray:
    """The step's compute (no collectives, no CPU time) for each draw of the inputs; `moe_factor` scales the
    routed experts' kernel (a runner the tables did not time)."""
    routed = routed_us(p, draw["routing_skew"]) * moe_factor
    att = p.attention_roofline + draw["attention_kernel"] * (p.attention_standin - p.attention_roofline)
    hidden = draw["shared_hidden"] * np.minimum(p.shared, p.router + routed)
    return p.fixed + att + draw["indexer"] * p.indexer + routed - hidden


def bare_collectives_us(p: Parts, draw: dict) -> np.ndarray:
    """Bare metal's collectives per draw: `collective_spread` x of the way from the public figures' floor to
    aiconfigurator's table; or, for the range as first registered (`collective_factor` in the draw), that
    factor times the table."""
    total = 0.0
    if "collective_factor" in draw:
        for _, kind, n, size, us in p.collectives:
            total = total + n * draw["collective_factor"] * us
        return total
    x = draw["collective_spread"]
    for _, kind, n, size, us in p.collectives:
        lo = bare_floor_us(kind, size, us)
        total = total + n * (lo + x * (us - lo))
    return total
