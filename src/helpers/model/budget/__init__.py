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

The package, by job: `terms` (quantities, links, the op lists, a scenario and the step time it predicts),
`inputs` (the inputs from data/ and from a run, the scenarios and the whole prediction table) and `observed`
(the observations beside the prediction, and the next steps ranked). Every name callers use is here:
`budget.X`.
"""
from __future__ import annotations

from .inputs import (BAREMETAL_SCENARIO, COMPARED, FITS_READER, GRAPHS_OFF_SCENARIO, PP_SCENARIO, RUN_SCENARIO,
                     TP4_SCENARIO, VM_SCENARIO, assumed_launch, baseline_scenario, mem_bandwidth, predict_all,
                     predict_from_run, read_fits, recorded_context, held_flat, reference_allreduce_link, reference_p2p_link,
                     scenarios, select_run_link, tokens_of_copy_sweep, vm_copy_link, workload_prefill_ratio,
                     recorded_prefill_ratio)
from .observed import (NEXT_STEP_MODEL, compare, observations, primary_observations, rank_next_steps)
from .terms import (ALGORITHMS, ATTENTION_OPS, DEFAULT_BATCHES, DENSE_MLP_OPS, FITS_RELPATH, HEAD_OPS, INDEXER_OPS,
                    KINDS, MOE_OPS, TERM_NAMES, TERMS, BudgetError, collective_time_us, dominant_term, kernel_table,
                    kernels_per_step, Link, predict, Quantity, Scenario, step_terms, verdict)

__all__ = [
    "KINDS", "ALGORITHMS", "TERMS", "TERM_NAMES", "DEFAULT_BATCHES", "FITS_RELPATH", "BudgetError", "Quantity",
    "Link", "collective_time_us", "ATTENTION_OPS", "INDEXER_OPS", "DENSE_MLP_OPS", "MOE_OPS", "HEAD_OPS",
    "kernel_table", "kernels_per_step", "Scenario", "step_terms", "predict", "dominant_term", "verdict",
    "mem_bandwidth", "assumed_launch", "workload_prefill_ratio", "recorded_prefill_ratio", "recorded_context", "tokens_of_copy_sweep",
    "vm_copy_link", "held_flat", "reference_allreduce_link", "reference_p2p_link", "read_fits", "select_run_link",
    "VM_SCENARIO", "BAREMETAL_SCENARIO", "PP_SCENARIO", "TP4_SCENARIO", "GRAPHS_OFF_SCENARIO", "RUN_SCENARIO",
    "COMPARED", "baseline_scenario", "scenarios", "predict_all", "predict_from_run", "FITS_READER",
    "observations", "primary_observations", "compare", "NEXT_STEP_MODEL", "rank_next_steps",
]
