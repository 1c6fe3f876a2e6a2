"""The decode-step chapter's sections, one function each, as the diagnosis chapter's: each returns a `Part`
with the values its prose glues (dataclasses of helpers.chapters.decode_step.values: the notebook
glue_alls each), the tables the run keeps (`save`), the tables the page shows, in page order, each with
helpers.core.tables.show's arguments, the data its figure is drawn from, and what a later section reads
(`data`): helpers.chapters.parts. The notebook keeps the parameters, the calls, the figures, the glue and the display."""
from __future__ import annotations

import sys
from typing import Mapping

import pandas as pd

from helpers.chapters.decode_step import fusion as fu
from helpers.chapters.decode_step import measurement as me
from helpers.chapters.decode_step import precision as pr
from helpers.chapters.decode_step import shown as sh
from helpers.chapters.decode_step import values as va
from helpers.chapters.parts import Part, save  # noqa: F401 - reached as ch.Part, ch.save
from helpers.model import arith as ma
from helpers.model import fp8 as fp8mod
from helpers.model import measured as mb
from helpers.model import step as stp


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def bytes_section(meas: mb.StepMeasurement, p: Mapping, context: int, cpu_live: bool) -> Part:
    """Section 1: the bytes one rank reads, and on a CPU the two-rank check of the sharded step."""
    check, timing = (stp.sharding_check(p["cpu_model"], max(p["cpu_batches"]), max(p["cpu_contexts"]))
                     if cpu_live else (None, None))
    byte_values = me.bytes_values(meas, context)
    shown = [(me.bytes_table(meas, context), dict(
        fold_after=0, rename=sh.BYTES_SHOWN,
        summary="GiB one rank reads per component, bf16 and the checkpoint's formats, at 1 and 64 sequences"))]
    if check is not None:
        shown.append((check, dict(fold_after=0,
                                  summary="the two-rank check: relative error of the logits, right and wrong split")))
    return Part(values=(va.ByteValues(**byte_values),
                        va.CheckValues(me.check_text(check), sh.check_summary(check), stp.FP32_TOLERANCE)),
                tables={} if check is None else {"sharding_check": check}, shown=tuple(shown),
                data={"bytes": byte_values, "rank_timing": timing})


def steps_section(meas: mb.StepMeasurement, p: Mapping, context: int, batch_max: int, long_context: int,
                  byte_values: dict, cpu_sweep=None, rank_timing=None) -> Part:
    """Section 2: the whole step against batch (`cpu_sweep`: this run's CPU sweep, where it made one)."""
    s = me.steps(meas)
    values = me.measurement_values(meas, batch_max, context, long_context)
    texts = va.StepTexts(pr.overlap_label(meas, context), meas.fusion,
                         me.cpu_text(cpu_sweep, rank_timing, max(p["cpu_batches"])), sh.answer_what(meas),
                         me.sparse_text(meas, batch_max, long_context))
    shown = ((sh.human(s[s["batch"].isin([1, 8, 64])], sh.STEPS_SHOWN),
              dict(fold_after=0, summary="the whole step at 1, 8 and 64 sequences: median and p90 (ms), tokens/s")),)
    return Part(values=(texts, va.MeasurementValues(**values), va.AnswerValues(**sh.answer_values(values, byte_values))),
                shown=shown, figure={"fig_steps": s})


def split_section(meas: mb.StepMeasurement, context: int, batch_max: int) -> Part:
    """Section 3: each component alone at 1 and the largest batch."""
    split = me.split_table(meas, (1, batch_max), context)
    shown = ((sh.human(split, sh.SPLIT_SHOWN_HUMAN),
              dict(fold_after=0, digits={sh.SPLIT_SHOWN_HUMAN["share"]: 0, "of datasheet (%)": 0},
                   summary="each component alone at 1 and 64 sequences: µs, share of the components' sum, kernels, "
                           "achieved GB/s")),)
    return Part(values=(va.SplitValues(**me.split_values(split, batch_max, me.step_ms(meas, 1, context),
                                                                  me.step_ms(meas, batch_max, context))),
                        va.SplitTexts(me.SPLIT_TAKEAWAY[meas.fusion])),
                tables={"split": split}, shown=shown, figure={"fig_split": me.split_by_batch(meas, context)})


def fusion_section(meas: mb.StepMeasurement, m: ma.ModelConfig, context: int, batch_max: int) -> Part:
    """Section 4, first half: the committed fused study against the unfused step, and kernels per step."""
    fs = mb.fusion_study()
    if fs is None:
        raise mb.MeasuredBudgetError(f"no committed study of role {mb.FUSED_ROLE} (scripts/device-step-fused.sh makes one)")
    tab = fu.fusion_table(fs, context)
    kernels = fu.kernel_compare(fs, meas if meas.fusion == "unfused" else mb.unfused_measurement(), m, context)
    shown = ((tab.drop(columns=["unfused_kernels", "fused_kernels"]),
              dict(digits=2, fold_after=0, rename={"unfused_ms": "unfused", "fused_ms": "fused", "speedup": "speed-up (x)"},
                   summary="the whole step fused and unfused, bf16 and FP8, graphs and eager: ms and speed-up")),
             (kernels, dict(fold_after=0, rename={"sglang_op_list": "SGLang op list (assumed)"},
                            summary="kernels per step by component: fused, unfused, SGLang's op list (whole step: the last row)")))
    fv = fu.fusion_values(tab, fs, batch_max)
    return Part(values=(va.FusionValues(**fv), va.KernelValues(**fu.kernel_values(kernels, fv["k_fus_bf16_64"]))),
                tables={"kernels": kernels}, shown=shown, data={"fusion_study": fs})


def _shown(df: pd.DataFrame, digits: int, summary: str) -> tuple:
    return df, dict(digits=digits, rename=sh.headers(df), fold_after=None, summary=summary)


def fp8_bytes_accuracy(meas: mb.StepMeasurement, m: ma.ModelConfig, p: Mapping, context: int, gpu: bool,
                       cpu_live: bool, saved=None) -> Part:
    """Section 4, FP8's bytes and accuracy: the weights in each precision, the bytes one rank reads, the FP8
    step against fp32 (a CPU run: the committed study where its parameters match) and, on a CPU, the
    two-rank check with FP8 weights."""
    fp8_bytes, fp8_values = pr.precision_bytes(meas, m, p["tp"], context)
    num, where = pr.saved_numerics(saved) if saved is not None else pr.fp8_numerics(gpu, p)
    check = num.check[["variant", "rel_l2", "tolerance", "ok", "token_agreement", "routing_flips"]]
    shown = [_shown(pr.fp8_weight_table(m, p["tp"]), 2, "each weight of a layer and the head: per-rank shape, precision, MiB"),
             _shown(fp8_bytes, 2, "GiB one rank reads per step, bf16 against FP8"),
             _shown(check, 3, "the FP8 step against fp32: relative error, tolerance, tokens and routing")]
    if cpu_live:   # the two-rank check of section 1, with FP8 weights
        sharded = stp.fp8_sharding_check(p["cpu_model"], max(p["cpu_batches"]), max(p["cpu_contexts"]))
        shown.append(_shown(sharded[["variant", "rel_l2", "tolerance", "ok"]], 3, "the two-rank check with FP8 weights"))
    return Part(values=(va.PrecisionByteValues(**fp8_values),
                        va.Fp8AccuracyValues(**pr.fp8_accuracy_values(num.check, num.products)), where),
                tables={} if saved is not None else {"fp8_check": num.check, "fp8_products": num.products},
                shown=tuple(shown))


def fp8_timings(p: Mapping, run, context: int, batch_max: int, gpu: bool, fs: mb.FusionStudy,
                replay: bool = False) -> Part:
    """Section 4, FP8's timings: on a GPU with scaled FP8 products this run times them (the sweeps under the
    run); FP8 against bf16 from this run where it timed them, else the fused step's study, else the
    unfused one; the step with the shared expert on one stream and on two."""
    prec, tabs = None, {}
    trial = ("not tried: this run times no GPU" if not (gpu or replay) else
             f"not tried: fp8 = {p['fp8']!r} in this run's parameters (the FP8 timings come from a committed study)"
             if p["fp8"] != "auto" else "as the run made it (presented again from what it saved)")
    if gpu and p["fp8"] == "auto":
        prec, err = pr.time_precisions(p, run.path("sweep"), run.path("precision_sweeps"), progress=_stderr)
        trial = err or "passed"
        if prec is not None:
            tabs = {"precision_times": prec.timings, "precision_bytes": prec.bytes, "precision_meta": prec.meta}
    ps = mb.precision_study(run.root if (gpu or replay) else None)
    pt = ps if (ps is not None and ps.where == "this run") else (mb.fused_precisions(fs) or ps)
    values = pr.precision_values(pt, context, overlap=ps)
    texts = va.Fp8Texts(pr.precision_source(pt), pr.precision_source(ps), pr.precision_experts_impl(pt), trial,
                        stp.DUAL_STREAM_TOKEN_THRESHOLD, fp8mod.QUANTIZE_KERNELS, pr.fp8_verdict(values),
                        ma.load_model(p["cpu_model"]).layers)
    shown = []
    if pt is not None:
        shown.append(_shown(pr.precision_steps(pt, context), 2,
                            f"the whole step in bf16 and in FP8 ({pr.precision_source(pt)}): ms, GiB, FP8's speed-up"))
        split = pd.concat([pr.precision_split(pt, b, context).assign(batch=b) for b in (1, batch_max)])
        for cols, what in ((["batch", "component", "bf16_us", "fp8_us", "fp8_vs_bf16"], "time"),
                           (["batch", "component", "bf16_MiB", "fp8_MiB", "bf16_GBps", "fp8_GBps"], "bytes and bandwidth")):
            shown.append(_shown(split[cols], 1, f"each component alone, bf16 and FP8 ({pr.precision_source(pt)}): {what}"))
    if pr.has_overlap_pair(ps):
        shown.append(_shown(pr.overlap_steps(ps, context), 2,
                            f"the whole step on one stream and with the shared expert on a second ({pr.precision_source(ps)})"))
    return Part(values=(texts, va.PrecisionValues(**values)), tables=tabs, shown=tuple(shown))


def fidelity_section(meas: mb.StepMeasurement, m: ma.ModelConfig, context: int, batch_max: int,
                     fs: mb.FusionStudy) -> Part:
    """Section 5: each operation against SGLang's kernel, and each component of the fused step against the
    engine composite."""
    fid = mb.op_fidelity_table(meas, m, (1, batch_max), context)
    engine = fu.engine_table(fs, m, context, (1, batch_max))
    shown = ((sh.human(fid, sh.FIDELITY_SHOWN),
              dict(fold_after=None, summary=sh.fidelity_summary(fid, meas.device))),
             (engine[["precision", "batch", "component", "measured_us", "engine_us", "ratio", "kernels"]],
              dict(units={"measured_us": "µs", "engine_us": "µs"}, digits=2, fold_after=None,
                   rename={"measured_us": "this step", "engine_us": "engine composite", "ratio": "ratio (x)"},
                   summary=f"each component of the fused step and the whole step against the engine composite "
                           f"({fs.where}, {fs.device})")))
    return Part(values=(va.FidelityValues(**me.fidelity_texts(fid, batch_max, meas.meta.get("moe_impl"), meas.device)),
                        va.EngineValues(**fu.engine_values(engine, batch_max))),
                tables={"op_fidelity": fid, "engine_fidelity": engine}, shown=shown)


def tuning_section(meas: mb.StepMeasurement, m: ma.ModelConfig, context: int) -> Part:
    """Section 6: what each tuning could at most change."""
    tab, values = me.tuning(meas, m, context)
    shown = ((sh.human(tab, sh.TUNING_SHOWN),
              dict(digits={"at most (x)": 2, "of the observed step (%)": 0}, fold_after=0,
                   summary="each tuning: what it acts on, the time it could remove (ms), the most it could speed a step up")),)
    return Part(values=(va.TuningValues(**values),), tables={"tuning_bounds": tab}, shown=shown)
