"""The machine verdict built from its inputs (pure), and GLM-5's decode predicted on a GPU kind."""
from __future__ import annotations

from helpers.chapters.this_machine.lines import (allreduce_part, observed_part, p2p_part, predicted_part, remedy_part,
                                                 vm_part)
from helpers.chapters.this_machine.parts import FILL, Inputs, MachineVerdict
from helpers.model import arith as ma
from helpers.model import thismachine as tm


def verdict(inp: Inputs, model: str = "glm5", predictor=None) -> MachineVerdict:
    """The verdict from the inputs (pure). `predictor(system, batch) -> tm.Predicted | str`: GLM-5's decode
    predicted on this GPU kind at a batch (a string: why not); None uses `predict_decode`."""
    m = ma.load_model(model)
    v = MachineVerdict()
    if inp.mode == "recorded":
        for k in ("vm", "p2p", "allreduce", "predicted", "observed", "remedy"):
            v.lines[k] = f"not measured here: this page was built from recorded data alone; run {FILL['gpu']}"
        v.values.update({"chk1": "not probed in this run", "system": "none", "ar_untimed": "recorded data only"})
        return v
    vm_part(v, inp)
    p2p_part(v, inp)
    allreduce_part(v, inp, m)
    predicted_part(v, inp, m, predictor or (lambda s, b: predict_decode(s, b, inp.floor_us)))
    observed_part(v, inp, m)
    remedy_part(v, inp)
    return v


#: the checkpoints tried on a system, in order: NVFP4 where its tables price it, else the FP8 checkpoint
CHECKPOINTS = ("nvfp4", "fp8")


def predict_decode(system: str | None, batch: float, floor_us: float | None = None, context: int = 0):
    """GLM-5 at TP8 on eight GPUs of `system` at a decode batch (aggregate tokens/s with its 5-95 % band,
    helpers.model.verdict.predictor.predict with SGLang's default settings, the model's own error in the band),
    or why not. The checkpoint is NVFP4 where the system's tables price it, else FP8 (said in `how`);
    `floor_us`: the graph-replay floor measured on this run's GPU (07_decode_step), None the committed one."""
    from helpers.model.verdict import predictor as pr

    if system is None:
        return "no GLM-5 decode prediction for this GPU: the book has kernel tables for " + ", ".join(
            sorted(tm.REFERENCE_HOSTS))
    why = ""
    for ck in CHECKPOINTS:
        try:
            p = pr.predict("glm5", system, 8, max(1, int(round(batch))), context, pr.EngineSettings(checkpoint=ck),
                           floor_us=floor_us)
        except pr.PredictorError as e:
            why = str(e)
            continue
        floor = "the graph floor measured on this run's GPU" if floor_us is not None else "the committed graph floor"
        return tm.Predicted(float(batch), p.tok_s, p.band[0], p.band[1],
                            f"derived: the {ck.upper()} checkpoint priced from aiconfigurator's kernel tables for "
                            f"{system} (SGLang's default settings; {floor}; the model's own error in the band)")
    return f"no GLM-5 decode prediction for {system}: {why}"
