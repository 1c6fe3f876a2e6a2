"""What the diagnosis chapter says, computed: its tables, the rows it cites and the numbers its prose glues.

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
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from helpers.core import layout, recorded
from helpers.core.pick import PickError as FindingError, one, rows
from helpers.model import arith as ma
from helpers.model import budget as bd
from helpers.model import kernels as kt
from helpers.model import measured as mb
from helpers.model import verdict as vd

VM = "original VM"
BARE = "bare metal (reference)"
#: the two ends the budget is checked at: glue suffix -> (system, concurrency)
POINTS = {"vm_1": (VM, 1), "vm_64": (VM, 64), "bm_1": (BARE, 1), "bm_64": (BARE, 64)}
ENDS = (1, 64)


class DiagnosisError(ValueError):
    """Inputs to the diagnosis that contradict each other (for example, recorded mode with run results)."""


@dataclass(frozen=True)
class Part:
    """What one section shows: `values` (glue key -> value), `tables` (result name -> DataFrame, each
    declared in helpers.core.layout for 07_diagnosis and kept by the run: `save`), `shown` (tables the
    page shows but the run does not keep) and `figure` (the data its figure is drawn from)."""
    values: dict
    tables: dict = field(default_factory=dict)
    shown: dict = field(default_factory=dict)
    figure: dict = field(default_factory=dict)


CHAPTER = "07_diagnosis"


def save(run_dir, part: Part) -> None:
    """Write the part's tables into the run (helpers.core.layout: an undeclared name is an error)."""
    for name, table in part.tables.items():
        layout.save(run_dir, CHAPTER, name, table)


@dataclass(frozen=True)
class Diagnosis:
    """The chapter's inputs and what every section derives from them."""
    model: ma.ModelConfig
    tolerance: float
    live: bool                      # False: recorded mode, nothing of the run is read
    fits: pd.DataFrame | None       # the run's 06_vm_p2p fits; None: the recorded and reference links only
    sweep: pd.DataFrame | None      # the run's 06_vm_p2p collective sweep, where it measured one
    meas: mb.StepMeasurement        # the decode-step measurement (this run's or the committed study)
    base: bd.Scenario
    run_link: bd.Link | None
    pred: pd.DataFrame
    prim: pd.DataFrame
    verdict: vd.Verdict             # every prediction with its band (helpers.model.verdict)

    @classmethod
    def build(cls, model: str, tolerance: float, meas: mb.StepMeasurement, live: bool,
              fits: pd.DataFrame | None = None, sweep: pd.DataFrame | None = None,
              study: mb.PrecisionStudy | None = None, hostpath: pd.DataFrame | None = None,
              vm_allreduce_us: tuple = (0.0, 0.0)) -> "Diagnosis":
        """Every input is checked here, before any section computes (DiagnosisError or
        helpers.model.verdict.VerdictInputError naming it). `study`: the decode-step study with the shared
        expert overlapped and not (None: the committed one); `hostpath`: this run's host-path study rows;
        `vm_allreduce_us`: an 8-rank all-reduce measured on a VM at 12 KiB and 768 KiB (0, 0: none)."""
        if not live and (fits is not None or sweep is not None or hostpath is not None):
            raise DiagnosisError("recorded mode reads nothing from the run: pass fits=None, sweep=None and "
                                 "hostpath=None (or live=True to use this run's VM/P2P measurements)")
        m = ma.load_model(model)
        base = bd.baseline_scenario(m)
        study = study if study is not None else mb.precision_study(None)
        v = vd.Verdict.build(model, int(base.context.value), meas.floor_us(), study, hostpath, vm_allreduce_us)
        return cls(m, tolerance, live, fits, sweep, meas, base,
                   bd.select_run_link(fits) if fits is not None else None, bd.predict_all(m, fits),
                   bd.primary_observations(), v)

    @property
    def context(self) -> int:
        return int(self.base.context.value)

    def observed(self, system: str, concurrency: int, column: str = "observed") -> float:
        return float(one(self.prim, "the primary observations", system=system, concurrency=concurrency)[column])

    def baseline_table(self) -> pd.DataFrame:
        """The VM baseline's pure-decode rows of the prediction."""
        return rows(self.pred, "the prediction", scenario=bd.VM_SCENARIO, prefill_ratio=0.0)


# ------------------------------------------------------------------------------------------ page-wide
RECORDED_STEP_TEXT = ("In recorded mode the chapter reads nothing from the run: its prediction uses the recorded "
                      "and reference links only (`fits=None`), and its compute the committed decode-step "
                      "study, `{where}`, timed on {device}.")
RUN_STEP_TEXT = ("The decode-step measurement is this run's: the decode-step chapter timed the model's real TP8 "
                 "shapes on {device}.")
FALLBACK_STEP_TEXT = ("This run has no decode-step measurement of the model's real TP8 shapes on a GPU (the "
                      "decode-step chapter did not run, or ran on a CPU or in recorded mode), so the compute comes "
                      "from the committed study `{where}`, timed on {device}.")


def step_source_text(d: Diagnosis) -> str:
    """Where the compute comes from, as the page says it (three variants)."""
    text = RECORDED_STEP_TEXT if not d.live else RUN_STEP_TEXT if d.meas.where == "this run" else FALLBACK_STEP_TEXT
    return text.format(where=d.meas.where, device=d.meas.device)


def overview(d: Diagnosis) -> dict:
    return {"obs_vm_1": d.observed(VM, 1), "step_source_text": step_source_text(d)}


# ------------------------------------------------------------------------------------------ 1. inputs
def inputs(d: Diagnosis) -> Part:
    """The budget's inputs, each labelled measured, derived, assumed or reference, with its source."""
    base, m = d.base, d.model
    link, ref_ar = base.link, bd.reference_allreduce_link(base.tp)
    qs = [base.mem_bw, base.launch_graph, base.launch_eager, base.context, bd.workload_prefill_ratio()]
    tab = [{"input": q.name, "value": q.value, "unit": q.unit, "kind": q.kind, "source": q.source} for q in qs]
    tab += [{"input": f"{lk.name}: alpha", "value": lk.alpha_us, "unit": "us", "kind": lk.kind, "source": lk.source}
            for lk in (link, ref_ar)]
    tab += [{"input": f"{link.name}: beta", "value": link.beta_GBps, "unit": "GB/s", "kind": link.kind,
             "source": link.source}]
    tab += [{"input": "kernels per decode step", "value": bd.kernels_per_step(m), "unit": "kernels", "kind": "assumed",
             "source": "one kernel per operation of the layer (helpers.model.budget op lists)"},
            {"input": "collectives per decode step", "value": ma.collectives_per_step(m), "unit": "collectives",
             "kind": "derived", "source": "layer structure (expert-parallelism chapter)"},
            {"input": "weights read per GPU, batch 1", "value": bd.step_terms(m, base, 1)["bytes_per_gpu"] / ma.GiB,
             "unit": "GiB", "kind": "derived", "source": "model configuration and precision mix"}]
    values = {"bw": base.mem_bw.value, "kfloor_graph": base.launch_graph.value, "kfloor_eager": base.launch_eager.value,
              "n_kernels": bd.kernels_per_step(m), "n_coll": ma.collectives_per_step(m), "alpha": link.alpha_us,
              "beta": link.beta_GBps, "ctx": d.context}
    return Part(values, {"inputs": pd.DataFrame(tab)})


# ------------------------------------------------------------------------------------------ 2. mapping
MAPPING_TOKENS = (1, 4, 16, 64)


def mapping(d: Diagnosis) -> Part:
    """The VM copy fit mapped to an 8-GPU all-reduce by each algorithm, beside bare metal's NCCL all-reduce:
    a table at the decode sizes and the curves of the figure (long form: series, kind, size, time)."""
    m, tp, link = d.model, d.base.tp, d.base.link
    ref_ar = bd.reference_allreduce_link(tp)
    sizes = ma.allreduce_bytes(m, list(MAPPING_TOKENS))
    tab = pd.DataFrame({"tokens": list(MAPPING_TOKENS), "message_KiB": sizes / 1024})
    for alg in bd.ALGORITHMS:
        tab[f"VM {alg} (us)"] = [bd.collective_time_us(link, "all_reduce", s, tp, alg) for s in sizes]
    tab["bare metal NCCL, reference (us)"] = [bd.collective_time_us(ref_ar, "all_reduce", s, tp) for s in sizes]
    _, pts = bd.vm_copy_link(m)
    xs = np.geomspace(pts.size_bytes.min() / 2, pts.size_bytes.max() * 2, 40)
    curves = [("alpha-beta fit (derived)", "fit", link.time_us(xs))]
    curves += [(f"8-GPU all-reduce, {alg} (derived)", "mapping",
                [bd.collective_time_us(link, "all_reduce", x, tp, alg) for x in xs]) for alg in bd.ALGORITHMS]
    curves += [("bare-metal NCCL all-reduce (reference)", "reference",
                [bd.collective_time_us(ref_ar, "all_reduce", x, tp) for x in xs])]
    long = pd.concat([pd.DataFrame({"series": n, "kind": k, "size_bytes": xs, "time_us": v}) for n, k, v in curves],
                     ignore_index=True)
    first = one(tab, "the collective mapping", tokens=1)
    values = {"ring_1": float(first["VM ring (us)"]), "tree_1": float(first["VM tree (us)"]),
              "oneshot_1": float(first["VM one_shot (us)"]), "ref_1": float(first["bare metal NCCL, reference (us)"])}
    return Part(values, {"collective_mapping": tab},
                figure={"points": pts, "curves": long, "points_label": "recorded: original VM copy"})


# ------------------------------------------------------------------------------------------ 3. the budget
BASELINE_COLUMNS = ["batch", "memory_us", "launch_us", "comm_us", "total_ms", "share_memory", "share_launch",
                    "share_comm", "tok_s_per_stream", "tok_s_aggregate"]


def baseline(d: Diagnosis) -> Part:
    """The VM baseline by term and batch, its verdict, and the figure's bars (ms) and observed steps."""
    tab = d.baseline_table()
    b1, b64 = one(tab, "the VM baseline", batch=1), one(tab, "the VM baseline", batch=64)
    bars = pd.DataFrame({bd.TERM_NAMES[k] + " (model)": tab[k].to_numpy() / 1e3 for k in bd.TERMS},
                        index=tab["batch"].to_numpy())
    obs = pd.Series({c: c / d.observed(VM, c) * 1e3 for c in ENDS})
    values = {"verdict": bd.verdict(tab), "pred_vm_1": float(b1.tok_s_per_stream), "pred_vm_64": float(b64.tok_s_aggregate),
              "share_comm_1": 100 * float(b1.share_comm), "share_mem_64": 100 * float(b64.share_memory)}
    return Part(values, {"budget_baseline": tab[BASELINE_COLUMNS]},
                figure={"bars": bars, "observed": obs, "observed_label": "observed step, original VM (recorded)"})


# ------------------------------------------------------------------------------------------ 4. the check
GOAL_TEXT = {
    (True, True): "The goal is met at both ends on both systems.",
    (False, True): "The goal is not met: the prediction misses on the original VM.",
    (True, False): "The goal is not met: the prediction misses on bare metal.",
    (False, False): "The goal is not met: the prediction misses on the original VM and on bare metal.",
}
OBSERVATION_COLUMNS = ["system", "kind", "experiment", "concurrency", "value", "value_low", "value_high", "approx",
                       "source"]
COMPARISON_COLUMNS = ["system", "concurrency", "steps", "observed_tok_s", "observed_min", "observed_max",
                      "predicted_tok_s", "rel_err", "within_tolerance", "observed_step_ms", "predicted_step_ms",
                      "missing_ms", "missing_us_per_collective"]


def goal_text(vm_ok: bool, bm_ok: bool) -> str:
    """Whether the old budget agrees at both ends (1 and 64) on each system."""
    return GOAL_TEXT[(bool(vm_ok), bool(bm_ok))]


def check(d: Diagnosis) -> Part:
    """The old budget against every observed figure: the figures, the comparison (decode only and with the
    workload's prompt tokens mixed in), the numbers the text cites and the recorded memory activity."""
    obs = bd.observations()[OBSERVATION_COLUMNS].sort_values(["kind", "concurrency"])
    vm64 = one(d.prim, "the primary observations", system=VM, concurrency=64)
    values = {"sat_lo": float(vm64["observed_min"]), "sat_hi": float(vm64["observed_max"]),
              "sat_primary": float(vm64["observed"]), "n_sat": int(vm64["n_figures"])}
    cmp = bd.compare(d.pred, model=d.model.key, tolerance=d.tolerance).assign(steps="decode only")
    mixed = bd.compare(d.pred, model=d.model.key, prefill_ratio=bd.workload_prefill_ratio().value,
                       tolerance=d.tolerance).assign(steps="decode + prompt tokens")
    values.update({"tol_pct": 100 * d.tolerance, "n_ok": int(cmp.within_tolerance.sum())})
    ok = {}
    for key, (system, conc) in POINTS.items():
        r = one(cmp, "the comparison", system=system, concurrency=conc)
        ok[key] = bool(r["within_tolerance"])
        values.update({f"err_{key}": 100 * float(r["rel_err"]), f"miss_{key}": float(r["missing_us_per_collective"]),
                       f"c_obs_{key}": float(r["observed_tok_s"]), f"c_pred_{key}": float(r["predicted_tok_s"])})
    values["goal_text"] = goal_text(ok["vm_1"] and ok["vm_64"], ok["bm_1"] and ok["bm_64"])
    values["pred_mixed_vm_64"] = float(one(mixed, "the mixed comparison", system=VM, concurrency=64)["predicted_tok_s"])
    mem = one(recorded.load("recorded/gpu_profile.csv"), "data/recorded/gpu_profile.csv",
              metric="memory_bandwidth_utilization")
    b64 = one(d.baseline_table(), "the VM baseline", batch=64)
    vm_step = one(cmp, "the comparison", system=VM, concurrency=64)["observed_step_ms"]
    values.update({"membusy_lo": float(mem["value_low"]), "membusy_hi": float(mem["value_high"]),
                   "pred_membusy": 100 * float(b64.memory_us / 1e3 / vm_step)})
    both = pd.concat([cmp, mixed], ignore_index=True)
    return Part(values, {"comparison": both}, {"observations": obs})


# ------------------------------------------------------------------------------------------ 5. measured compute
BUDGET_KEYS = (("mk", "measured kernels"), ("pj", "projection"), ("aic", "aiconfigurator"), ("old", "old"))
BUDGET_COLUMNS = ["system", "concurrency", "budget", "kind", "step_ms", "predicted_tok_s", "observed_tok_s",
                  "rel_err", "within_tolerance"]


def _projected_split(d: Diagnosis, batch: int, tolerance: float | None = mb.FIDELITY_TOLERANCE) -> pd.DataFrame:
    p = mb.projected_terms(d.meas, d.model, batch, d.context, tolerance=tolerance)
    return p.groupby("component", sort=False)["us"].sum().reset_index()


#: how the projection fares against bare metal, by (within tolerance at 1, at 64)
PJ_VERDICT = {(False, False): "is far off", (True, False): "is within the tolerance for one stream but not at 64",
              (False, True): "is outside the tolerance for one stream and within it at 64",
              (True, True): "is within the tolerance at both ends"}
PJ_TABLES_NONE = ("aiconfigurator has no SGLang kernels for {device}, so no component's fidelity can be checked "
                  "there and every component is projected.")
PJ_TABLES_ALL_KEPT = ("Every component is within {tol:g} times the engine composite on {device}, so every one is "
                      "projected.")
PJ_TABLES_SOME = ("Only components whose time on {device} is within {tol:g} times the engine composite for the same "
                  "operations (aiconfigurator's SGLang kernels on that GPU class) are projected; the others take "
                  "the recorded GPU's kernel tables instead: {which}.")


def projection_tables_text(pjs: dict[int, pd.DataFrame], device: str, tol: float = mb.FIDELITY_TOLERANCE) -> str:
    """Which components the projection prices from the recorded GPU's tables instead (three variants)."""
    if all(p["engine_ratio"].isna().all() for p in pjs.values()):
        return PJ_TABLES_NONE.format(device=device)
    parts = []
    for b, p in pjs.items():
        own = p[p["component"] != "collectives"]
        out = own[own["priced_by"] != "projection"]
        if len(out):
            parts.append(f"at batch {b} the " + ", ".join(f"{r.component} ({r.engine_ratio:.2f}x)"
                                                         for r in out.itertuples()))
    if not parts:
        return PJ_TABLES_ALL_KEPT.format(tol=tol, device=device)
    return PJ_TABLES_SOME.format(tol=tol, device=device, which="; ".join(parts))


def aiconfigurator_outcome() -> dict:
    """How aiconfigurator's own estimator fared: its stock run's error (without the file it names) and the
    substitution it ran with."""
    est = kt.estimate()
    stock = rows(est, "aiconfigurator's estimate (data/reference/aic_estimate.csv)", substitution="none",
                 quantity="decode_step").iloc[0]
    sub = rows(est, "aiconfigurator's estimate (data/reference/aic_estimate.csv)", status="ok",
               quantity="decode_step", substitution=kt.DSV3_GRAPH).iloc[0]
    return {"aic_stock": str(stock["note"]).split(" (first:")[0], "aic_sub": str(sub["substitution"])}


def measured_compute(d: Diagnosis) -> Part:
    """The budget on measured kernels and on the projection of the decode-step measurement, per component
    at 1 and 64, every budget against the observations, and the goal."""
    m, meas, ctx = d.model, d.meas, d.context
    kts = {b: mb.kernel_terms(m, b, ctx, meas.floor_us()) for b in ENDS}
    pjs = {b: mb.projected_terms(meas, m, b, ctx) for b in ENDS}
    split_kt = pd.concat([mb.components(t).assign(batch=b) for b, t in kts.items()])
    split_pj = pd.concat([_projected_split(d, b).assign(batch=b) for b in ENDS])
    comp = (split_kt.assign(budget="measured kernels (ms)").pivot_table(index="component", columns=["budget", "batch"],
            values="us", sort=False) / 1e3).join(split_pj.assign(budget="projection (ms)").pivot_table(
            index="component", columns=["budget", "batch"], values="us", sort=False) / 1e3)
    bud = mb.budgets_table(m, d.pred, meas, ctx, d.tolerance)
    goal = mb.goal(bud, kts, d.tolerance)
    values = {}
    for c in ENDS:
        for key, bid in BUDGET_KEYS:
            r = mb.pick_budget(bud, BARE, c, bid)
            values[f"bm_{key}_{c}"] = float(r["predicted_tok_s"])
            values[f"bm_{key}_err_{c}"] = 100 * float(r["rel_err"])
        g = one(goal, "the goal", concurrency=c)
        values.update({f"bm_obs_{c}": float(mb.pick_budget(bud, BARE, c, "measured kernels")["observed_tok_s"]),
                       f"bm_mk_ms_{c}": float(g["predicted_ms"]), f"bm_obs_ms_{c}": float(g["observed_ms"]),
                       f"goal_within_{c}": "within" if g["within"] else "outside",
                       f"goal_aic_{c}": "closer than" if g["as_close_as_aic"] else "farther than"})
        for k in ("largest", "second"):
            values.update({f"goal_{k}_{c}": str(g[k]), f"goal_{k}_ms_{c}": float(g[f"{k}_ms"]),
                           f"goal_{k}_pct_{c}": 100 * abs(float(g[f"{k}_change"]))})
    values["pj_tables_text"] = projection_tables_text(pjs, meas.device)
    values["pj_verdict"] = PJ_VERDICT[tuple(abs(values[f"bm_pj_err_{c}"]) <= 100 * d.tolerance for c in ENDS)]
    values.update({"aic_dist": kt.AIC_DISTRIBUTION, "msg_kib_64": float(ma.allreduce_bytes(m, 64)) / 1024,
                   "bw_here": meas.peak().value, "bw_rtx": mb.gpu_bandwidth(kt.RTX).value,
                   "meas_device": meas.device, "meas_where": meas.where, **aiconfigurator_outcome()})
    tables = {"kernel_terms": pd.concat([t.assign(batch=b) for b, t in kts.items()]),
              "projection": pd.concat([p.assign(batch=b) for b, p in pjs.items()]), "budgets": bud, "goal": goal}
    return Part(values, tables, {"components": comp})


PROJECTION_CHECK_COLUMNS = ["batch", "op", "ours_us", "projected_us", "aic_target_us", "target_dtype",
                            "ratio_projected", "ratio_here"]


def projection_check(d: Diagnosis) -> Part:
    """The projection, operation by operation, against aiconfigurator's kernels on the recorded GPU."""
    fid = mb.op_fidelity_table(d.meas, d.model, ENDS, d.context)
    one_stream = _projected_split(d, 1, tolerance=None)     # the emulated step's own, all projected
    small = float(one(one_stream, "the projected step at batch 1", component="norms and small ops")["us"]) / 1e3
    small += float(one(one_stream, "the projected step at batch 1", component="indexer")["us"]) / 1e3
    values = {"pj_ratio_med": float(fid["ratio_projected"].median()), "pj_ratio_lo": float(fid["ratio_projected"].min()),
              "pj_ratio_hi": float(fid["ratio_projected"].max()),
              "pj_hi_op": str(fid.loc[fid["ratio_projected"].idxmax(), "op"]),
              "pj_lo_op": str(fid.loc[fid["ratio_projected"].idxmin(), "op"]),
              "here_ratio_med": float(fid["ratio_here"].median()), "pj_small_idx_1": small,
              "pj_small_what": "fused" if d.meas.fusion == "fused" else "unfused"}
    return Part(values, {"projection_check": fid})


# ------------------------------------------------------------------------------------------ 7. this run
RUN_TEXT_RECORDED = "In recorded mode this chapter ignores the run's own measurements."
RUN_TEXT_NO_FITS = ("This run has no `06_vm_p2p/fits.csv` (the VM/P2P chapter did not measure), so only the "
                    "recorded and reference links are used.")
RUN_TEXT_NO_LINK = "This run's `fits.csv` holds no measured fit, so only the recorded and reference links are used."
RUN_TEXT_LINK = ("This run measured a link: {name} ({source}), alpha {alpha:.1f} us, beta {beta:.1f} GB/s, {used}. "
                 "With it in place of the VM's, the budget predicts {tok_1:.1f} tokens/s for one stream and "
                 "{tok_max:.0f} in aggregate at batch {bmax}. That machine is not the original VM: this is a "
                 "prediction for the GLM-5 deployment on a link like the one measured here, not a check.")
RUN_COLUMNS = ["batch", "memory_us", "launch_us", "comm_us", "total_ms", "tok_s_per_stream", "tok_s_aggregate"]


def run_link(d: Diagnosis) -> Part:
    """The link this run measured and what the budget predicts with it (`run_text`), or why there is none."""
    if not d.live:
        return Part({"run_text": RUN_TEXT_RECORDED})
    if d.fits is None:
        return Part({"run_text": RUN_TEXT_NO_FITS})
    if d.run_link is None:
        return Part({"run_text": RUN_TEXT_NO_LINK})
    rt = rows(d.pred, "the prediction", scenario=bd.RUN_SCENARIO, prefill_ratio=0.0)
    r1, rmax = one(rt, "this run's link", batch=1), rt.loc[rt["batch"].idxmax()]
    lk = d.run_link
    text = RUN_TEXT_LINK.format(name=lk.name, source=lk.source, alpha=lk.alpha_us, beta=lk.beta_GBps,
                                used="used as the all-reduce itself" if lk.collective else "mapped by a ring",
                                tok_1=r1.tok_s_per_stream, tok_max=rmax.tok_s_aggregate, bmax=int(rmax.batch))
    return Part({"run_text": text}, shown={"run_link": rt[RUN_COLUMNS]})


COLL_TEXT_NONE = "No collective sweep was run in this run, so there is no live all-to-all vs all-reduce comparison."
COLL_TEXT_ONE_OP = "The run's collective sweep lacks one of all-to-all and all-reduce, so they are not compared."
COLL_TEXT_RATIO = ("The run's collective sweep has both all-to-all and all-reduce; at decode message sizes the "
                   "all-to-all took {ratio:.2f} times the all-reduce's time (median over sizes and backends, "
                   "measured on this run's machine), to set beside the byte and round counts of the "
                   "expert-parallelism chapter.")


def collective_points(sweep: pd.DataFrame) -> pd.DataFrame:
    """Time per collective by backend, world size and size, one column per op: the default setting, timed
    with the CUDA-graph harness where the sweep has it (as the decode step issues its all-reduces), else
    eagerly."""
    s = rows(sweep, "the run's collective sweep", variant="default")
    s = s[s["harness"] == ("graph" if (s["harness"] == "graph").any() else "eager")]
    return s.pivot_table(index=["backend", "world_size", "size_bytes"], columns="op", values="time_us").reset_index()


def collectives(d: Diagnosis) -> Part:
    """This run's all-to-all against its all-reduce at decode sizes (`coll_text`), where it measured both."""
    if not d.live or d.sweep is None or not len(d.sweep):
        return Part({"coll_text": COLL_TEXT_NONE})
    piv = collective_points(d.sweep)
    if not {"all_reduce", "all_to_all"} <= set(piv.columns):
        return Part({"coll_text": COLL_TEXT_ONE_OP}, shown={"collective_points": piv})
    lo, hi = ma.allreduce_bytes(d.model, 1) / 4, ma.allreduce_bytes(d.model, 64) * 4
    dec = piv[piv.size_bytes.between(lo, hi)]
    if not len(dec):
        raise FindingError(f"the run's collective sweep has no point between {lo:.0f} and {hi:.0f} B (the decode "
                           f"sizes); its sizes: {sorted(piv.size_bytes.unique())}")
    ratio = (dec.all_to_all / dec.all_reduce).median()
    return Part({"coll_text": COLL_TEXT_RATIO.format(ratio=ratio)}, shown={"collective_points": piv})


# ------------------------------------------------------------------------------------------ weights per GPU
def fits_on_gpus(d: Diagnosis) -> dict[str, bool]:
    """Scenario -> whether its weights per GPU fit in the recorded GPUs' memory at the recorded
    --mem-fraction-static (derived)."""
    return {n: bool(ma.weights_per_gpu(d.model, s.tp, s.pp) < _weight_budget_bytes()) for n, s in _scenarios(d).items()}


def _scenarios(d: Diagnosis) -> dict[str, bd.Scenario]:
    return {s.name: s for s in bd.scenarios(d.model, d.run_link)}


def _weight_budget_bytes() -> float:
    gpu_bytes = float(recorded.hardware()["gpu_memory"].value) * ma.GiB
    flag = one(recorded.load("recorded/launch_config.csv"), "data/recorded/launch_config.csv",
               name="--mem-fraction-static")
    return gpu_bytes * float(flag["value"])



# ------------------------------------------------------------------------------------------ 6. bands
BAND_TEXT = {
    (True, True): "The observed point falls inside the band at both ends.",
    (True, False): "The observed point falls inside the band for one stream and outside it at concurrency 64.",
    (False, True): "The observed point falls outside the band for one stream and inside it at concurrency 64.",
    (False, False): "The observed point falls outside the band at both ends.",
}
BAND_COLUMNS = ["concurrency", "observed_tok_s", "predicted_tok_s", "band_low_tok_s", "band_high_tok_s", "rel_err",
                "inside_band"]


def _band_rows(t: pd.DataFrame, panel_of, label_of, kind: str = "model") -> pd.DataFrame:
    obs_kind = lambda r: "reference" if r.system == BARE else "recorded"  # noqa: E731
    obs_label = lambda r: f"observed: {r.system}" if r.system == BARE else f"observed: {r.system} (recorded)"  # noqa: E731
    return pd.DataFrame([{"panel": panel_of(r), "label": label_of(r), "kind": kind, "band_low": r.band_low_tok_s,
                          "predicted": r.predicted_tok_s, "band_high": r.band_high_tok_s,
                          "observed": r.observed_tok_s, "observed_kind": obs_kind(r), "observed_label": obs_label(r)}
                         for r in t.itertuples()])


def bare_metal_band(d: Diagnosis) -> Part:
    """Bare metal from measured inputs alone, with its 5-95 % band, against the reference at 1 and 64;
    the uncertain inputs (each with its range and reason)."""
    v = d.verdict
    t = v.bare_metal()
    values, inside = {}, {}
    for c in ENDS:
        r = one(t, "the bare-metal band", concurrency=c)
        inside[c] = bool(r["inside_band"])
        values.update({f"bmb_pt_{c}": float(r["predicted_tok_s"]), f"bmb_lo_{c}": float(r["band_low_tok_s"]),
                       f"bmb_hi_{c}": float(r["band_high_tok_s"]), f"bmb_obs_{c}": float(r["observed_tok_s"]),
                       f"bmb_err_{c}": 100 * float(r["rel_err"]), f"bmb_inside_{c}": "inside" if inside[c] else "outside"})
    values.update({"band_text": BAND_TEXT[(inside[1], inside[64])], "n_samples": v.samples, "band_seed": v.seed,
                   "hidden_mid_pct": 100 * v.inputs.get("shared_hidden", BARE).mid})
    for c in ENDS:
        sp = v.split(c)
        values[f"split_step_{c}"] = sp["step"]
        for k in ("experts", "collectives", "other"):
            values[f"split_{k}_{c}"] = 100 * sp[k] / sp["step"]
        values[f"split_attention_{c}"] = 100 * (sp["attention"] + sp["indexer"]) / sp["step"]
    peer = peer_on_glm5_graph(d)
    for r in peer.itertuples():
        values.update({f"peer_{r.concurrency}": r.predicted_tok_s, f"peer_err_{r.concurrency}": 100 * r.rel_err})
    values["peer_what"] = kt.GLM5_GRAPH
    return Part(values, {"verdict_inputs": v.inputs.table(), "bare_metal_band": t},
                {"bare_metal_band": t[BAND_COLUMNS], "peer": peer})


def peer_on_glm5_graph(d: Diagnosis) -> pd.DataFrame:
    """aiconfigurator's own estimator composed on GLM-5's op graph from the same measured tables (its DSA
    attention op replaced by its dense MLA decode ops, stated), beside the book's point prediction and the
    observation, at 1 and 64 (reference: its step time, turned into tokens/s as the book's)."""
    bm = d.verdict.bare_metal()
    out = []
    for c in ENDS:
        us, status, note = kt.estimate_step_us(c, substitution=kt.GLM5_GRAPH)
        if us is None:
            raise FindingError(f"aiconfigurator has no GLM-5-graph estimate at batch {c}: {status} ({note})")
        obs = d.observed(BARE, c)
        ours = float(one(bm, "the bare-metal band", concurrency=c)["predicted_tok_s"])
        pred = c * 1e6 / us
        out.append({"concurrency": c, "observed_tok_s": obs, "this_book_tok_s": ours, "predicted_tok_s": pred,
                    "rel_err": (pred - obs) / obs, "book_rel_err": (ours - obs) / obs})
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------------ 7. the VM predicted
VM_TAKEAWAY_NONE = ("No host-path model with evidence behind it reproduces the VM's one-stream speed on its own: "
                    "the VM lost more than any of them prices.")
VM_TAKEAWAY_SOME = ("{n} of {of} host-path models reproduce the VM's one-stream speed within their band; the others "
                    "leave part of the loss unexplained.")
VM_COLUMNS = ["scenario", "what", "observed_tok_s", "predicted_tok_s", "band_low_tok_s", "band_high_tok_s",
              "inside_band"]


def vm_predicted(d: Diagnosis) -> Part:
    """The VM predicted scenario by scenario (measured compute + each host-path model with evidence), every
    recorded VM observation scored against each band; the figure: both systems' bands at 1 and 64."""
    v = d.verdict
    t = v.vm()
    scen = pd.DataFrame([{"scenario": h.label, "kind": h.kind, "evidence": h.evidence} for h in v.scenarios])
    one_stream = rows(t, "the VM predictions", observation="vm_1")
    c64 = rows(t, "the VM predictions", observation="vm_64")
    values = {"n_scenarios": len(v.scenarios), "n_vm_points": int(t["observation"].nunique()),
              "n_inside": int(t["inside_band"].sum()), "n_rows": len(t),
              "vmp_lo_1": float(one_stream["predicted_tok_s"].min()), "vmp_hi_1": float(one_stream["predicted_tok_s"].max()),
              "vmp_lo_64": float(c64["predicted_tok_s"].min()), "vmp_hi_64": float(c64["predicted_tok_s"].max()),
              "vm_obs_1": float(one_stream["observed_tok_s"].iloc[0]), "vm_obs_64": float(c64["observed_tok_s"].iloc[0]),
              "n_inside_1": int(one_stream["inside_band"].sum())}
    values["vm_takeaway"] = (VM_TAKEAWAY_NONE if values["n_inside_1"] == 0 else
                             VM_TAKEAWAY_SOME.format(n=values["n_inside_1"], of=len(v.scenarios)))
    bm = v.bare_metal()
    fig = pd.concat([
        _band_rows(bm, lambda r: "one stream" if r.concurrency == 1 else "concurrency 64",
                   lambda r: "bare metal (measured kernels)", "measured"),
        _band_rows(t[t["observation"].isin(["vm_1", "vm_64"])],
                   lambda r: "one stream" if r.concurrency == 1 else "concurrency 64",
                   lambda r: f"VM: {r.scenario}")], ignore_index=True)
    return Part(values, {"vm_scenarios": t}, {"scenarios": scen, "vm_scores": t[VM_COLUMNS]},
                figure={"rows": fig})


# ------------------------------------------------------------------------------------------ 8. attribution
def attribution(d: Diagnosis) -> Part:
    """The VM's lost time per step against bare metal and the share each scenario explains (with its band),
    what is left; and the left-over beyond predicted compute at batch 1 and 17."""
    v = d.verdict
    a = v.attribution()
    res = v.residuals()
    values = {}
    for c in ENDS:
        g = a[a["concurrency"] == c]
        values.update({f"loss_{c}": float(g["lost_ms_per_step"].iloc[0]), f"loss_lo_{c}": float(g["lost_ms_low"].iloc[0]),
                       f"share_lo_{c}": 100 * max(0.0, float(g["share_low"].min())),
                       # a model can price more than the whole loss: the page says 100 %, as the rule's sentence does
                       f"share_hi_{c}": 100 * min(1.0, float(g["share_high"].max()))})
    for r in res.itertuples():
        values[f"left_{r.batch}"] = float(r.left_over_ms)
        values[f"step_obs_{r.batch}"] = float(r.observed_step_ms)
    shown = a[["concurrency", "scenario", "lost_ms_per_step", "host_path_excess_ms", "share_explained", "share_low",
               "share_high", "unexplained"]]
    return Part(values, {"attribution": a}, {"attribution": shown, "residuals": res})


# ------------------------------------------------------------------------------------------ 9. the decision rule
def decision(d: Diagnosis) -> Part:
    """What an 8-rank all-reduce on the VM must cost for the host path to explain at least 80 % (at most
    25 %) of the loss, each scenario's figure at those sizes, and the conclusion chosen from them; the
    seeds' claim (a copy's latency per all-reduce) in the same terms."""
    v = d.verdict
    th, ev = v.thresholds(), v.evidence()
    case, text = vd.conclusion(ev, th)
    t1 = one(th, "the thresholds", concurrency=1)
    link = d.base.link
    seed_ms = float(t1["all_reduces_per_step"]) * link.alpha_us / 1e3
    values = {"conclusion_case": case, "conclusion_text": text, "page1_status": vd.STATUS[case],
              "cmd_book": vd.MEASURE_COMMANDS[0],
              "cmd_nccl": vd.MEASURE_COMMANDS[1], "copy_alpha": link.alpha_us, "seed_floor_ms": seed_ms,
              "seed_floor_pct": 100 * seed_ms / float(t1["lost_ms_per_step"]),
              "n_ar": int(t1["all_reduces_per_step"])}
    for t in th.itertuples():
        c = int(t.concurrency)
        values.update({f"t80_{c}": t.explains_80_us, f"t25_{c}": t.explains_25_us, f"kib_{c}": t.message_bytes / 1024,
                       f"bare_ar_{c}": t.bare_metal_us})
    ring = ev[(ev["scenario_key"] == "copy_ring") & (ev["concurrency"] == 1)]
    if len(ring):
        values["seed_ring_pct"] = 100 * float(ring["share_mid"].iloc[0])
    shown = ev[["scenario", "concurrency", "message_bytes", "low_us", "mid_us", "high_us", "share_low", "share_mid",
                "share_high"]]
    return Part(values, {"decision_thresholds": th, "decision_evidence": ev}, {"thresholds": th, "evidence": shown})


# ------------------------------------------------------------------------------------------ 10. ceilings
CEILING_TAKEAWAY = {
    True: ("Even bare metal reaches less than half of the bandwidth floor for one stream: latency, not bytes, "
           "sets a single stream's speed on these GPUs."),
    False: "Bare metal reaches half of the bandwidth floor or more for one stream: bytes set its speed.",
}
def ceilings(d: Diagnosis) -> Part:
    """Every observed and predicted point as a fraction of the weight-bytes floor at TP8 (derived)."""
    v = d.verdict
    bm, vm = v.bare_metal(), v.vm()
    rows_ = []
    for c in ENDS:
        ce = vd.ceiling(d.model, c)
        b = one(bm, "the bare-metal band", concurrency=c)
        vmc = vm[vm["observation"] == f"vm_{c}"]
        pts = [("original VM, observed (recorded)", float(vmc["observed_tok_s"].iloc[0])),
               ("bare metal, observed (reference)", float(b["observed_tok_s"])),
               ("bare metal, predicted (derived)", float(b["predicted_tok_s"])),
               ("original VM, predicted: slowest scenario (derived)", float(vmc["predicted_tok_s"].min())),
               ("original VM, predicted: fastest scenario (derived)", float(vmc["predicted_tok_s"].max()))]
        for what, tok in pts:
            rows_.append({"concurrency": c, "point": what, "tok_s": tok, "ceiling_tok_s": ce["ceiling_tok_s"],
                          "fraction_of_ceiling": tok / ce["ceiling_tok_s"], "bytes_per_gpu_GB": ce["bytes_per_gpu_GB"],
                          "floor_ms": ce["floor_ms"]})
    t = pd.DataFrame(rows_)
    bm1 = float(one(t[t["concurrency"] == 1], "the ceilings", point="bare metal, observed (reference)")["fraction_of_ceiling"])
    values = {"ceiling_takeaway": CEILING_TAKEAWAY[bm1 < 0.5]}
    for c in ENDS:
        g = t[t["concurrency"] == c]
        values.update({f"ceil_{c}": float(g["ceiling_tok_s"].iloc[0]), f"ceil_gb_{c}": float(g["bytes_per_gpu_GB"].iloc[0]),
                       f"ceil_ms_{c}": float(g["floor_ms"].iloc[0]),
                       f"frac_vm_{c}": 100 * float(one(g, "the ceilings", point="original VM, observed (recorded)")["fraction_of_ceiling"]),
                       f"frac_bm_{c}": 100 * float(one(g, "the ceilings", point="bare metal, observed (reference)")["fraction_of_ceiling"])})
    return Part(values, {"ceilings": t})


# ------------------------------------------------------------------------------------------ 11. remedies
REMEDY_COLUMNS = ["rank", "remedy", "tried", "tok_s_mid @1", "tok_s_low @1", "tok_s_high @1", "tok_s_mid @64",
                  "priced_as"]


def remedies(d: Diagnosis) -> Part:
    """The remedies ranked by predicted gain with bands; each says whether the investigation tried it."""
    fit = fits_on_gpus(d)
    r = vd.remedies(d.verdict, fit[bd.TP4_SCENARIO])
    top = one(r, "the ranked remedies", rank=1)
    bm1 = d.observed(BARE, 1)
    values = {"top_remedy": str(top["remedy"]), "top_gain_lo": float(top["tok_s_low @1"]) / d.observed(VM, 1),
              "top_gain_hi": float(top["tok_s_high @1"]) / d.observed(VM, 1),
              "top_tok_lo": float(top["tok_s_low @1"]), "top_tok_hi": float(top["tok_s_high @1"]),
              "bm_over_vm_1": bm1 / d.observed(VM, 1),
              "unpriced_remedies": "; ".join(str(x) for x in r.loc[r["tok_s_mid @1"].isna(), "remedy"])}
    return Part(values, {"remedies": r}, {"remedies": r[REMEDY_COLUMNS + ["finding"]]})
