"""The verdict (a package, split by job): every prediction with its band, the VM predicted scenario by scenario, the share of the
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

Modules, lowest first: `ranges` (constants, the uncertain inputs and the observations), `compute` (the
step's compute from measured kernels), `scenarios` (the host-path models), `remedy` (the remedies
priced), `predict` (the Verdict: draws, bands, attribution, thresholds), `decision` (the conclusion and
the ceilings). Everything public is re-exported here: `from helpers.model import verdict as vd`.
"""
from __future__ import annotations

from helpers.model import kernels as kt
from helpers.model.verdict import calibration, collectives, predictor
from helpers.model.verdict.compute import Parts, bare_collectives_us, compute_us, parts, routed_us
from helpers.model.verdict.decision import CONCLUSIONS, STATUS, ceiling, conclusion, decide, relation_words, share_words
from helpers.model.verdict.predict import Verdict
from helpers.model.verdict.ranges import (BAND, BARE, CANNOT, EXPLAINS, INPUTS, MEASURE_COMMANDS, SAMPLES, SEED,
                                          SOFT_GRID, TP, VM, Inputs, Observation, Range, VerdictInputError,
                                          bare_floor_us, collective_range, inputs, observations, overlap_fractions,
                                          overlap_range, table_ranges)
from helpers.model.verdict.remedy import OUTCOMES, PRICED_AS, check_remedies, classify, outcomes_table, p2p_checks, remedies
from helpers.model.verdict.scenarios import (PAIR_H200, PAIR_PR, REMEDY_ARMS, HostPath, copy_scenarios, measured_scenario, tuned_scenario,
                                             nccl_scenario, pair_scenarios, rule_sizes, study_scenario,
                                             vm_collectives_us)

__all__ = ["calibration", "collectives", "kt", "predictor", "BAND", "BARE", "CANNOT", "CONCLUSIONS", "EXPLAINS", "INPUTS", "MEASURE_COMMANDS", "PAIR_H200", "PAIR_PR", "REMEDY_ARMS",
           "PRICED_AS", "SAMPLES", "SEED", "SOFT_GRID", "STATUS", "TP", "VM", "HostPath", "Inputs", "Observation",
           "Parts", "Range", "Verdict", "VerdictInputError", "bare_collectives_us", "bare_floor_us", "ceiling",
           "check_remedies", "classify", "collective_range", "OUTCOMES", "outcomes_table", "p2p_checks", "compute_us", "conclusion", "copy_scenarios", "decide", "inputs",
           "measured_scenario", "nccl_scenario", "observations", "overlap_fractions", "overlap_range",
           "pair_scenarios", "parts", "relation_words", "remedies", "routed_us", "rule_sizes", "share_words", "study_scenario", "table_ranges",
           "vm_collectives_us"]
