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
        v.values.update({"chk1": "not probed in this run", "system": "none"})
        return v
    vm_part(v, inp)
    p2p_part(v, inp)
    allreduce_part(v, inp, m)
    predicted_part(v, inp, m, predictor or predict_decode)
    observed_part(v, inp, m)
    remedy_part(v, inp)
    return v


def predict_decode(system: str | None, batch: float):
    """GLM-5 at TP8 on eight GPUs of `system` at a decode batch (tokens/s with its band), or why not. The book
    prices GLM-5 from kernel tables for the RTX PRO 6000 only (helpers.model.verdict's bare-metal band: the
    diagnosis's prediction, at the batches it draws)."""
    from helpers.model import kernels as kt
    from helpers.model import verdict as vd

    if system != kt.RTX:
        return (f"no GLM-5 decode prediction for {system or 'this GPU'} in this book: it prices GLM-5 from "
                f"kernel tables of the {kt.RTX} only")
    b = int(round(batch))
    ver = _bare_verdict()
    obs = vd.Observation(f"here_{b}", vd.BARE, f"batch {b}", b, float("nan"), False, "this machine")
    p = ver.predict(obs)
    return tm.Predicted(float(b), p["predicted_tok_s"], p["band_low_tok_s"], p["band_high_tok_s"],
                        "derived: the diagnosis's bare-metal prediction (kernels timed on the RTX PRO 6000, "
                        "aiconfigurator's tables, with its 5-95 % band)")


_VERDICT: list = []


def _bare_verdict():
    """The diagnosis's Verdict on the committed inputs (built once a process)."""
    if not _VERDICT:
        from helpers.model import budget as bd
        from helpers.model import measured as mb
        from helpers.model import verdict as vd

        base = bd.baseline_scenario(ma.load_model("glm5"))
        _VERDICT.append(vd.Verdict.build("glm5", int(base.context.value), mb.step_measurement(None).floor_us(),
                                         mb.precision_study(None)))
    return _VERDICT[0]


