"""The machine verdict's lines, one function per part, each choosing its sentence from what the run holds (and
saying "not measured here", with the target that fills the part, where it holds nothing)."""
from __future__ import annotations

import numpy as np

from helpers.chapters.this_machine.parts import FILL, Inputs, MachineVerdict, healthy_recipe, observation
from helpers.interconnect import pairs as pc
from helpers.machine import virt
from helpers.model import arith as ma
from helpers.model import thismachine as tm
from helpers.model.verdict.ranges import CANNOT, EXPLAINS

#: the deployment the prediction and the thresholds are for: GLM-5 at tensor parallelism 8
TP = 8


def vm_part(v: MachineVerdict, inp: Inputs) -> None:
    """Part 1a: VM or not, from every signal of the probe; check 1's outcome."""
    if inp.probe is None:
        v.lines["vm"] = "not measured here: this run has no environment probe (chapter 01)"
        v.values["chk1"] = "not probed in this run"
        return
    vv = virt.judge(inp.probe.get("virtualization"))
    v.virt = vv
    # where it fails, both rules named: chapter 01's verdict warns on the same VM (site-read6 R5)
    v.lines["vm"] = f"check 1 {vv.outcome}: {vv.line()}" + (f" ({virt.CHECK1_RULE})" if vv.passes is False else "")
    v.values["chk1"] = f"{vv.outcome}: {vv.line()}"


def p2p_part(v: MachineVerdict, inp: Inputs) -> None:
    """Part 1b: every GPU pair four ways, the count per way and what fails first."""
    n = inp.gpus
    v.values["failed"] = {k: False for k in pc.WAYS}
    if n < 2:
        v.lines["p2p"] = (f"not measured here: {'no GPU' if n == 0 else 'one GPU'} has no pair to check; "
                          f"{FILL['pairs']} fills this part")
        return
    t = pc.pair_table(n, inp.grant, inp.copies, inp.writes, inp.log)
    v.pairs = t
    c = pc.way_counts(t)
    total = len(t)
    said = []
    for k, name in pc.WAYS.items():
        ok, bad, unk = c[k][pc.OK], c[k][pc.FAIL], c[k][pc.NOT_MEASURED]
        if unk == total:
            said.append(f"{name} not measured")
            continue
        said.append(f"{name} ok on {ok} of {total}" + (f", failing on {bad}" if bad else "")
                    + (f", not measured on {unk}" if unk else ""))
    v.values["failed"] = {k: c[k][pc.FAIL] > 0 for k in pc.WAYS}
    failing = t[t["first failing"] != "none"]
    if len(failing):
        first = failing["first failing"].iloc[0]
        key = next(k for k, w in pc.WAYS.items() if w == first)
        end = (f"P2P is not real on {len(failing)} of {total} pair{'s' if total != 1 else ''} (first failing way: "
               f"{first}): {pc.REMEDIES[key]}")
    else:
        end = "P2P is real on every way measured"
    pairs_word = f"{total} GPU pair{'s' if total != 1 else ''}"
    v.lines["p2p"] = f"{pairs_word}: {'; '.join(said)} ({inp.copies_how} for the bandwidth). {end}"


def _ref_words(system, gpus, t) -> str:
    if not np.isfinite(t["reference_us"]).any():
        _, why = tm.reference_allreduce(system, gpus, t["size_bytes"].tolist())
        return f"{why}, so no healthy figure stands beside it"
    _, how = tm.reference_allreduce(system, gpus, t["size_bytes"].tolist())
    a, b = t.iloc[0], t.iloc[-1]
    return (f"against {a.reference_us:.1f} and {b.reference_us:.1f} µs ({how}), "
            f"{a.ratio:.1f}x and {b.ratio:.1f}x")


def allreduce_part(v: MachineVerdict, inp: Inputs, m: ma.ModelConfig) -> None:
    """Part 2: the all-reduce at the decode sizes over this run's GPUs, beside the healthy reference."""
    if inp.gpus < 2:
        v.values["ar_untimed"] = "no GPU" if inp.gpus < 1 else "1 GPU: no collective between GPUs to time"
        size = float(ma.allreduce_bytes(m, [1])[0])
        floor = tm.one_rank_floor_us(inp.sweep, size) if inp.gpus == 1 else None
        timed = ("" if floor is None else
                 f"; chapter 06 timed NCCL on one rank, {floor:.1f} µs at {size / 1024:.0f} KiB (measured, eager), as the "
                 "library's own floor only")
        v.lines["allreduce"] = ("not measured here: one GPU has no collective between GPUs to time (a one-rank "
                                f"all-reduce moves nothing between GPUs, so nothing is priced from it{timed}); "
                                f"{FILL['pairs']} fills this part")
        return
    meas, how = tm.measured_allreduce(inp.recipe, inp.sweep)
    if meas is None:
        v.values["ar_untimed"] = "no all-reduce timing in this run"
        v.lines["allreduce"] = f"{how}; {FILL['pairs']} fills this part"
        return
    system = tm.reference_system(inp.device)
    t = tm.allreduce_table(m, meas, system)
    v.allreduce, v.values["measured_ar"] = t, meas
    a, b = t.iloc[0], t.iloc[-1]
    line = (f"over {int(a.gpus)} GPUs {a.measured_us:.1f} µs at {a.size_bytes / 1024:.0f} KiB and {b.measured_us:.1f} µs "
            f"at {b.size_bytes / 1024:.0f} KiB ({how}), {_ref_words(system, int(a.gpus), t)}")
    h = healthy_recipe(t["size_bytes"].tolist())
    if h is not None:
        line += (f". By the recipe's method the book's own healthy pair (two H200s over NVLink, committed study) read "
                 f"{h['ratio'].iloc[0]:.1f}x and {h['ratio'].iloc[-1]:.1f}x aiconfigurator's two-H200 figures at "
                 f"these sizes: a healthy machine's ratio by this method, where the table itself is faster")
    v.lines["allreduce"] = line


def emulated_step_words(step: dict | None) -> str:
    """Where the decode-step chapter timed an emulated TP8 rank on this run's GPU, what it measured, and that it is
    no prediction of the served model (site-read5 N13); '' where it did not time the real shapes here."""
    if not step:
        return ""
    (b1, ms1), (bn, msn) = min(step.items()), max(step.items())
    return (f" (the decode-step chapter timed one emulated TP{TP} rank here: {ms1:.1f} ms for {b1} sequence"
            f"{'s' if b1 != 1 else ''} and {msn:.1f} ms for {bn}, measured with CUDA graphs, random bf16 weights and no "
            "all-reduces; it is not a prediction of the served model)")


def predicted_part(v: MachineVerdict, inp: Inputs, m: ma.ModelConfig, predictor) -> None:
    """Part 3: GLM-5 at TP8 on eight GPUs of this kind, with its band, at one stream and 64."""
    v.values["predictor"] = predictor
    system = tm.reference_system(inp.device)
    v.values["system"] = system or (inp.device or "no GPU")
    if inp.gpus == 0:
        v.lines["predicted"] = f"not predicted: no GPU in this run; {FILL['gpu']} fills this part"
        return
    got = {c: predictor(system, c) for c in (1, 64)}
    if any(isinstance(p, str) for p in got.values()):
        v.lines["predicted"] = ("not predicted: " + next(p for p in got.values() if isinstance(p, str))
                                + emulated_step_words(inp.emulated_step))
        return
    v.prediction = got
    p1, p64 = got[1], got[64]
    coll = ("" if inp.gpus >= TP else
            f"; its all-reduces are the reference table's, not measured here ({inp.gpus} GPU"
            f"{'s' if inp.gpus != 1 else ''} ran)")
    v.values["pred_how"] = p1.how
    v.lines["predicted"] = (f"GLM-5 at TP{TP} on {TP} x {system}: {p1.tok_s:.1f} tokens/s for one stream (band "
                            f"{p1.low:.1f}-{p1.high:.1f}) and {p64.tok_s:.0f} at 64 (band {p64.low:.0f}-{p64.high:.0f}; "
                            f"derived){coll}")


def observed_part(v: MachineVerdict, inp: Inputs, m: ma.ModelConfig) -> None:
    """Part 4: the observation, this machine's loss and its thresholds (formula in the page), or what to run."""
    obs, why = observation(inp)
    none = "no thresholds: they need this machine's observation and its prediction"
    if obs is None:
        v.lines["observed"] = (f"nothing observed ({why}): serve GLM-5 here and point {FILL['serve']}, or give "
                               "the three `observed_*` parameters")
        v.lines["thresholds"] = none
        return
    said = (f"{obs.tok_s_1:.1f} tokens/s for one stream and {obs.tok_s_max:.0f} at a decode batch of "
            f"{obs.concurrency_max:g} ({obs.source})")
    if not v.prediction:
        v.lines["observed"] = f"observed {said}; no prediction for this GPU, so no loss"
        v.lines["thresholds"] = none
        return
    system = tm.reference_system(inp.device)
    pmax = v.values["predictor"](system, obs.concurrency_max)
    if isinstance(pmax, str):
        v.lines["observed"], v.lines["thresholds"] = f"observed {said}; {pmax}", none
        return
    ends = {"one stream": 1.0, "highest": obs.concurrency_max}
    sizes = {e: int(ma.allreduce_bytes(m, max(1, int(round(b))))) for e, b in ends.items()}
    ref, _ = tm.reference_allreduce(system, TP, list(sizes.values()))
    meas = v.values.get("measured_ar")
    here = (tm.at_sizes(meas, list(sizes.values())) if meas is not None and int(meas["world_size"].max()) == TP
            else [None, None])
    loss = tm.loss_table(m, obs, {"one stream": v.prediction[1], "highest": pmax},
                         {e: (float(ref[i]) if ref is not None else None) for i, e in enumerate(ends)},
                         {e: here[i] for i, e in enumerate(ends)})
    v.loss = loss
    one, hi = loss.iloc[0], loss.iloc[1]
    v.lines["observed"] = (f"observed {said}, against {one.predicted_tok_s:.1f} and {hi.predicted_tok_s:.0f} "
                           f"predicted: per step this machine {_lost(one.loss_ms)} for one stream and "
                           f"{_lost(hi.loss_ms)} at batch {obs.concurrency_max:g} (derived)")
    v.lines["thresholds"] = _threshold_words(loss, meas)


def _lost(ms: float) -> str:
    """A loss per step in words: time lost, or gained where the machine beats its prediction."""
    return f"loses {ms:.1f} ms" if ms >= 0 else f"gains {-ms:.1f} ms (faster than predicted)"


def _threshold_words(loss, meas) -> str:
    one, hi = loss.iloc[0], loss.iloc[1]
    if not (one.loss_ms > 0 and np.isfinite(one.explains_us)):
        return ("no thresholds: this machine runs at or above its prediction for one stream, so there is no loss to "
                "explain" if one.loss_ms <= 0 else "no thresholds: no healthy all-reduce for eight of these GPUs")
    text = (f"an all-reduce over {TP} GPUs of {one.explains_us:.0f} µs or more at {one.message_bytes / 1024:.0f} KiB "
            f"means the host path is this machine's loss, {one.cannot_us:.0f} µs or less that it explains "
            f"{100 * CANNOT:.0f} % or less")
    if np.isfinite(hi.explains_us):
        text += (f" (at {hi.message_bytes / 1024:.0f} KiB: {hi.explains_us:.0f} and {hi.cannot_us:.0f} µs, the "
                 f"{100 * EXPLAINS:.0f} % and {100 * CANNOT:.0f} % marks)")
    if np.isfinite(one.share):
        case = tm.share_case(float(one.share))
        text += (f"; measured here, {one.measured_us:.0f} µs explains {100 * one.share:.0f} % of the one-stream loss "
                 f"({case})")
    elif meas is not None:
        text += (f"; the all-reduce here ran over {int(meas['world_size'].max())} GPUs, not {TP}, so its share is "
                 "not computed")
    else:
        text += f"; not measured here: time it with the recipe on {TP} GPUs (section 2's command)"
    return text


def remedy_part(v: MachineVerdict, inp: Inputs) -> None:
    """Part 5: the remedies this machine's failed checks call for, ranked."""
    failed = v.values.get("failed") or {}
    is_vm = bool(v.virt is not None and v.virt.passes is False)
    if inp.gpus < 2:
        v.lines["remedy"] = "none called for by a measurement: with fewer than two GPUs nothing between GPUs was checked"
        return
    rs = tm.remedies(failed, is_vm, v.loss)
    v.remedies = rs
    if not rs:
        v.lines["remedy"] = "none: no check failed on this machine"
        return
    top = rs[0]
    gain = (f", predicted {top.tok_s_1:.1f} tokens/s for one stream" if np.isfinite(top.tok_s_1)
            else ", not priced here (no measured all-reduce over eight GPUs and observation to price it from)")
    v.lines["remedy"] = f"first, {top.what} (`{top.setting}`: moves {top.moves}{gain}; called for by the {top.why})"
