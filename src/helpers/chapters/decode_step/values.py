"""The values 07_decode_step glues, one frozen dataclass per group: each field is a glue key the page cites
(helpers.core.glue.glue_all glues them all). Built from the dicts the chapter's functions return
(`ByteValues(**bytes_values(...))`), so a key missing or added there fails here, naming it."""
from __future__ import annotations

from dataclasses import dataclass

@dataclass(frozen=True)
class Shapes:
    """The model's shapes and one rank's share of them at the chapter's TP degree (section 1)."""

    dense_layers: int
    heads: int
    heads_rank: int
    inter: int
    inter_rank: int
    moe_layers: int
    tp: int


@dataclass(frozen=True)
class ByteValues:
    """What one rank reads per step, and the datasheet time of it (bytes_values)."""

    ctx: int
    peak_name: str
    peak_GBps: float
    moe_held: int
    held_gib: float
    gib_emul_1: float
    gib_ckpt_1: float
    bound_ms_1: float
    experts_1: float
    gib_emul_64: float
    gib_ckpt_64: float
    bound_ms_64: float
    experts_64: float


@dataclass(frozen=True)
class MeasurementValues:
    """The step measured: at 1 and the largest batch, long context, sweep time, launches (measurement_values)."""

    where: str
    device: str
    step_1: float
    step_64: float
    tok_1: float
    tok_64: float
    eager_1: float
    eager_kernel_us: float
    eager_text: str
    long_ctx: int
    step_64_long: float
    sparse_64_long: float
    sweep_s: float
    kernels_step: int
    floor_us: float
    eager_us: float
    copy_GBps: float


@dataclass(frozen=True)
class SplitValues:
    """Shares of the step by component, the launch floor's share and achieved bandwidth (split_values)."""

    share1_moe: float
    share64_moe: float
    share1_att: float
    share64_att: float
    share1_idx: float
    share64_idx: float
    share1_small: float
    share64_small: float
    floor_share_1: float
    moe_GBps_64: float
    moe_peak_64: float
    lm_GBps: float
    lm_peak_64: float          # lm_head's achieved bandwidth at the largest batch as a share of the datasheet's
    sum_vs_step_1: float
    sum_vs_step_64: float


@dataclass(frozen=True)
class FusionValues:
    """The fused step against the unfused one, bf16 and FP8, at 1 and the largest batch (fusion_values)."""

    fusion_where: str
    fusion_device: str
    fus_bf16_1: float
    unf_bf16_1: float
    fus_x_bf16_1: float
    fus_bf16_64: float
    unf_bf16_64: float
    fus_x_bf16_64: float
    k_fus_bf16_1: int
    k_unf_bf16_1: int
    k_fus_bf16_64: int         # the fused bf16 step's kernels at the largest batch (the kernel table is at one)
    compile_s_bf16: float
    fus_fp8_1: float
    unf_fp8_1: float
    fus_x_fp8_1: float
    fus_fp8_64: float
    unf_fp8_64: float
    fus_x_fp8_64: float
    k_fus_fp8_1: int
    k_unf_fp8_1: int
    compile_s_fp8: float
    fp8_vs_bf16_1: float
    fp8_vs_bf16_64: float
    fus_bmax: int
    eager_in_study: str


@dataclass(frozen=True)
class KernelValues:
    """Kernels per step against SGLang's op list (kernel_values)."""

    k_sglang: int
    k_sglang_coll: int
    k_vs_sglang: float         # at one sequence, as the kernel table
    k_vs_sglang_64: float      # the fused bf16 step's kernels at the largest batch over the op list's
    k_removed_pct: float


@dataclass(frozen=True)
class PrecisionByteValues:
    """What one rank reads in bf16 and in FP8, and the datasheet time of FP8's bytes (precision_bytes)."""

    gib_bf16_1: float
    gib_fp8_1: float
    fp8_share_1: float
    fp8_bound_ms_1: float
    gib_bf16_64: float
    gib_fp8_64: float
    fp8_share_64: float
    fp8_bound_ms_64: float


@dataclass(frozen=True)
class Fp8NumericsValues:
    """Where the FP8 check's tables come from (this run, or the committed CPU study) and how its FP8
    products ran on the CPU that computed them."""

    fp8_numerics_where: str
    fp8_cpu_products: str


@dataclass(frozen=True)
class Fp8AccuracyValues:
    """The FP8 step's accuracy against fp32 and its products' errors (fp8_accuracy_values)."""

    acc_bf16: float
    acc_fp8: float
    acc_fp8_act32: float
    acc_wrong: float
    acc_tol: float
    acc_ok: str
    acc_wrong_caught: str
    flips_bf16: float
    flips_fp8: float
    tok_fp8: float
    prod_fp8_lo: float
    prod_fp8_hi: float
    prod_bf16_hi: float
    prod_tol: float
    acc_amplification: float


@dataclass(frozen=True)
class PrecisionValues:
    """FP8 against bf16 in time, and what the second stream saved (precision_values; NaN where no FP8 study)."""

    fp8_step_x_1: float
    fp8_step_x_max: float
    fp8_moe_x_max: float
    fp8_moe_GBps_max: float
    bf16_moe_GBps_max: float
    fp8_att_x_1: float
    overlap_saved_1: float
    overlap_saved_max: float
    overlap_share_max: float
    prec_bmax: float


@dataclass(frozen=True)
class FidelityValues:
    """This step's GEMMs and experts against SGLang's kernels on the same GPU class (fidelity_texts)."""

    experts_impl: str
    experts_vs: str
    gemm_vs: str


@dataclass(frozen=True)
class EngineValues:
    """The fused step against the engine composite on the same GPU (engine_values)."""

    engine_tol: float
    eng_bf16_1: float
    eng_bf16_64: float
    eng_fp8_1: float
    eng_fp8_64: float
    engine_outside: str
    engine_worst: float


@dataclass(frozen=True)
class TuningValues:
    """The most each tuning the investigation tried could have sped up the VM's step (tuning)."""

    vm_step_ms: float
    moe_ms: float
    moe_gain: float
    graph_ms: float
    graph_gain: float
    graph_assumed_ms: float        # the same bound at the diagnosis's assumed launch costs for the recorded host
    graph_assumed_gain: float
    eager_assumed_us: float        # assumed (the diagnosis's first budget, section 1)
    graph_floor_assumed_us: float  # assumed (the same)
    n_kernels_engine: int


@dataclass(frozen=True)
class AnswerValues:
    """The answer box: the measured step over its bytes' time at the datasheet bandwidth (answer_values)."""

    floor_x_1: float
    floor_x_64: float


@dataclass(frozen=True)
class CheckValues:
    """The two-rank check of section 1 in the page's words, and the tolerance it is held to (bytes_section)."""

    check_text: str
    check_summary: str
    tol: float


@dataclass(frozen=True)
class StepTexts:
    """The step's own settings, what the emulated rank is, what the sparse path saved and the CPU sentence
    (steps_section)."""

    overlap_main: str
    meas_fusion: str
    cpu_text: str
    answer_what: str
    sparse_text: str


@dataclass(frozen=True)
class SplitTexts:
    """The split's takeaway, chosen by the measured step's fusion (split_section)."""

    split_takeaway: str


@dataclass(frozen=True)
class Fp8Texts:
    """Where the FP8 timings come from, whether this run tried them, and the settings the prose names
    (fp8_section)."""

    prec_source: str
    overlap_source: str
    prec_experts_impl: str
    fp8_trial: str
    dual_threshold: int
    quant_kernels: int
    fp8_verdict: str
    cpu_layers: int
