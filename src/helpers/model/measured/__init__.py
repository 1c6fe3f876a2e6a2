"""The decode-step budget on measured compute, for the recorded GPUs (8x RTX PRO 6000, TP8).

Two ways to price one decode step of GLM-5 on the recorded GPU class, neither fitted to the observations
they are checked against:

1. **Measured kernels** (`kernel_terms`): every operation SGLang runs for which aiconfigurator ships a
   kernel time measured on RTX PRO 6000 Blackwell Server Edition takes that time (GEMMs by dtype, the
   flashinfer_cutlass NVFP4 MoE kernel, MLA decode attention and its two bmms, NCCL all-reduce and
   all-gather over 8 GPUs), interpolated between grid points where the shape falls between them. The
   small operations the tables do not cover (norms, rotary embedding, KV stores, the indexer's scores
   and top-k, top-k routing, activations, residual adds, embedding, sampling) cost one kernel each of the
   graph-replay floor measured on this run's GPU (measured floor x assumed count, labelled so). As SGLang
   does under CUDA graphs, the shared expert runs beside the routed experts (time = the longer of the
   two, aiconfigurator's own rule).
2. **Projection of this run's emulated step** (`projected_terms`, derived): each component's time on
   the recorded GPU = its launch floor (its kernels x the floor, both measured here) + the rest of its
   measured time x (its bytes at the checkpoint's precision / the bytes the emulation read) x (this GPU's
   datasheet bandwidth / the recorded GPU's). Stated in words: the component reaches the same fraction of
   the datasheet bandwidth on the recorded GPU as it did here, at the same shape and batch.

`op_fidelity` sets this run's per-op times beside aiconfigurator's for the same operation: on the same
GPU class (H200, like for like in bf16) and, projected, on the recorded one.

The package, by job: `studies` (the decode-step measurements: this run's, read through the reading chapter's
declared needs, or the committed studies), `pricing` (measured kernels, the projection, the budgets table and
the goal) and `fidelity` (this run's ops against aiconfigurator's, and the engine composite). Every name
callers use is here: `measured.X`.
"""
from __future__ import annotations

from .fidelity import (ENGINE_SMALL_OPS, ENGINE_STAND_INS, EXPERT_OPS, FP8_EXPERT_OPS, OVERLAP, engine_composite,
                       engine_fidelity, no_engine_here, op_fidelity, op_fidelity_table)
from .pricing import (AIC_BUDGETS, BUDGET_IDS, FIDELITY_TOLERANCE, PRICED, PROJECTED, aic_shares, budgets_table, with_indexer,
                      component_fidelity, components, goal, kernel_terms, pick_budget, projected_terms,
                      small_op_counts)
from .studies import (FUSED_ROLE, PRECISION_ROLE, STEP_CHAPTER, STEP_ROLE, TP, fusion_study, FusionStudy, fused_precisions,
                      gpu_bandwidth, MeasuredBudgetError, pick_fusion_study, precision_study, PrecisionStudy,
                      run_result, spec_name, step_measurement, StepMeasurement, unfused_measurement)

__all__ = [
    "STEP_CHAPTER", "STEP_ROLE", "FUSED_ROLE", "PRECISION_ROLE", "TP", "MeasuredBudgetError", "StepMeasurement",
    "step_measurement", "unfused_measurement", "FusionStudy", "fusion_study", "pick_fusion_study",
    "PrecisionStudy", "precision_study", "fused_precisions", "gpu_bandwidth", "spec_name", "run_result", "PRICED",
    "small_op_counts", "kernel_terms", "components", "FIDELITY_TOLERANCE", "PROJECTED", "component_fidelity",
    "projected_terms", "AIC_BUDGETS", "budgets_table", "with_indexer", "BUDGET_IDS", "pick_budget", "goal", "aic_shares",
    "EXPERT_OPS", "FP8_EXPERT_OPS", "op_fidelity", "op_fidelity_table", "ENGINE_STAND_INS", "ENGINE_SMALL_OPS",
    "OVERLAP", "engine_composite", "engine_fidelity", "no_engine_here",
]
