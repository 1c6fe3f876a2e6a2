"""GLM-5's decode step priced on any system aiconfigurator ships SGLang tables for, with its band: `predict`.

One function answers "what should GLM-5 TP8 decode at concurrency c and context n on eight of these GPUs?":

    from helpers.model.verdict.predictor import predict, EngineSettings
    p = predict("glm5", "RTX PRO 6000 Blackwell Server Edition", 8, 64, 0, EngineSettings())
    p.tok_s, p.band          # aggregate output tokens/s: the band's median and its 5-95 % range

The step is composed from aiconfigurator's kernel tables for that system (data/reference/aic_*.csv, extracted
once by benchmarks/extract_aiconfigurator.py; helpers.model.kernels looks them up): GEMMs, the fused MoE, the
attention as SGLang runs it there (dense MLA decode on SM120, the whole DSA module on H200 and B200), the
small operations at a graph-replay floor each, and the collectives (helpers.model.verdict.collectives: the
table made monotone with its protocol switch as a range, and on the RTX PRO 6000 the community's tuned curve
beside it). Every uncertain input is a row of data/reference/prediction_ranges.csv (or derived from a
committed measurement) and is drawn `SAMPLES` times with a fixed seed; the band is the 5-95 % of the
resulting tokens/s, the point its median (inside its own band by construction). The model's own error, a
range registered before any held-out observation was compared (`model_error`), multiplies every step.

What the settings change (EngineSettings): the checkpoint's precision, the MoE runner (a runner the tables did
not time is a stated range on the routed experts), custom all-reduce, the NCCL tuning (which collective curve
is measured for it), the CUDA-graph batch cap (batches above it launch eagerly: a stated range) and the
overlap scheduler (CPU time per step). Speculative decoding is not priced: a request for it is refused.

The systems: every system with rows in the tables (kernels.SYSTEMS: RTX PRO 6000 Blackwell Server Edition,
H200 SXM, B200 SXM), named by aiconfigurator's name (rtx_pro_6000_server, h200_sxm, b200_sxm) or the book's.
Tensor parallelism 8 only: the op list and the tables' shapes are GLM-5's at TP8.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache

import numpy as np
import pandas as pd

from helpers.model import kernels as kt
from helpers.model import measured as mb
from helpers.model.verdict import collectives as cl
from helpers.model.verdict.compute import Parts, compute_us, parts
from helpers.model.verdict.ranges import BAND, SAMPLES, SEED, Inputs, Range, VerdictInputError, inputs

#: the attention path SGLang takes on each system (GLM-5 on SM120 runs densely: rtx6kpro-glm5)
ATTENTION = {kt.RTX: "dense", kt.H200: "dsa", kt.B200: "dsa"}
#: systems whose GPUs are joined by NVLink: SGLang's custom all-reduce turns itself off on more than two PCIe-only
#: GPUs (sglang-docs), so on the others the setting changes nothing and NCCL carries every all-reduce
NVLINK = (kt.H200, kt.B200)
#: the model configuration (data/models/) of each checkpoint the settings can name
CHECKPOINTS = {"nvfp4": "glm5", "fp8": "glm5-fp8"}
#: the MoE kernel the tables timed, per system and routed-expert precision, as SGLang's default picks it
TABLE_MOE = {(kt.RTX, "nvfp4"): "sglang_flashinfer_cutlass_moe", (kt.H200, "fp8_block"): "sglang_fused_moe_triton",
             (kt.B200, "fp8_block"): "sglang_flashinfer_trtllm_moe", (kt.B200, "nvfp4"): "sglang_flashinfer_trtllm_moe"}
#: the runner names of SGLang's --moe-runner-backend that are the tables' kernel (no range needed)
SAME_RUNNER = {"sglang_flashinfer_cutlass_moe": ("flashinfer_cutlass", "auto"),
               "sglang_fused_moe_triton": ("triton", "auto"),
               "sglang_flashinfer_trtllm_moe": ("flashinfer_trtllm", "auto")}
#: the inputs a prediction draws, in a fixed order (the seeded streams stay aligned when one is added)
DRAWN = ("routing_skew", "attention_kernel", "indexer", "shared_hidden", "cpu_step_fraction", "model_error",
         "collective_curve", "protocol_switch", "moe_runner", "eager_launch")


#: the shortest KV cache the attention tables time (a shorter context is priced at it)
MIN_CONTEXT = 2


class PredictorError(VerdictInputError):
    """A prediction that cannot be made as asked; the message names the input and what is allowed."""


@dataclass(frozen=True)
class EngineSettings:
    """How SGLang ran (or will run) GLM-5: what the prediction prices. Defaults are SGLang's own."""

    checkpoint: str = "nvfp4"           # "nvfp4" (nvidia/GLM-5-NVFP4, lukealonso/GLM-5-NVFP4) or "fp8" (zai-org/GLM-5-FP8)
    moe_runner: str = "auto"            # SGLang's --moe-runner-backend; a runner the tables did not time is a range
    custom_allreduce: bool = True       # False: --disable-custom-all-reduce (NCCL); acts on NVLink systems only
    nccl_tuned: bool = False            # the community's NCCL settings (P2P level SYS, 8 channels, graph XML)
    cuda_graph_max_bs: int = 160        # --cuda-graph-max-bs: batches above it decode without CUDA graphs
    overlap_scheduler: bool = True      # False: --disable-overlap-schedule (CPU time per step not hidden)
    speculative: bool = False           # MTP / EAGLE: not priced (refused)
    kv_cache: str = "bf16"              # the KV cache the tables time for these paths
    label: str = ""                     # what these settings are, for a reader ("the bare-metal reference")

    def check(self) -> "EngineSettings":
        if self.checkpoint not in CHECKPOINTS:
            raise PredictorError(f"settings.checkpoint = {self.checkpoint!r}: expected one of {sorted(CHECKPOINTS)}")
        if self.speculative:
            raise PredictorError("settings.speculative = True: speculative decoding (MTP, EAGLE) is not priced by "
                                 "the tables (its accept length is a property of the prompts); predict without it "
                                 "or leave such an observation out")
        if self.kv_cache != "bf16":
            raise PredictorError(f"settings.kv_cache = {self.kv_cache!r}: only 'bf16' is priced (the MLA tables of "
                                 f"every system and the DSA module rows used here are bf16 KV)")
        if not (isinstance(self.cuda_graph_max_bs, int) and self.cuda_graph_max_bs >= 1):
            raise PredictorError(f"settings.cuda_graph_max_bs = {self.cuda_graph_max_bs!r}: expected an integer >= 1")
        return self


@dataclass(frozen=True)
class Prediction:
    """One predicted decode throughput with its band. Tokens/s are output tokens per second in aggregate over
    the `concurrency` sequences decoding together (per stream: divide by concurrency, or `per_stream`)."""

    model: str
    system: str
    tp: int
    concurrency: int
    context: int
    settings: EngineSettings
    tok_s: float                          # the point: the draws' median (inside its own band)
    band: tuple[float, float]             # 5-95 % of the draws
    at_mid_tok_s: float                   # every input at its middle value
    step_ms: float                        # the point's step time
    step_band_ms: tuple[float, float]
    terms: pd.DataFrame                   # the step at middle inputs by term (ms), and each term's kind
    ranges: pd.DataFrame                  # every range drawn: input, low, mid, high, unit, kind, source, acts
    draws: np.ndarray = field(repr=False, default=None)

    @property
    def per_stream(self) -> tuple[float, float, float]:
        """(point, band low, band high) per stream."""
        c = float(self.concurrency)
        return self.tok_s / c, self.band[0] / c, self.band[1] / c

    def percentile(self, observed_tok_s: float) -> float:
        """The share of the draws (in %) below an observed aggregate tokens/s."""
        return 100.0 * float(np.mean(self.draws < float(observed_tok_s)))

    def inside(self, observed_tok_s: float) -> bool:
        return bool(self.band[0] <= float(observed_tok_s) <= self.band[1])


#: the deployments data/reference/engine_settings.csv records, by name
REFERENCE = "bare-metal reference"


@lru_cache(maxsize=16)
def deployment_settings(deployment: str = REFERENCE) -> EngineSettings:
    """The EngineSettings a recorded deployment ran with (data/reference/engine_settings.csv: each setting with its
    source, and what prices it); PredictorError naming the deployments there where the name is not one."""
    import ast

    from helpers.core import recorded
    t = recorded.load("reference/engine_settings.csv")
    rows = t[t["deployment"] == deployment]
    if not len(rows):
        raise PredictorError(f"no deployment {deployment!r} in data/reference/engine_settings.csv; it has "
                             f"{sorted(t['deployment'].unique())}")
    fields = {}
    for r in rows.itertuples():
        if isinstance(r.field, str) and r.field.strip():
            if r.field not in EngineSettings.__dataclass_fields__:
                raise PredictorError(f"engine_settings.csv: {deployment!r} sets unknown field {r.field!r}")
            fields[r.field] = ast.literal_eval(str(r.field_value))
    return EngineSettings(**fields, label=deployment).check()


def system_name(system: str) -> str:
    """The book's name of a system given by either name (KernelTableError-like PredictorError otherwise)."""
    if system in kt.SYSTEMS.values():
        return system
    key = str(system).strip().lower()
    if key in kt.SYSTEMS:
        return kt.SYSTEMS[key]
    raise PredictorError(f"system {system!r} has no kernel tables; known: {sorted(kt.SYSTEMS.values())} "
                         f"(or aiconfigurator's names {sorted(kt.SYSTEMS)})")


def _ranges(system: str, settings: EngineSettings, study) -> Inputs:
    return inputs(study)


def _acts(name: str, system: str, p: Parts, settings: EngineSettings, batch: int, m_fmt: str) -> str:
    """Whether an input acts on this prediction, and why not where it does not (shown beside each range)."""
    if name == "attention_kernel" and ATTENTION[system] == "dsa":
        return "no: the DSA module is timed whole"
    if name == "indexer" and ATTENTION[system] == "dsa":
        return "no: inside the DSA module"
    if name == "collective_curve" and not cl.has_community(system):
        return "no: no community curve for this system"
    if name == "moe_runner" and not moe_runner_differs(system, m_fmt, settings):
        return "no: the tables timed this runner"
    if name == "eager_launch" and batch <= settings.cuda_graph_max_bs:
        return f"no: batch {batch} is captured (cap {settings.cuda_graph_max_bs})"
    if name == "cpu_step_fraction" and not settings.overlap_scheduler:
        return "yes (overlap scheduler off: its high end is taken)"
    return "yes"


def moe_runner_differs(system: str, fmt: str, settings: EngineSettings) -> bool:
    """Whether the MoE runner asked for is not the kernel the tables timed for this system and precision."""
    table = TABLE_MOE.get((system, kt.DTYPE.get(fmt, fmt)))
    return table is None or settings.moe_runner not in SAME_RUNNER.get(table, ())


def range_for(ins: Inputs, name: str, system: str) -> Range:
    """The range of `name` for a prediction on `system`: the bare-metal reference's rows on the RTX PRO 6000 (its
    dense attention path: no indexer), the rows for all systems elsewhere (the indexer, inside the DSA module
    there, takes the dense path's row: it acts on nothing)."""
    key = "bare metal" if system == kt.RTX or name == "indexer" else system
    return ins.get(name, key)


def draw_inputs(ins: Inputs, system: str, samples: int, seed: int, mids: bool) -> dict[str, np.ndarray]:
    """`samples` seeded draws of every input in DRAWN for a prediction on `system` (or each at its middle value
    where `mids`); the Verdict draws bare metal through this, so its bands are predict()'s."""
    rng = np.random.default_rng(seed)
    d = {}
    for name in DRAWN:
        r = range_for(ins, name, system)
        d[name] = np.array([r.mid], dtype=float) if mids else r.draw(rng, samples)
    return d


def step_us(p: Parts, d: dict, system: str, settings: EngineSettings, fmt: str, floor_us: float) -> np.ndarray:
    """The step per draw (us): compute (the MoE runner's range on the routed experts where it acts), the
    collectives on the system's curves, the eager-launch cost above the CUDA-graph cap, CPU time, and the
    model's own error as a factor on the whole."""
    ones = np.ones_like(d["model_error"])
    moe = d["moe_runner"] if moe_runner_differs(system, fmt, settings) else ones
    gpu = compute_us(p, {**d, "indexer": d["indexer"] if ATTENTION[system] == "dense" else 0 * ones},
                     moe_factor=moe)
    gpu = gpu + cl.collectives_us(p, system, d["collective_curve"] if settings.nccl_tuned else ones,
                                  d["protocol_switch"], custom=settings.custom_allreduce and system in NVLINK)
    if p.batch > settings.cuda_graph_max_bs:
        gpu = gpu + d["eager_launch"] * p.kernels * max(0.0, cl.EAGER_FLOOR_US() - floor_us)
    cpu = d["cpu_step_fraction"] if settings.overlap_scheduler else np.full_like(ones, _cpu_high())
    return gpu * (1 + cpu) * d["model_error"]


def _cpu_high() -> float:
    from helpers.model.verdict.ranges import table_ranges
    return max(r.high for r in table_ranges() if r.name == "cpu_step_fraction")


def predict(model: str, system: str, tp: int, concurrency: int, context: int,
            settings: EngineSettings | None = None, *, floor_us: float | None = None,
            samples: int = SAMPLES, seed: int = SEED) -> Prediction:
    """GLM-5's decode throughput on eight GPUs of `system` at `concurrency` sequences decoding together with
    `context` tokens of KV cache each, under `settings` (EngineSettings; default SGLang's defaults), with its
    5-95 % band (see the module docstring).

    model: a file stem under data/models/ naming GLM-5's architecture ("glm5"); the checkpoint's precision is
    the settings' (`checkpoint`: "nvfp4" or "fp8"). system: a system with kernel tables (system_name). tp: 8.
    floor_us: the graph-replay floor per small kernel; None takes the committed decode-step measurement's.
    Raises PredictorError naming what it cannot price."""
    settings = (settings or EngineSettings()).check()
    sysname = system_name(system)
    if tp != mb.TP:
        raise PredictorError(f"tp = {tp!r}: only tensor parallelism {mb.TP} is priced (the op list and the tables' "
                             f"shapes are GLM-5's at TP{mb.TP})")
    if not (isinstance(concurrency, (int, np.integer)) and concurrency >= 1):
        raise PredictorError(f"concurrency = {concurrency!r}: expected an integer >= 1 (sequences decoding together)")
    if not (isinstance(context, (int, np.integer)) and context >= 0):
        raise PredictorError(f"context = {context!r}: expected an integer >= 0 (tokens of KV cache per sequence)")
    if model not in ("glm5", "glm5-fp8"):
        raise PredictorError(f"model = {model!r}: only GLM-5 is priced ('glm5'; the precision is settings.checkpoint)")
    cfg = CHECKPOINTS[settings.checkpoint]
    from helpers.model import arith as ma
    m = ma.load_model(cfg)
    fmt = m.fmt("routed_experts")
    floor = float(floor_us) if floor_us is not None else mb.step_measurement(None, "glm5").floor_us()
    kernel = TABLE_MOE.get((sysname, kt.DTYPE.get(fmt, fmt)))
    try:
        # the attention tables start at 2 tokens of KV cache: a shorter context is priced there (the same kernel)
        p = parts(cfg, int(concurrency), max(int(context), MIN_CONTEXT), floor, sysname, ATTENTION[sysname], kernel)
    except (kt.KernelTableError, mb.MeasuredBudgetError) as e:
        raise PredictorError(f"{sysname}, {cfg}, batch {concurrency}, context {context}: {e}") from None
    ins = _ranges(sysname, settings, mb.precision_study(None))
    d, mid = draw_inputs(ins, sysname, samples, seed, False), draw_inputs(ins, sysname, samples, seed, True)
    steps = step_us(p, d, sysname, settings, fmt, floor)
    tok = concurrency * 1e6 / steps
    lo, med, hi = (float(x) for x in np.percentile(tok, [BAND[0], 50, BAND[1]]))
    at_mid = float(concurrency * 1e6 / step_us(p, mid, sysname, settings, fmt, floor)[0])
    rows = []
    for name in DRAWN:
        r = range_for(ins, name, sysname)
        rows.append({"input": name, "low": r.low, "mid": r.mid, "high": r.high, "unit": r.unit, "kind": r.kind,
                     "source": r.source, "registered": r.registered,
                     "acts": _acts(name, sysname, p, settings, int(concurrency), fmt)})
    return Prediction(cfg, sysname, int(tp), int(concurrency), int(context), settings, med, (lo, hi), at_mid,
                      concurrency * 1e3 / med, (concurrency * 1e3 / hi, concurrency * 1e3 / lo),
                      terms(p, mid, sysname, settings, fmt, floor), pd.DataFrame(rows), tok)


def terms(p: Parts, mid: dict, system: str, settings: EngineSettings, fmt: str, floor_us: float) -> pd.DataFrame:
    """The step at middle inputs by term (ms): compute, collectives, eager launches, CPU time and the model error."""
    ones = np.ones(1)
    base = {**mid, "model_error": ones, "cpu_step_fraction": 0 * ones, "eager_launch": 0 * ones}
    no_coll = replace(p, collectives=(), curves=())
    comp = float(step_us(no_coll, base, system, settings, fmt, floor_us)[0])
    coll = float(step_us(p, base, system, settings, fmt, floor_us)[0]) - comp
    eager = float(step_us(p, {**base, "eager_launch": mid["eager_launch"]}, system, settings, fmt, floor_us)[0]) - comp - coll
    full = float(step_us(p, mid, system, settings, fmt, floor_us)[0])
    gpu = comp + coll + eager
    cpu_err = full - gpu
    return pd.DataFrame([{"term": "compute (kernel tables)", "ms": comp / 1e3, "kind": "reference"},
                         {"term": "collectives", "ms": coll / 1e3, "kind": "reference"},
                         {"term": "eager launches above the graph cap", "ms": eager / 1e3, "kind": "assumed"},
                         {"term": "CPU time and model error (middle values)", "ms": cpu_err / 1e3, "kind": "reference"},
                         {"term": "step", "ms": full / 1e3, "kind": "derived"}])


def as_dict(s: EngineSettings) -> dict:
    return asdict(s)
