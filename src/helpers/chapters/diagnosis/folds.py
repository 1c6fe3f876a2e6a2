"""The diagnosis page's folded tables, one function per section: each takes the section's `Part`s (what
its section functions returned) and gives the one toggle the page shows (answer.Folded; `tables.show`
displays it), with the titles, headers and digits the page prints. The notebook calls the section, saves,
glues and shows; what each toggle holds is written here once."""
from __future__ import annotations

from helpers.chapters.diagnosis.answer import Folded, folded, headers, human
from helpers.chapters.diagnosis.build import Part
from helpers.core import tables


def _t(df, **kw):
    return tables.table(df, fold_after=None, **kw)


#: an observation in tokens/s to one decimal, as the sources record it and the prose states it (50.4, not 50)
OBS = {"observed (tokens/s)": 1}


def first_budget_fold(inputs: Part, mapping: Part, baseline: Part, check: Part) -> Folded:
    """Section 1: the inputs, the mapping, the budget's terms and its check against every observed figure."""
    cmp = check.tables["comparison"]
    table = mapping.tables["collective_mapping"]
    return folded("the first budget: its inputs, the mapping, its terms and its check against every observed figure", [
        ("the inputs: value, unit, kind (measured, derived, assumed, reference), source",
         _t(human(inputs.tables["inputs"], "inputs"))),
        ("one 8-GPU all-reduce by mapping and message size (µs)", _t(table, rename=headers(table))),
        ("the budget by term and batch", _t(human(baseline.tables["budget_baseline"], "baseline"))),
        ("every observed figure in the sources", _t(human(check.shown["observations"], "observations"), digits={"tokens/s": 1})),
        ("the budget against each chosen figure", _t(human(cmp, "comparison"), digits=OBS)),
        ("the same as step times: what is missing", _t(human(cmp, "comparison_ms")))])


def measured_compute_fold(mc: Part, pj: Part) -> Folded:
    """Section 2: the budget on aiconfigurator's kernel tables (reference) and the projection's check."""
    return folded("the budget on aiconfigurator's kernel tables: components, every budget against the observations, the projection's check", [
        ("each component's time at 1 and 64 (ms): bare metal's budget on aiconfigurator's kernel tables (reference)", _t(mc.shown["components"])),
        ("every budget against the observations", _t(human(mc.tables["budgets"], "budgets"), digits=OBS)),
        ("where the kernel-table budget misses", _t(human(mc.tables["goal"], "goal"))),
        ("the projection operation by operation against the kernels aiconfigurator timed on the recorded GPU (reference)",
         _t(human(pj.tables["projection_check"], "projection_check")))])


def band_fold(band: Part, ceil: Part) -> Folded:
    """Section 3: each unmeasured input's range, the bare-metal band, aiconfigurator's estimate, the ceiling."""
    return folded("the band: each unmeasured input's range, the bare-metal band, aiconfigurator's estimate, the ceiling", [
        ("each unmeasured input: its low, mid and high value and why",
         _t(human(band.tables["verdict_inputs"], "verdict_inputs"))),
        ("bare metal predicted with its 5-95 % band",
         _t(human(band.shown["bare_metal_band"], "bare_metal_band"), digits={"error (%)": 1, **OBS})),   # one decimal: site-read6 R11
        ("the shared expert's hidden fraction at each point it was measured (its input's low, median and high)",
         _t(human(band.shown["hidden_points"], "hidden_points"), digits={"hidden (%)": 0, "saved (µs)": 0,
                                                                          "shared expert's own operations (µs)": 0})),
        ("aiconfigurator's own estimator on GLM-5's graph (its DSA op as dense MLA; section 2: on DeepSeek-V3's)",
         _t(human(band.shown["peer"], "peer"), digits={"this book's error (%)": 1, "aiconfigurator's error (%)": 1, **OBS})),
        ("every observed and predicted point as a fraction of the physical ceiling",
         _t(human(ceil.tables["ceilings"], "ceilings"), digits={"of the ceiling (%)": 0, "tokens/s": 1}))])


def held_out_fold(h: Part) -> Folded:
    """Section 3, held out: every held-out observation against its registered band, and what was left out."""
    return folded("the predictor held out: every public observation against the band registered before it, and what was left out", [
        ("each held-out observation against its registered band (tokens/s; per stream for the B200)",
         _t(human(h.shown["holdouts"], "holdouts"), digits={"error (%)": 0, "observation's percentile": 0})),
        ("observations left out, and why", _t(human(h.shown["left_out"], "left_out")))])


def vm_predicted_fold(s: Part) -> Folded:
    """Section 3: the host-path models and every recorded VM observation against each model's band."""
    scenarios = s.shown["scenarios"]
    return folded("the host-path models, and every recorded VM observation against each model's band", [
        ("the host-path models and the evidence each rests on", _t(scenarios, rename=headers(scenarios))),
        ("every recorded VM observation against each band (tokens/s)", _t(human(s.shown["vm_scores"], "vm_scores"), digits=OBS))])


def attribution_fold(s: Part) -> Folded:
    """Section 4: each host-path model's share of the VM's lost time, and what is left."""
    return folded("each host-path model's share of the VM's lost time, and what is left", [
        (f"each model's share of the lost time, with its band ({s.values['band_basis_64']}: the lost column "
         "gives the middle)", _t(human(s.shown["attribution"], "attribution"), digits=0)),
        ("what is left beyond predicted compute with bare metal's collectives",
         _t(human(s.shown["residuals"], "residuals")))])


def decision_fold(s: Part) -> Folded:
    """Section 5: the thresholds, each model's all-reduce at those sizes, and what each outcome means."""
    return folded("the thresholds, each host-path model's all-reduce at those sizes, and what each outcome means", [
        ("what an 8-rank all-reduce must cost to explain 80 % or 25 % of the loss",
         _t(human(s.shown["thresholds"], "thresholds"), units={"message": "bytes"}, digits=0)),
        ("each model's all-reduce at those sizes (the middle column's share of the loss is section 4's middle "
         "value; section 4's bands at 64 also take the decode batch)",
         _t(human(s.shown["evidence"], "evidence"), units={"message": "bytes"}, digits=0)),
        (f"at the achieved decode batch, the 64-stream bands' other end: each model's all-reduce at "
         f"{s.values['ach_kib']:.0f} KiB (the batch in whole sequences) and its share of the {s.values['ach_loss']:.0f} ms lost over "
         f"{s.values['ach_batch']:g} in flight (the VM's step there, {s.values['ach_vm_step']:.0f} ms, its batch over its "
         f"recorded tokens/s at 64, less bare metal's at the same batch, {s.values['ach_bm_step']:.1f} ms, "
         f"{s.values['ach_bm_from']}; bare metal's step taken in proportion to the batch instead would give "
         f"{s.values['ach_loss_prop']:.0f} ms, but a step does not shrink with its batch so), against bare metal's "
         f"{s.values['ach_bare']:.0f} µs (aiconfigurator's table, read between its points: derived)",
         _t(human(s.shown["achieved"], "achieved"), digits=0)),
        ("what the decisive measurement's two figures mean, and what to run next", _t(s.shown["outcomes"]))])


def run_fold(link: Part, coll: Part) -> Folded | None:
    """Section 5: this run's own link (priced in a budget) and collectives (not priced); None where it measured
    neither (the page shows nothing)."""
    run_tables = [*link.shown.values(), *coll.shown.values()]
    if not run_tables:
        return None
    return folded("this run's own link and collectives in the budget" if link.shown else
                  "this run's own collectives (not in the budget)",
                  [("", _t(t, rename=headers(t))) for t in run_tables])


def remedies_fold(s: Part) -> Folded:
    """Section 6: the remedies ranked, how each is priced and what the investigation found."""
    return folded("the remedies ranked, how each is priced and what the investigation found", [
        ("tokens/s for one stream (with the band over the scenarios) and at 64",
         _t(human(s.shown["remedies"], "remedies"), digits=1)),
        ("how each is priced, and what the investigation found when it tried it",
         _t(human(s.shown["remedies"], "remedy_findings")))])
