"""Where a run's results live, what they hold, and which chapter needs which.

A run is a folder `runs/<run-id>/`; chapter `<stem>` writes its results under `results/<stem>/`. This
module is the one place that knows those paths, the file each result is stored in, the columns a table
must have, and which results a chapter reads from another chapter (`NEEDS`). Chapters and the runbook go
through it; nothing else spells a results path.

    out = layout.chapter_dir(run_dir, "06_vm_p2p")       # <run>/results/06_vm_p2p/, created
    layout.save(run_dir, "06_vm_p2p", "fits", df)         # checked against its declared columns
    fits = layout.load(run_dir, "06_vm_p2p", "fits")      # MissingResult names the chapter to run

The runbook checks `NEEDS` before the first chapter starts (`check_needs`): a chapter whose required
inputs are neither produced earlier in the same run nor already in the run directory is refused with a
message that says which chapter to add, or how to use the recorded inputs on purpose. A need with a
`fallback` is optional: without it the chapter uses what the fallback names (a committed study, found
through helpers.core.recorded.study, where `study` gives its role) and says so on its page.
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from helpers.core import results


class LayoutError(RuntimeError):
    """An unknown result name, or a table that does not have its declared columns."""


class MissingResult(FileNotFoundError):
    """A result another chapter should have written is not in the run directory."""


@dataclass(frozen=True)
class Result:
    """One result file of one chapter."""
    chapter: str                       # the chapter that writes it, e.g. "06_vm_p2p"
    name: str                          # its name in code, e.g. "fits"
    file: str                          # its file under results/<chapter>/, e.g. "fits.csv"
    description: str
    columns: tuple[str, ...] = ()      # a table's required columns (empty: not checked, or not a table)

    @property
    def kind(self) -> str:
        return Path(self.file).suffix.lstrip(".")


#: The fit table's columns (the VM/P2P chapter writes it, the diagnosis reads it).
FIT_COLUMNS = ("scope", "path", "harness", "variant", "backend", "world_size", "device", "alpha_us",
               "beta_GBps", "median_rel_err", "max_rel_err", "n_points", "min_bytes", "max_bytes", "kind")

#: The serving sweep's columns (chapter 03 writes it; helpers.serving.experiments.SWEEP_COLUMNS shows them).
SERVING_SWEEP_COLUMNS = ("variant", "workload", "concurrency", "completed", "failed", "output_throughput",
                         "total_throughput", "achieved_concurrency", "median_ttft_ms", "median_tpot_ms", "p99_itl_ms",
                         "median_e2e_latency_ms", "server_peak_rss_mib", "server_memory_cap_mib")

RESULTS: dict[tuple[str, str], Result] = {
    (r.chapter, r.name): r for r in (
        Result("01_environment", "probe", "probe.json",
               "the environment probe's full result (helpers.machine.probe)"),
        Result("02_nan_crash", "live_matrix", "live_matrix.csv",
               "every configuration the NaN matrix launched live, with its outcome (helpers.serving.classify)",
               ("name", "outcome", "stands_for", "startup_s", "wall_s", "request_s", "memory", "detail")),
        Result("02_nan_crash", "attempts", "attempts.jsonl",
               "the NaN matrix's finished attempts, one JSON line each, written as they finish (resumed from)"),
        Result("02_nan_crash", "logs", "logs", "the folder of the launched servers' logs, one per configuration"),
        Result("03_baselines_tuning", "sweep", "sweep.csv", "every point of the live concurrency sweep",
               SERVING_SWEEP_COLUMNS),
        Result("03_baselines_tuning", "sweep_rows", "sweep.jsonl",
               "the live sweep's finished points, one JSON line each, written as they finish (resumed from)"),
        Result("03_baselines_tuning", "logs", "logs", "the folder of the launched servers' logs, one per variant"),
        Result("03_baselines_tuning", "gpu_profile", "gpu_profile.csv",
               "medians of this machine's GPU samples per sweep point (helpers.machine.gpumon)",
               ("variant", "workload", "concurrency", "n_samples", "util_gpu_pct", "util_mem_pct", "power_w",
                "power_pct_of_limit", "sm_clock_mhz")),
        Result("03_baselines_tuning", "study_points", "study_points.jsonl",
               "the load study's points, one JSON line per load (its requests' records included), written as each "
               "ends (resumed from; issue 46)"),
        Result("03_baselines_tuning", "vllm_results", "vllm",
               "the load study's points as `vllm bench serve --save-result` JSON files, one per point "
               "(helpers.serving.formats), for readers who load results in vllm's tools"),
        Result("03_baselines_tuning", "aiperf_results", "aiperf",
               "the load study's points in AIPerf's export files (profile_export.jsonl per request and "
               "profile_export_aiperf.json per point, one folder per point; helpers.serving.formats)"),
        # the load study's files before issue 46 (a run made before it holds them; the study now keeps every point
        # in study_points.jsonl)
        Result("03_baselines_tuning", "rate_rows", "rate_sweep.jsonl",
               "the open-loop rate sweep's finished points (load studies before issue 46)"),
        Result("03_baselines_tuning", "capacity_concurrency", "capacity_concurrency.jsonl",
               "the capacity search's points over concurrency (load studies before issue 46)"),
        Result("03_baselines_tuning", "capacity_rate", "capacity_rate.jsonl",
               "the capacity search's points over request rate (load studies before issue 46)"),
        Result("03_baselines_tuning", "load_study", "load_study.json",
               "the load study: what it measured, its points, capacities with their intervals, the drift check, "
               "the client's overhead and the SLOs they were judged at"),
        Result("03_baselines_tuning", "gpu_samples", "gpu_samples.csv", "every GPU sample taken during the sweep"),
        Result("03_baselines_tuning", "served", "served.json",
               "what the live sweep served and how fast: the server (launched or given), engine, model, tensor-parallel "
               "size, tokens/s at one stream and at the highest concurrency with its achieved concurrency "
               "(helpers.serving.observed; the machine verdict's observation)"),
        Result("03_baselines_tuning", "headline", "headline.csv",
               "single-stream and saturated output throughput: recorded (original VM) and measured here",
               ("who", "variant", "workload", "single_stream_tok_s", "max_concurrency", "saturated_tok_s",
                "scaling (derived)")),
        Result("04_moe_runners", "runner_status", "runner_status.csv", "each MoE runner's launch outcome",
               ("runner", "outcome", "detail", "memory")),
        Result("04_moe_runners", "attempts", "attempts.jsonl",
               "each MoE runner's launch attempt, one JSON line each, written as they finish (resumed from)"),
        Result("04_moe_runners", "sweep", "sweep.csv", "every point of every repeat of every runner that served",
               ("runner", "repeat", "workload", "concurrency", "output_throughput")),
        Result("04_moe_runners", "sweep_rows", "sweep.jsonl",
               "the runners' finished points, one JSON line each, written as they finish (resumed from)"),
        Result("04_moe_runners", "logs", "logs", "the folder of the launched servers' logs, one per runner and launch"),
        Result("04_moe_runners", "spread", "spread.csv",
               "output throughput across repeats per runner and concurrency: mean, min, max, range",
               ("runner", "workload", "concurrency", "mean", "min", "max", "count", "range_pct")),
        Result("04_moe_runners", "verdicts", "verdicts.csv",
               "each pair of runners per concurrency: difference of means, and whether their repeat ranges overlap",
               ("workload", "concurrency", "a", "b", "diff_pct (derived)", "ranges_overlap", "verdict")),
        Result("05_expert_parallelism", "parameters", "parameters.csv",
               "the model's parameters and bytes per weight group, from its configuration (derived)",
               ("group", "format", "format_assumed", "tp_placement", "params", "active_params", "bytes",
                "params_B", "active_B", "GB")),
        Result("05_expert_parallelism", "hidden_size", "hidden_size.csv",
               "per recorded copy: the bytes it moved and the hidden size that implies (derived)",
               ("label", "tokens", "bytes_moved (bandwidth x latency)", "implied hidden size")),
        Result("05_expert_parallelism", "memory_fit", "memory_fit.csv",
               "what fits per GPU on each system and layout, and the KV cache it leaves (derived)",
               ("system", "gpu_memory_GiB", "system_kind", "layout", "gpus_used", "weights_per_gpu_GiB",
                "budget_GiB", "fits", "kv_tokens_per_gpu", "sequences_at_context")),
        Result("05_expert_parallelism", "collectives", "collectives.csv",
               "the collectives of one TP decode step (helpers.model.arith.collective_schedule)",
               ("collective", "kind", "per_step", "bytes_per_token")),
        Result("05_expert_parallelism", "ep_vs_tp_volume", "ep_vs_tp_volume.csv",
               "bytes one GPU sends per MoE layer and decode step, TP all-reduce against EP all-to-all (derived)",
               ("layout", "bytes_sent_per_gpu", "rounds", "tokens")),
        Result("06_vm_p2p", "fits", "fits.csv",
               "alpha-beta fits of every copy and collective sweep of this machine, and of the recorded VM",
               FIT_COLUMNS),
        Result("06_vm_p2p", "collective_sweep", "collective_sweep.csv",
               "every collective point measured by the VM/P2P chapter",
               ("op", "backend", "variant", "world_size", "method", "harness", "size_bytes", "time_us")),
        Result("06_vm_p2p", "copy_sweep", "copy_sweep.csv",
               "every copy point measured by the VM/P2P chapter: path x harness x size (helpers.interconnect.copies)",
               ("path", "harness", "device", "size_bytes", "time_us", "bandwidth_GBps", "kind")),
        Result("06_vm_p2p", "copy_skipped", "copy_skipped.csv",
               "the copy paths and harnesses (or single points) this machine could not run, with the reason",
               ("path", "harness", "size_bytes", "reason")),
        Result("06_vm_p2p", "collective_runs", "collective_runs.csv",
               "the VM/P2P chapter's collective launches: status, points, time, and why a launch failed",
               ("variant", "backend", "world_size", "method", "status", "points", "message")),
        Result("06_vm_p2p", "collective_points", "collective_points",
               "the collective launches' folder (helpers.interconnect.collectives.resume_collectives): finished "
               "points per launch, from which a launch resumes"),
        Result("06_vm_p2p", "statements", "statements.json",
               "what the collective suite's plan could not run on the measured machine, and why (SuiteResult.statements)"),
        Result("06_vm_p2p", "machine", "machine.json",
               "the measured machine as the collective suite saw it: GPUs, GPU name, CPU cores, peer pairs"),
        Result("06_vm_p2p", "cuda_p2p", "cuda_p2p.csv",
               "CUDA's peer-access answer per GPU pair, where the probe gave no P2P matrix (copies.p2p_matrix)"),
        Result("06_vm_p2p", "hostpath", "hostpath",
               "the host-path study's folder (helpers.interconnect.hostpath): finished points per launch, "
               "named by their settings, and the generated VM topology files"),
        Result("06_vm_p2p", "hostpath_sweep", "hostpath_sweep.csv",
               "the host-path study's all-reduce points: every arm x world size x size, with the arm's settings",
               ("op", "world_size", "size_bytes", "time_us", "method", "arm", "arm_settings", "arm_env")),
        Result("06_vm_p2p", "hostpath_runs", "hostpath_runs.csv",
               "the host-path study's launches: status, points kept and new, time, and why a launch did not run",
               ("arm", "world_size", "status", "points", "message")),
        Result("07_decode_step", "step_times", "step_times.csv",
               "the emulated decode step timed on this machine: per point the step, each component and op alone",
               ("model", "device", "tp", "dtype", "attention", "batch", "context", "mode", "what", "median_us",
                "p10_us", "p90_us", "repeats", "kernels")),
        Result("07_decode_step", "step_bytes", "step_bytes.csv",
               "bytes one rank reads per component of the emulated step (emulated and checkpoint precision)",
               ("batch", "context", "component", "bytes_emulated", "bytes_checkpoint", "distinct_experts")),
        Result("07_decode_step", "step_meta", "step_meta.json",
               "the decode-step measurement's launch floor, copy bandwidth, memory plan and device"),
        Result("07_decode_step", "sweep", "sweep",
               "the step sweep's working folder (helpers.model.steptime.sweep): timings.csv and bytes.csv rewritten "
               "as each point finishes, so an interrupted sweep keeps its points, and meta.json at the end"),
        Result("07_decode_step", "precision_sweeps", "precision_sweeps",
               "the FP8 and one-stream sweeps' working folders (sweep-<name>/, as `sweep`), merged into precision_*"),
        Result("07_decode_step", "sharding_check", "sharding_check.csv",
               "the two-rank gloo step against the unsharded one (and a wrong split), scaled-down model"),
        Result("07_decode_step", "precision_times", "precision_times.csv",
               "the step timed in bf16 and in FP8, with the shared expert overlapped and not (steptime.merge_sweeps)",
               ("dtype", "overlap", "batch", "context", "mode", "what", "median_us")),
        Result("07_decode_step", "precision_bytes", "precision_bytes.csv",
               "bytes one rank reads per component of the emulated step, per precision",
               ("dtype", "batch", "context", "component", "bytes_emulated", "bytes_checkpoint")),
        Result("07_decode_step", "precision_meta", "precision_meta.json",
               "each precision sweep's meta (launch floor, memory plan, the FP8 trial's result)"),
        Result("07_decode_step", "fp8_check", "fp8_check.csv",
               "the unsharded step in bf16 and FP8 against fp32 (and a deliberately wrong scale), scaled-down model"),
        Result("07_decode_step", "fp8_products", "fp8_products.csv",
               "each FP8 weight's product against fp32, beside bf16's, scaled-down model"),
        Result("07_decode_step", "split", "split.csv", "each component of the step alone at batch 1 and the largest"),
        Result("07_decode_step", "op_fidelity", "op_fidelity.csv",
               "each op of the step beside aiconfigurator's kernel for it, here and projected to the recorded GPU"),
        Result("07_decode_step", "kernels", "kernels.csv",
               "kernels per step by component, fused and unfused (measured), beside the op list for SGLang (assumed)",
               ("component", "fused", "unfused", "sglang_op_list")),
        Result("07_decode_step", "engine_fidelity", "engine_fidelity.csv",
               "the fused step's components and whole step against aiconfigurator's SGLang kernels on the same GPU",
               ("precision", "batch", "component", "measured_us", "engine_us", "ratio")),
        Result("07_decode_step", "tuning_bounds", "tuning_bounds.csv",
               "the most each tuning the investigation tried could have sped one stream up"),
        Result("07_diagnosis", "prediction", "prediction.csv", "the decode-step budget per scenario and batch"),
        Result("07_diagnosis", "inputs", "inputs.csv", "the budget's inputs, each labelled measured, derived or assumed"),
        Result("07_diagnosis", "collective_mapping", "collective_mapping.csv",
               "the VM copy fit mapped to an 8-GPU all-reduce by three algorithms, beside bare metal's"),
        Result("07_diagnosis", "budget_baseline", "budget_baseline.csv", "the VM baseline's terms per batch"),
        Result("07_diagnosis", "comparison", "comparison.csv", "the old budget against the observed speeds"),
        Result("07_diagnosis", "kernel_terms", "kernel_terms.csv",
               "the step on aiconfigurator's kernels measured on the recorded GPUs, per operation"),
        Result("07_diagnosis", "projection", "projection.csv", "the decode-step measurement projected to the recorded GPU"),
        Result("07_diagnosis", "budgets", "budgets.csv", "every budget against the observations", ("budget_id",)),
        Result("07_diagnosis", "goal", "goal.csv", "the goal per concurrency and the two largest terms"),
        Result("07_diagnosis", "projection_check", "projection_check.csv",
               "the projection per operation against aiconfigurator's kernels on the recorded GPU"),
        Result("07_diagnosis", "verdict_inputs", "verdict_inputs.csv",
               "every uncertain input of the predictions: its range, how it is drawn, its kind, source and reason",
               ("input", "system", "low", "mid", "high")),
        Result("07_diagnosis", "bare_metal_band", "bare_metal_band.csv",
               "bare metal predicted from measured inputs with its 5-95 % band, against the reference",
               ("observation", "predicted_tok_s", "band_low_tok_s", "band_high_tok_s", "inside_band")),
        Result("07_diagnosis", "bare_metal_band_first", "bare_metal_band_first.csv",
               "the same band with every input range as first registered, before a comparison changed any",
               ("observation", "predicted_tok_s", "band_low_tok_s", "band_high_tok_s", "inside_band")),
        Result("07_diagnosis", "vm_scenarios", "vm_scenarios.csv",
               "the VM predicted per host-path scenario, with its band, against every recorded VM observation",
               ("observation", "scenario_key", "predicted_tok_s", "band_low_tok_s", "band_high_tok_s", "inside_band")),
        Result("07_diagnosis", "attribution", "attribution.csv",
               "the VM's lost time per step against bare metal and the share each scenario explains",
               ("concurrency", "scenario_key", "share_explained", "share_low", "share_high", "unexplained")),
        Result("07_diagnosis", "decision_thresholds", "decision_thresholds.csv",
               "what an 8-rank all-reduce on the VM must cost for the host path to explain 80 % or 25 % of the loss"),
        Result("07_diagnosis", "decision_evidence", "decision_evidence.csv",
               "each scenario's 8-rank all-reduce at the rule's sizes and the share it would explain"),
        Result("07_diagnosis", "decision_achieved_batch", "decision_achieved_batch.csv",
               "the rule at the 64-stream bands' other end, the achieved decode batch: each scenario's 8-rank "
               "all-reduce at that batch's message and the share of that batch's loss its low and high explain",
               ("scenario_key", "message_bytes", "low_us", "high_us", "share_low", "share_high", "batch",
                "lost_ms_per_step", "bare_metal_us")),
        Result("07_diagnosis", "decision_outcomes", "decision_outcomes.csv",
               "each outcome of the decisive measurement: its range at both sizes, what it means, the next command",
               ("outcome", "means", "next")),
        Result("07_diagnosis", "ceilings", "ceilings.csv",
               "every observed and predicted point as a fraction of the weight-bytes floor at TP8"),
        Result("07_diagnosis", "remedies", "remedies.csv",
               "the remedies ranked by predicted gain with bands, and what the investigation tried"),
        Result("08_this_machine", "pair_check", "pair_check",
               "the pair check's folder (helpers.interconnect.pairs.FILES): every GPU pair's copies and owner-side "
               "write, the decisive recipe's all-reduce over every GPU, NCCL's INFO log"),
        Result("08_this_machine", "verdict", "verdict.csv", "this machine's verdict, one line per part",
               ("part", "line")),
        Result("08_this_machine", "loss", "loss.csv",
               "this machine's loss per step against its own prediction and the thresholds derived from it",
               ("end", "observed_step_ms", "predicted_step_ms", "loss_ms", "explains_us", "cannot_us", "share")),
    )
}


@dataclass(frozen=True)
class Need:
    """One result a chapter reads from another chapter of the same run. Without a `fallback` it is required
    (check_needs refuses a run that lacks it); with one it is optional, and `fallback` says what the chapter
    uses instead (on its page too); `study`: the data/sources.yaml role of the committed study it falls
    back on, if any."""
    producer: str
    name: str
    fallback: str = ""
    study: str = ""

    @property
    def optional(self) -> bool:
        return bool(self.fallback)


_STEP_FALLBACK = ("the committed decode-step study (data/measured/, role decode-step), where this run did not "
                  "time GLM-5's real TP8 shapes on a GPU")
_PRECISION_FALLBACK = ("the committed bf16-against-FP8 study (data/measured/, role decode-step-fp8), where this "
                       "run did not time the step in FP8 on a GPU")

#: What a chapter reads from another: chapter -> its needs. A missing required need stops the run before
#: it starts (see check_needs); the diagnosis in mode "recorded" reads nothing from the run.
NEEDS: dict[str, tuple[Need, ...]] = {
    "06_vm_p2p": (
        Need("01_environment", "probe", "no environment probe in this run: this machine's P2P matrix is CUDA's "
                                        "peer-access answer on a GPU machine, and none without a GPU"),
    ),
    "07_diagnosis": (
        Need("01_environment", "probe", "no environment probe in this run: the remedies cite no guest facts of "
                                        "this machine"),
        Need("06_vm_p2p", "fits"),
        Need("06_vm_p2p", "collective_sweep", "no all-to-all against all-reduce comparison (the VM/P2P chapter "
                                              "measured no collective, as in its recorded mode)"),
        Need("07_decode_step", "step_times", _STEP_FALLBACK, "decode-step"),
        Need("07_decode_step", "step_bytes", _STEP_FALLBACK, "decode-step"),
        Need("07_decode_step", "step_meta", _STEP_FALLBACK, "decode-step"),
        Need("06_vm_p2p", "hostpath_sweep", "no host-path study in this run (it needs the vm-emulation target on "
                                            "four GPUs or more): the VM is predicted from the other scenarios"),
        Need("07_decode_step", "precision_times", _PRECISION_FALLBACK, "decode-step-fp8"),
        Need("07_decode_step", "precision_bytes", _PRECISION_FALLBACK, "decode-step-fp8"),
        Need("07_decode_step", "precision_meta", _PRECISION_FALLBACK, "decode-step-fp8"),
    ),
    "08_this_machine": (
        Need("01_environment", "probe", "no environment probe in this run: VM or not is not measured here"),
        Need("06_vm_p2p", "machine", "no VM/P2P chapter in this run: the GPU count comes from the probe alone"),
        Need("06_vm_p2p", "cuda_p2p", "no CUDA peer-access matrix: the driver grant comes from the probe alone"),
        Need("06_vm_p2p", "copy_sweep", "no copy sweep: the bandwidth way comes from this chapter's pair check alone"),
        Need("06_vm_p2p", "collective_sweep", "no collective sweep: the all-reduce comes from this chapter's pair "
                                              "check alone"),
        Need("03_baselines_tuning", "served", "no serving record: the observation comes from the typed parameters, "
                                              "or there is none"),
        Need("07_decode_step", "step_times", _STEP_FALLBACK, "decode-step"),
        Need("07_decode_step", "step_bytes", _STEP_FALLBACK, "decode-step"),
        Need("07_decode_step", "step_meta", _STEP_FALLBACK, "decode-step"),
    ),
}
#: Chapters whose needs are waived in a mode that uses recorded inputs only.
RECORDED_MODES = ("recorded",)

#: Chapters that time nothing in mode "auto" on a machine without an NVIDIA GPU: they read recorded data (the
#: serving chapters launch a server only with sglang and a GPU, a given server_url or engine "transformers"),
#: read no GPU (05, 08) or compute from other chapters' results. The runbook runs such chapters side by side
#: (helpers.book.execution); a chapter that times something always runs alone.
QUIET_IN_AUTO_WITHOUT_GPU = ("02_nan_crash", "03_baselines_tuning", "04_moe_runners", "05_expert_parallelism",
                             "08_this_machine")
#: Chapters that time nothing in any mode: they compute from data and other chapters' results.
COMPUTES_ONLY = ("07_diagnosis", "90_provenance")
#: The parameters with which a quiet chapter would measure after all: a server to benchmark, or an engine that
#: launches without a GPU (its value here).
MEASURES_WHEN = {"server_url": None, "engine": "transformers"}

#: The mode in which a chapter that measures in `auto` presents what its `auto` execution saved in the run,
#: measuring nothing (helpers.book.replay); a chapter offers it where its PARAMS' `mode` allows it.
REPLAY_MODE = "replay"

#: What a chapter's replay reads of its own saved results: the run is refused before any work where one is
#: missing (helpers.book.replay). Results not listed here are read where present.
REPLAY_INPUTS: dict[str, tuple[str, ...]] = {
    "01_environment": ("probe",),
    "05_expert_parallelism": ("memory_fit",),
    "06_vm_p2p": ("copy_sweep", "collective_sweep", "collective_runs", "fits"),
    "07_decode_step": ("step_times", "step_bytes", "step_meta"),
}

#: Chapters whose `auto` execution measures nothing: it reads the run's results and data/ only, so a replay runs
#: them in `auto` as recorded. Any other chapter that ran in a measuring mode (`auto`, `live`) and offers no
#: REPLAY_MODE is kept as the run executed it by a replay (its notebook untouched), never re-executed here.
PRESENTS_ONLY = ("07_diagnosis", "90_provenance")

#: Derived presentation: results a chapter recomputes from data/ and other results on every execution, in
#: any mode, so a replay rewrites them (the runbook's replay checks every other file of results/ is
#: byte-identical before and after). Measurements are never listed here.
PRESENTATION: dict[str, tuple[str, ...]] = {
    "03_baselines_tuning": ("headline",),
    "05_expert_parallelism": ("parameters", "hidden_size", "memory_fit", "collectives", "ep_vs_tp_volume"),
    "07_decode_step": ("split", "op_fidelity", "kernels", "engine_fidelity", "tuning_bounds"),
    "07_diagnosis": tuple(n for (c, n) in RESULTS if c == "07_diagnosis"),
    "08_this_machine": ("verdict", "loss"),
}


def presentation_files(chapter: str) -> set[str]:
    """The files under results/<chapter>/ that are derived presentation (see PRESENTATION)."""
    return {result(chapter, n).file for n in PRESENTATION.get(chapter, ())}


def result(chapter: str, name: str) -> Result:
    try:
        return RESULTS[(chapter, name)]
    except KeyError:
        known = ", ".join(f"{c}/{n}" for c, n in RESULTS)
        raise LayoutError(f"no result '{name}' is declared for chapter '{chapter}' in helpers.core.layout "
                          f"(declared: {known})") from None


def run_root(run_dir: str | Path | None) -> Path:
    """The run folder; an empty run_dir (a chapter executed on its own) is a fresh temporary one."""
    return Path(run_dir) if run_dir else Path(tempfile.mkdtemp(prefix="book-run-"))


def chapter_dir(run_dir: str | Path, chapter: str) -> Path:
    """<run>/results/<chapter>/, created."""
    out = Path(run_dir) / "results" / chapter
    out.mkdir(parents=True, exist_ok=True)
    return out


def path(run_dir: str | Path, chapter: str, name: str) -> Path:
    return Path(run_dir) / "results" / chapter / result(chapter, name).file


def exists(run_dir: str | Path, chapter: str, name: str) -> bool:
    return path(run_dir, chapter, name).exists()


def _check_columns(r: Result, df: pd.DataFrame, where: str) -> None:
    missing = [c for c in r.columns if c not in df.columns]
    if missing:
        raise LayoutError(f"{where}: table '{r.chapter}/{r.name}' lacks its declared columns {missing} "
                          f"(declared in helpers.core.layout.RESULTS)")


def save(run_dir: str | Path, chapter: str, name: str, obj) -> None:
    """Write a declared result atomically: a DataFrame as CSV (columns checked), anything else as JSON."""
    r = result(chapter, name)
    folder = chapter_dir(run_dir, chapter)
    if r.kind == "csv":
        _check_columns(r, obj, "saving")
        results.save_table(folder, Path(r.file).stem, obj)
    else:
        results.save_json(folder, Path(r.file).stem, obj)


def load(run_dir: str | Path, chapter: str, name: str, adapt=None):
    """Read a declared result; MissingResult says which chapter writes it. `adapt(table)`: how the reader
    maps a table of an older layout to today's (e.g. helpers.interconnect.recorded_labels.from_tidy), applied
    before the declared columns are checked; the file itself is never rewritten."""
    r = result(chapter, name)
    p = path(run_dir, chapter, name)
    if not p.exists():
        raise MissingResult(f"{p} does not exist: it is written by chapter {chapter} ({r.description}); "
                            f"run that chapter in this run first")
    if r.kind == "csv":
        df = pd.read_csv(p)
        if adapt is not None:
            df = adapt(df)
        _check_columns(r, df, str(p))
        return df
    return json.loads(p.read_text())


def load_if_present(run_dir: str | Path, chapter: str, name: str, adapt=None):
    """The result, or None where the run has none (for a chapter that can do without it)."""
    return load(run_dir, chapter, name, adapt) if exists(run_dir, chapter, name) else None


def check_needs(selected: list[str], run_dir: str | Path | None, modes: dict[str, str] | None = None) -> list[str]:
    """Problems with running `selected` (chapter stems, in order) into `run_dir`: one line per need that
    is neither produced by an earlier selected chapter nor already in the run directory."""
    modes = modes or {}
    problems = []
    for i, ch in enumerate(selected):
        if modes.get(ch) in RECORDED_MODES:
            continue
        for need in NEEDS.get(ch, ()):
            producer, name = need.producer, need.name
            if need.optional or producer in selected[:i]:
                continue
            if run_dir and exists(run_dir, producer, name):
                continue
            problems.append(
                f"chapter {ch} needs {producer}'s '{name}' ({result(producer, name).file}), which this run "
                f"does not produce: add {producer} to --chapters (before {ch}), resume a run that has it, "
                f"or use the recorded inputs on purpose with `-p {ch}.mode=recorded`")
    return problems


def need(chapter: str, producer: str, name: str) -> Need:
    """The declared need of `chapter` for `producer`'s result `name`; LayoutError where none is declared."""
    for n in NEEDS.get(chapter, ()):
        if (n.producer, n.name) == (producer, name):
            return n
    declared = [f"{n.producer}/{n.name}" for n in NEEDS.get(chapter, ())]
    raise LayoutError(f"chapter {chapter} declares no need for {producer}/{name} in helpers.core.layout.NEEDS "
                      f"(it declares: {declared or 'none'}); declare it before reading it")


def load_need(run_dir: str | Path, chapter: str, producer: str, name: str, adapt=None):
    """A result `chapter` reads from `producer`, through its declared need: a required one that is missing
    raises MissingResult (naming the chapter that writes it); an optional one that is missing is None (the
    chapter then uses the need's fallback)."""
    n = need(chapter, producer, name)
    return load_if_present(run_dir, producer, name, adapt) if n.optional else load(run_dir, producer, name, adapt)


class Run:
    """One run folder, the only reader and writer of its results: a chapter writes only what RESULTS
    declares for it (columns checked) and reads another chapter's result only through a declared need.

        run = layout.Run(P["run_dir"], "06_vm_p2p")      # "" -> a fresh temporary folder
        run.save("fits", df)                              # declared, columns checked
        probe = run.need("01_environment", "probe")       # declared in NEEDS, else LayoutError
        mine = run.load("fits")                           # this chapter's own result
    """

    def __init__(self, run_dir: str | Path | None, chapter: str):
        self.root = run_root(run_dir)
        self.chapter = chapter

    def __repr__(self) -> str:
        return f"Run({str(self.root)!r}, {self.chapter!r})"

    @property
    def folder(self) -> Path:
        """<run>/results/<chapter>/, created: for a declared folder result (see `path`) or a child process's
        own files."""
        return chapter_dir(self.root, self.chapter)

    def path(self, name: str) -> Path:
        """Where this chapter's declared result `name` lives (for a result that is a folder, or a file a
        child process writes itself)."""
        chapter_dir(self.root, self.chapter)
        return path(self.root, self.chapter, name)

    def save(self, name: str, obj) -> None:
        save(self.root, self.chapter, name, obj)

    def load(self, name: str, adapt=None):
        return load(self.root, self.chapter, name, adapt)

    def load_if_present(self, name: str, adapt=None):
        return load_if_present(self.root, self.chapter, name, adapt)

    def need(self, producer: str, name: str, adapt=None):
        """`producer`'s result `name`, through this chapter's declared need (see load_need; `adapt`: load)."""
        return load_need(self.root, self.chapter, producer, name, adapt)
