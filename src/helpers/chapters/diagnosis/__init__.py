"""Chapter 07_diagnosis, what it says, computed: its tables, the rows it cites and the numbers its prose glues.

The chapter (notebooks/07_diagnosis.ipynb) builds one `Diagnosis` from its inputs, stated there: the model,
the run's VM/P2P fits and collective sweep (or, in recorded mode, none, on purpose: `fits=None`) and the
decode-step measurement (this run's, or the committed H200 study: helpers.model.measured.step_measurement).
Then it calls one function per section. Each returns a `Part`: the values its prose glues, the tables the
run keeps (under the names helpers.core.layout declares for 07_diagnosis; `save` writes them), the tables
the page only shows, and the data its figure is drawn from (helpers.core.plotting draws it).

Every row the prose cites is picked by its columns (helpers.core.pick.one, or
helpers.model.measured.pick_budget), so a removed row or a renamed label raises an error naming it
instead of dropping a number. Sentences whose wording depends on the mode or the run (`run_text`,
`coll_text`, `goal_text`, `step_source_text`) are whole variants chosen here.

The code is split by section: `answer` (the page's opening, predicted against observed per point, and
the page's views of the tables: at most seven columns, human headers), `build` (the Diagnosis, Part, save, the page-wide values),
`budget_sections` (the page's sections 1 and 2: the first budget and the budget on measured compute; in
section 5: this run's link and collectives), `verdict_sections` (sections 3 to 6, from helpers.model.verdict), `folds` (each section's folded tables as the page shows them) and `values` (one frozen dataclass per section: its fields are the glue
keys). Every public name is re-exported here: `from helpers.chapters import diagnosis as ch`. `PARAMS`
is the chapter's parameter spec (the runbook checks a run's values against it before the run starts).
"""
from __future__ import annotations

from helpers.chapters.diagnosis.answer import HEADERS, SHOWN, Folded, answer, folded, headers, human
from helpers.chapters.diagnosis.budget_sections import (BASELINE_COLUMNS, BUDGET_COLUMNS, BUDGET_KEYS, COLL_TEXT_CPU_ONLY, COLL_TEXT_NONE,
                                                        COLL_TEXT_NO_RANKS, COLL_TEXT_ONE_OP, COLL_TEXT_RATIO,
                                                        COMPARISON_COLUMNS,
                                                        GOAL_TEXT, MAPPING_TOKENS, OBSERVATION_COLUMNS,
                                                        PJ_TABLES_ALL_KEPT, PJ_TABLES_NONE, PJ_TABLES_SOME,
                                                        PJ_VERDICT, PROJECTION_CHECK_COLUMNS, RUN_COLUMNS,
                                                        RUN_TEXT_LINK, RUN_TEXT_NO_FITS, RUN_TEXT_NO_LINK,
                                                        RUN_TEXT_RECORDED, aiconfigurator_outcome, baseline, check,
                                                        collective_points, collectives, fits_on_gpus, goal_text,
                                                        inputs, mapping, measured_compute, projection_check,
                                                        projection_tables_text, run_link,
                                                        run_link_admissibility)
from helpers.chapters.diagnosis.build import (BARE, CHAPTER, ENDS, FALLBACK_STEP_TEXT, POINTS, RECORDED_STEP_TEXT,
                                              RUN_STEP_TEXT, VM, Diagnosis, DiagnosisError, Part, overview,
                                              run_measurements, save, step_source_text)
from helpers.chapters.diagnosis.calibration_section import held_out
from helpers.chapters.diagnosis.folds import (attribution_fold, band_fold, decision_fold, first_budget_fold,
                                              held_out_fold, measured_compute_fold, remedies_fold, run_fold,
                                              vm_predicted_fold)
from helpers.chapters.diagnosis.values import (AnswerValues, AttributionValues, BareMetalBandValues, BaselineValues, CeilingValues,
                                               CheckValues, CollectivesValues, DecisionValues, HeldOutValues, InputsValues,
                                               MappingValues, MeasuredComputeValues, OverviewValues,
                                               ProjectionCheckValues, RemedyValues, RunLinkValues, VmPredictedValues)
from helpers.chapters.diagnosis.verdict_sections import (BAND_COLUMNS, CEILING_TAKEAWAY, REMEDY_COLUMNS,
                                                         VM_COLUMNS, VM_TAKEAWAY_NONE, VM_TAKEAWAY_SOME, attribution,
                                                         bare_metal_band, ceilings, decision, guest_context, peer_on_glm5_graph,
                                                         remedies, vm_predicted)
from helpers.core import params
from helpers.model import arith as ma

#: the chapter's parameters (name -> helpers.core.params spec)
def _both_or_neither(v768: float, v12: float) -> str | None:
    """The 8-rank all-reduce measured on a VM at both message sizes, or at neither (one alone cannot place the
    host path at both ends of the decision rule)."""
    if (v12 > 0) != (v768 > 0):
        given, missing = ("vm_allreduce_12k_us", "vm_allreduce_768k_us") if v12 > 0 else \
            ("vm_allreduce_768k_us", "vm_allreduce_12k_us")
        return (f"{given} is given and {missing} is not: give both (the all-reduce timed at 12 KiB and at 768 KiB "
                f"on the VM, e.g. -p 07_diagnosis.{missing}=<µs>) or neither")
    return None


PARAMS = {"mode": params.choice("recorded", "auto"), "run_dir": params.string(),
          "model": ma.model_param(), "tolerance": params.number(0.01, 1.0),
          "vm_allreduce_12k_us": params.number(0.0, 1e6),
          "vm_allreduce_768k_us": params.depends(params.number(0.0, 1e6), "vm_allreduce_12k_us", _both_or_neither)}

__all__ = ["held_out", "held_out_fold", "HeldOutValues", "attribution_fold", "band_fold", "decision_fold", "first_budget_fold", "measured_compute_fold",
           "remedies_fold", "run_fold", "vm_predicted_fold", "AnswerValues", "Folded", "HEADERS", "SHOWN", "answer", "folded", "headers", "human", "AttributionValues", "BAND_COLUMNS", "BARE", "BASELINE_COLUMNS", "BUDGET_COLUMNS",
           "BUDGET_KEYS", "BareMetalBandValues", "BaselineValues", "CEILING_TAKEAWAY", "CHAPTER", "COLL_TEXT_CPU_ONLY", "COLL_TEXT_NONE",
           "COLL_TEXT_ONE_OP", "COLL_TEXT_RATIO", "COMPARISON_COLUMNS", "CeilingValues", "CheckValues",
           "CollectivesValues", "DecisionValues", "Diagnosis", "DiagnosisError", "ENDS", "FALLBACK_STEP_TEXT",
           "GOAL_TEXT", "InputsValues", "MAPPING_TOKENS", "MappingValues", "MeasuredComputeValues",
           "OBSERVATION_COLUMNS", "OverviewValues", "PARAMS", "PJ_TABLES_ALL_KEPT", "PJ_TABLES_NONE",
           "PJ_TABLES_SOME", "PJ_VERDICT", "POINTS", "PROJECTION_CHECK_COLUMNS", "Part", "ProjectionCheckValues",
           "RECORDED_STEP_TEXT", "REMEDY_COLUMNS", "RUN_COLUMNS", "RUN_STEP_TEXT", "RUN_TEXT_LINK",
           "RUN_TEXT_NO_FITS", "COLL_TEXT_NO_RANKS", "RUN_TEXT_NO_LINK", "RUN_TEXT_RECORDED", "RemedyValues",
           "RunLinkValues", "VM",
           "VM_COLUMNS", "VM_TAKEAWAY_NONE", "VM_TAKEAWAY_SOME", "VmPredictedValues", "aiconfigurator_outcome",
           "attribution", "bare_metal_band", "guest_context", "baseline", "ceilings", "check", "collective_points", "collectives",
           "decision", "fits_on_gpus", "goal_text", "inputs", "mapping", "measured_compute", "overview",
           "peer_on_glm5_graph", "projection_check", "projection_tables_text", "remedies", "run_link",
           "run_link_admissibility", "save",
           "step_source_text", "vm_predicted"]
