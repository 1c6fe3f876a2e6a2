"""Chapter 07_decode_step (notebooks/07_decode_step.ipynb): the decode step emulated, measured and read.

`PARAMS` is the chapter's parameter spec (the runbook checks a run's values against it before the run
starts; the notebook's validation cell validates against it). The chapter's tables, sentences and glued
values live in submodules, every public name re-exported here (`from helpers.chapters import decode_step
as ch`): `measurement` (the bytes, the step, its split, fidelity, tuning bounds), `precision` (bf16 against
FP8, the shared expert's overlap), `fusion` (what fusion bought, kernels against SGLang's op list, the
engine composite), `shown` (the page's tables with human headers, the answer's ratios, the Summary's
sentence on the two-rank check), `values` (one frozen dataclass per group of glue keys) and `sections` (one
function per section of the page, each returning a `Part`: its values, tables, shown tables and figure data).
"""
from __future__ import annotations

from helpers.chapters.decode_step.fusion import (FUSION_COLUMNS, KERNEL_COLUMNS, SGLANG_COMPONENT, engine_table,
                                                 engine_values, fusion_table, fusion_values, kernel_compare,
                                                 kernel_values, sglang_kernels)
from helpers.chapters.decode_step.measurement import (BYTES_BATCHES, CHAPTER, CHECK_NOT_RUN, CHECK_RAN, CPU_TEXT,
                                                      EAGER_TEXT, EAGER_TEXT_NONE, SHARE_KEYS, SPLIT, SPLIT_SHOWN,
                                                      SPARSE_TEXT, SPARSE_WHY, SPLIT_TAKEAWAY, bytes_table, bytes_values,
                                                      check_text, cpu_text,
                                                      dense_bytes, fidelity_texts, fidelity_values, graphs_vs_eager,
                                                      measurement_values, shape_values, sparse_text, split, split_by_batch,
                                                      split_table, split_values, step_ms, steps, sweep_config, tuning,
                                                      tuning_bounds, GRAPHS_ASSUMED, GRAPHS_HERE)
from helpers.chapters.decode_step.precision import (FP8_VERDICTS, PRECISION_KEYS, fp8_accuracy_values,
                                                    fp8_numerics, fp8_verdict, fp8_weight_table, has_overlap_pair, overlap_label,
                                                    overlap_steps, precision_bytes, precision_configs,
                                                    precision_experts_impl, precision_source, precision_split, precision_steps,
                                                    precision_values, time_precisions)
from helpers.chapters.decode_step.sections import (Part, bytes_section, fidelity_section, fp8_bytes_accuracy,
                                                   fp8_timings, fusion_section, save, split_section, steps_section,
                                                   tuning_section)
from helpers.chapters.decode_step.shown import (BYTES_SHOWN, CHECK_SUMMARY_FAILED, HEADERS, headers, CHECK_SUMMARY_NOT_RUN, CHECK_SUMMARY_PASSED,
                                                FIDELITY_SHOWN, SPLIT_SHOWN_HUMAN, STEPS_SHOWN, TUNING_SHOWN,
                                                ANSWER_WHAT, FIDELITY_SUMMARY, FIDELITY_SUMMARY_NONE, answer_values,
                                                answer_what, check_summary, fidelity_summary, human)
from helpers.chapters.decode_step.values import (AnswerValues, ByteValues, CheckValues, Fp8Texts, SplitTexts, StepTexts, EngineValues, FidelityValues, Fp8AccuracyValues, Fp8NumericsValues,
                                                 FusionValues, KernelValues, MeasurementValues, PrecisionByteValues,
                                                 PrecisionValues, Shapes, SplitValues, TuningValues)
from helpers.core import params
from helpers.model import arith as ma, step

#: the chapter's parameters (name -> helpers.core.params spec)
PARAMS = {
    "mode": params.choice("recorded", "auto", "replay"), "run_dir": params.string(), "model": ma.model_param(),
    "cpu_model": ma.model_param(), "tp": params.number(1, 1024, integer=True),
    "batches": params.number_list(1, 4096, integer=True), "contexts": params.number_list(1, 10**6, integer=True),
    "cpu_batches": params.number_list(1, 4096, integer=True),
    "cpu_contexts": params.depends(params.number_list(1, 10**6, integer=True), ("cpu_batches", "cpu_model"),
                                   step.cpu_memory_rule), "time_limit_s": params.number(1, 600),
    "fp8": params.choice("auto", "off"), "shared_overlap": params.choice("auto", "on", "off"),
    "fusion": params.choice(*step.FUSIONS), "eager": params.choice("on", "off")}

#: assumed, not measured: the least time one point of the CPU sweep takes (s): the scaled-down model's step over
#: 2 ranks, 3 timed repeats and 3 eager ones (on the 2-core development machine a point at batch 8 x context 96
#: took seconds); the estimate built on it is the least time the sweep can take
CPU_POINT_S_FLOOR = 0.5


def plan_time(v: dict) -> params.Estimate | None:
    """PLAN_TIME: the CPU sweep's least time (every cpu_batches x cpu_contexts point; it runs in mode auto
    where there is no GPU), or None in mode recorded."""
    if v["mode"] != "auto":
        return None
    points = len(v["cpu_batches"]) * len(v["cpu_contexts"])
    return params.Estimate(points * CPU_POINT_S_FLOOR, ("cpu_batches", "cpu_contexts"),
                           f"{points} points (cpu_batches x cpu_contexts) x an assumed least {CPU_POINT_S_FLOOR:g} s "
                           "per point on a CPU, a lower bound", "use fewer cpu_batches or cpu_contexts")


#: the least time the CPU sweep these values plan takes in its cell (the runbook refuses a plan over the limit)
PLAN_TIME = plan_time


def replayable(run_dir, parameters: dict) -> bool:
    """Whether a replay can present this chapter from what the run saved (mode replay): where the run timed the
    real model on a GPU (its step_times, step_bytes and step_meta; helpers.model.measured.step_measurement reads
    them) and saved the FP8 check it computed (fp8_check, fp8_products). A CPU run's sweep of the scaled-down model
    and its two-rank check are not presented again: such a chapter is kept as the run executed it."""
    from helpers.core import layout
    from helpers.model import measured as mb

    if not all(layout.exists(run_dir, CHAPTER, n) for n in ("fp8_check", "fp8_products")):
        return False
    try:
        return mb.step_measurement(run_dir, parameters.get("model", "glm5")).where == "this run"
    except Exception:   # noqa: BLE001 - whatever the run lacks, the replay keeps the chapter as measured
        return False


__all__ = ["replayable", "Part", "bytes_section", "fidelity_section", "fp8_bytes_accuracy", "fp8_timings", "fusion_section",
           "save", "split_section", "steps_section", "tuning_section", "CheckValues", "Fp8Texts", "SplitTexts",
           "StepTexts", "AnswerValues", "BYTES_SHOWN", "HEADERS", "headers", "CHECK_SUMMARY_FAILED", "CHECK_SUMMARY_NOT_RUN", "CHECK_SUMMARY_PASSED",
           "FIDELITY_SHOWN", "SPLIT_SHOWN_HUMAN", "STEPS_SHOWN", "TUNING_SHOWN", "answer_values", "check_summary",
           "ANSWER_WHAT", "FIDELITY_SUMMARY", "FIDELITY_SUMMARY_NONE", "answer_what", "fidelity_summary", "SPARSE_TEXT",
           "SPARSE_WHY", "sparse_text",
           "human", "BYTES_BATCHES", "CHAPTER", "CHECK_NOT_RUN", "CHECK_RAN", "CPU_TEXT", "EAGER_TEXT", "EAGER_TEXT_NONE",
           "FP8_VERDICTS", "FUSION_COLUMNS", "KERNEL_COLUMNS", "PARAMS", "PLAN_TIME", "PRECISION_KEYS",
           "SGLANG_COMPONENT",
           "SHARE_KEYS", "SPLIT", "SPLIT_SHOWN", "SPLIT_TAKEAWAY", "ByteValues", "EngineValues", "FidelityValues",
           "Fp8AccuracyValues", "FusionValues", "KernelValues", "MeasurementValues", "PrecisionByteValues",
           "PrecisionValues", "Shapes", "SplitValues", "TuningValues", "bytes_table", "bytes_values", "check_text",
           "cpu_text", "dense_bytes", "engine_table", "engine_values", "fidelity_texts", "fidelity_values", "fp8_accuracy_values",
           "fp8_verdict", "fp8_weight_table", "fusion_table", "fusion_values", "graphs_vs_eager", "has_overlap_pair",
           "kernel_compare", "kernel_values", "measurement_values", "overlap_label", "overlap_steps",
           "precision_bytes", "precision_configs", "precision_experts_impl", "precision_source", "precision_split", "precision_steps",
           "precision_values", "shape_values", "sglang_kernels", "split", "split_by_batch", "split_table",
           "split_values", "step_ms", "steps", "sweep_config", "time_precisions", "tuning", "tuning_bounds",
           "GRAPHS_ASSUMED", "GRAPHS_HERE"]
