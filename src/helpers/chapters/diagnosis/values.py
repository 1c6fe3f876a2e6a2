"""The values 07_diagnosis glues, one frozen dataclass per section: each field is a glue key the page cites
(helpers.core.glue.glue_all glues them all); page 1 (intro.md) and other pages cite some of them across
pages. Built from a section's `Part.values` (`InputsValues(**S.values)`), so a key missing or added
there fails here, naming it."""
from __future__ import annotations

from dataclasses import dataclass

@dataclass(frozen=True)
class OverviewValues:
    """The page's opening: the VM's one-stream speed and where the compute comes from (overview)."""

    obs_vm_1: float
    step_source_text: str


@dataclass(frozen=True)
class InputsValues:
    """Section 1 (the first budget): its inputs (inputs)."""

    bw: float
    kfloor_graph: float
    kfloor_eager: float
    n_kernels: int
    n_coll: int
    alpha: float
    beta: float
    ctx: int


@dataclass(frozen=True)
class MappingValues:
    """Section 1 (the first budget): the VM copy mapped to an 8-GPU all-reduce at one token (mapping)."""

    ring_1: float
    tree_1: float
    oneshot_1: float
    ref_1: float
    ref_lo_b: float     # the smallest and largest sizes the PCIe-switch page timed its all-reduce at (reference)
    ref_hi_kib: float


@dataclass(frozen=True)
class BaselineValues:
    """Section 1 (the first budget): the VM baseline budget, its verdict and shares (baseline)."""

    verdict: str
    pred_vm_1: float
    pred_vm_64: float
    share_comm_1: float
    share_mem_64: float


@dataclass(frozen=True)
class CheckValues:
    """Section 1 (the first budget): the old budget against every observation (check)."""

    sat_lo: float
    sat_hi: float
    sat_primary: float
    n_sat: int
    tol_pct: float
    n_ok: int
    err_vm_1: float
    miss_vm_1: float
    c_obs_vm_1: float
    c_pred_vm_1: float
    err_vm_64: float
    miss_vm_64: float
    c_obs_vm_64: float
    c_pred_vm_64: float
    err_bm_1: float
    miss_bm_1: float
    c_obs_bm_1: float
    c_pred_bm_1: float
    err_bm_64: float
    miss_bm_64: float
    c_obs_bm_64: float
    c_pred_bm_64: float
    goal_text: str
    pred_mixed_vm_64: float    # the budget's prediction at 64 with the workload's prompt tokens in each step (no observation)
    err_mixed_vm_64: float     # that prediction against the same observation (c_obs_vm_64), %
    prompt_ratio_nominal: float    # prompt tokens per output token from the nominal lengths (input_len / output_len)
    prompt_ratio_recorded: float   # the same from the recorded totals (total / output - 1), derived
    ctx_short_out: float       # the decode context if the prompts were nominal and the outputs shorter (derived)
    ctx_long_in: float         # the decode context if the outputs were nominal and the prompts longer (derived)
    pred_mixed_rec_vm_64: float    # the mixed prediction at 64 at the recorded ratio (no observation)
    err_mixed_rec_vm_64: float     # that prediction against c_obs_vm_64, %
    membusy_lo: float
    membusy_hi: float
    pred_membusy: float


@dataclass(frozen=True)
class MeasuredComputeValues:
    """Section 2: the budget on measured kernels and on the projection, and the goal (measured_compute)."""

    bm_mk_1: float
    bm_mk_err_1: float
    bm_pj_1: float
    bm_pj_err_1: float
    bm_aic_1: float
    bm_aic_err_1: float
    bm_old_1: float
    bm_old_err_1: float
    bm_obs_1: float
    bm_mk_ms_1: float
    bm_obs_ms_1: float
    goal_within_1: str
    goal_aic_1: str
    goal_largest_1: str
    goal_largest_ms_1: float
    goal_largest_pct_1: float
    goal_second_1: str
    goal_second_ms_1: float
    goal_second_pct_1: float
    bm_mk_64: float
    bm_mk_err_64: float
    bm_pj_64: float
    bm_pj_err_64: float
    bm_aic_64: float
    bm_aic_err_64: float
    bm_old_64: float
    bm_old_err_64: float
    bm_obs_64: float
    bm_mk_ms_64: float
    bm_obs_ms_64: float
    goal_within_64: str
    goal_aic_64: str
    goal_largest_64: str
    goal_largest_ms_64: float
    goal_largest_pct_64: float
    goal_second_64: str
    goal_second_ms_64: float
    goal_second_pct_64: float
    bm_indexer_text: str
    pj_tables_text: str
    pj_verdict: str
    pj_kept: str
    pj_prec_1: float
    pj_prec_64: float
    pj_comp_lo: float
    pj_comp_hi: float
    pj_validity_text: str
    small_floor_us: float      # the graph launch floor the small operations are priced at (measured, the step's GPU)
    small_ms_1: float          # those operations in the one-stream kernel-table budget (ms, derived)
    small_share_1: float       # their share of it (%)
    small_alt_floor_us: float  # the first budget's assumed floor for the recorded GPU
    small_alt_ms_1: float      # the one-stream kernel-table budget at that floor instead (ms, derived)
    small_ops_text: str        # the clause page 1 gives for that input
    aic_dist: str
    msg_kib_64: float
    bw_here: float
    bw_rtx: float
    meas_device: str
    meas_where: str
    aic_stock: str
    aic_sub: str


@dataclass(frozen=True)
class ProjectionCheckValues:
    """Section 2: the projection op by op against the recorded GPU's kernels (projection_check)."""

    pj_ratio_med: float
    pj_ratio_lo: float
    pj_ratio_hi: float
    pj_hi_op: str
    pj_lo_op: str
    here_text: str
    pj_small_idx_1: float
    pj_small_what: str


@dataclass(frozen=True)
class BareMetalBandValues:
    """Section 3: bare metal from measured inputs with its band, its split, and aiconfigurator's own estimate (bare_metal_band)."""

    bmb_pt_1: float
    bmb_lo_1: float
    bmb_hi_1: float
    bmb_obs_1: float
    bmb_err_1: float
    bmb_inside_1: str
    bmb_pctile_1: float
    bmb_atmid_1: float
    bmb_pt_64: float
    bmb_lo_64: float
    bmb_hi_64: float
    bmb_obs_64: float
    bmb_err_64: float
    bmb_inside_64: str
    bmb_pctile_64: float
    bmb_atmid_64: float
    bmf_lo_1: float
    bmf_med_1: float
    bmf_hi_1: float
    bmf_pctile_1: float
    bmf_inside_1: str
    bmf_lo_64: float
    bmf_med_64: float
    bmf_hi_64: float
    bmf_pctile_64: float
    bmf_inside_64: str
    hidden_n: int              # the points the hidden fraction's range is taken over
    hidden_def: str            # what the fraction is (saved over the shared expert's own operations)
    eager_assumed_us: float    # the eager launch cost the band assumes (book-assumptions)
    eager_meas_us: float       # what the decode-step measurement timed eagerly (measured, its own GPU; NaN: none)
    eager_text: str
    hidden_where: str
    split_attention_what: str
    bm_where_1: str
    bm_where_64: str
    bm_where_short_1: str
    bm_where_short_64: str
    bm_history: str
    bm_takeaway: str
    changed_inputs: str
    n_changed: int
    first_band_text: str
    mid_vs_budget: str         # the inputs whose middle values differ from section 2's single-value budget
    n_samples: int
    band_seed: int
    hidden_mid_pct: float
    split_step_1: float        # the band median's step (the prediction's)
    split_step_mid_1: float    # the step at every input's middle value, whose shares the split gives
    split_experts_1: float
    split_collectives_1: float
    split_other_1: float
    split_attention_1: float
    split_step_64: float
    split_step_mid_64: float
    split_experts_64: float
    split_collectives_64: float
    split_other_64: float
    split_attention_64: float
    peer_1: float
    peer_err_1: float
    peer_64: float
    peer_err_64: float
    peer_what: str


@dataclass(frozen=True)
class HeldOutValues:
    """Section 3, held out: the predictor against observations it was not built beside (calibration_section.held_out)."""

    cal_n: int
    cal_n_systems: int
    cal_n_inside: int
    cal_share_pct: float
    cal_median_err_pct: float
    cal_worst_err_pct: float
    cal_worst_what: str
    cal_median_pctile: float
    cal_lean_text: str       # which way the predictor leans on the held-out points, by calibration_section.LEAN_MARGIN
    cal_rtx_n: int
    cal_rtx_inside: int
    cal_rtx_median_pct: float
    cal_rtx_worst_pct: float
    cal_registered: str
    cal_n_left_out: int
    me_low_pct: float
    me_high_pct: float
    cal_goal_text: str
    cal_implication: str


@dataclass(frozen=True)
class VmPredictedValues:
    """Section 4: the VM predicted scenario by scenario (vm_predicted)."""

    n_scenarios: int
    n_admitted: int
    set_aside_words: str
    n_vm_points: int
    n_inside: int
    n_rows: int
    n_inside_scenarios: int
    vmp_lo_1: float
    vmp_hi_1: float
    vmp_lo_64: float
    vmp_hi_64: float
    vm_obs_1: float
    vm_obs_64: float
    n_inside_1: int
    set_aside: str
    vm_takeaway: str


@dataclass(frozen=True)
class AttributionValues:
    """Section 4 (second part): the VM's loss per step and the share each scenario explains (attribution)."""

    loss_1: float
    loss_lo_1: float
    share_lo_1: float
    share_hi_1: float
    share_range_1: str
    loss_64: float
    loss_lo_64: float
    share_lo_64: float
    share_hi_64: float
    share_range_64: str
    band_basis_64: str   # what the 64-stream bands draw: the decode batch's two ends, their messages and losses
    band_ends_64: str    # which model and batch give the 64-stream range's two ends
    left_1: float
    step_obs_1: float
    left_17: float
    step_obs_17: float
    left_relation: str
    slow_1: float
    slow_64: float
    ratio_relation: str
    ratio_implication: str
    bm_growth_64: float
    issue25_ms: float    # the fixed time per forward a healthy bare-metal host paid (reference, rtx6kpro issue #25)


@dataclass(frozen=True)
class DecisionValues:
    """Section 5: the decision rule, its thresholds and its conclusion (decision); page 1 cites conclusion_case, conclusion_text and page1_status."""

    conclusion_case: str
    conclusion_text: str
    page1_status: str
    cmd_nccl: str
    copy_one_us: float
    seed_floor_ms: float
    seed_floor_pct: float
    n_ar: int
    cannot_pct: float
    t80_1: float
    t25_1: float
    kib_1: float
    bare_ar_1: float
    t80_64: float
    t25_64: float
    kib_64: float
    bare_ar_64: float
    tuned_curve_text: str
    curve_source_text: str
    seed_ring_pct: float
    seed_once_net_text: str
    seed_ring_steps: int
    seed_ring_gross_pct: float
    seed_ring_net_pct: float
    middle_means: str
    trace_cmd: str
    trace_what: str
    ach_batch: float
    ach_kib: float
    ach_loss: float
    ach_t80: float
    ach_t25: float
    ach_bare: float
    ach_vm_step: float
    ach_bm_step: float
    ach_loss_prop: float
    ach_bytes: int
    ach_bm_from: str
    bare_ar_1_points: str


@dataclass(frozen=True)
class CeilingValues:
    """Section 3 (a dropdown): every point as a fraction of the weight-bytes floor (ceilings)."""

    ceiling_takeaway: str
    ceil_1: float
    ceil_gb_1: float
    ceil_ms_1: float
    frac_vm_1: float
    frac_bm_1: float
    ceil_64: float
    ceil_gb_64: float
    ceil_ms_64: float
    frac_vm_64: float
    frac_bm_64: float
    ceil_bm_1: float           # bare metal's own floor: its dense path reads no indexer bytes
    ceil_bm_gb_1: float
    ceil_bm_64: float
    ceil_bm_gb_64: float


@dataclass(frozen=True)
class RunLinkValues:
    """The link this run measured and what the budget predicts with it (run_link)."""

    run_text: str


@dataclass(frozen=True)
class CollectivesValues:
    """This run's all-to-all against its all-reduce (collectives)."""

    coll_text: str


@dataclass(frozen=True)
class RemedyValues:
    """Section 6: the remedies ranked (remedies)."""

    top_remedy: str
    top_gain_lo: float
    top_gain_hi: float
    top_tok_lo: float
    top_tok_hi: float
    bm_over_vm_1: float
    unpriced_remedies: str
    top_how: str
    top_source: str


@dataclass(frozen=True)
class AnswerValues:
    """The answer box: per point, the predicted step (ms), the observed one and the share explained (answer)."""

    ans_bm_pred_1: float
    ans_bm_lo_1: float
    ans_bm_hi_1: float
    ans_bm_obs_1: float
    ans_bm_expl_1: float
    ans_vm_lo_1: float
    ans_vm_hi_1: float
    ans_vm_obs_1: float
    ans_vm_expl_lo_1: float
    ans_vm_expl_hi_1: float
    ans_bm_pred_64: float
    ans_bm_lo_64: float
    ans_bm_hi_64: float
    ans_bm_obs_64: float
    ans_bm_expl_64: float
    ans_vm_lo_64: float
    ans_vm_hi_64: float
    ans_vm_obs_64: float
    ans_vm_expl_lo_64: float
    ans_vm_expl_hi_64: float
