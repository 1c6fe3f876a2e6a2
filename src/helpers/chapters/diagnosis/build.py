"""The diagnosis chapter's inputs (`Diagnosis`, every one checked when it is built), the `Part` each section
returns and `save`, which writes its tables into the run, and the page-wide values (`overview`)."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from helpers.core import layout
from helpers.core.pick import one, rows
from helpers.interconnect import recorded_labels
from helpers.model import arith as ma
from helpers.model import budget as bd
from helpers.model import measured as mb
from helpers.model import verdict as vd

VM = "original VM"
BARE = "bare metal (reference)"
#: the two ends the budget is checked at: glue suffix -> (system, concurrency)
POINTS = {"vm_1": (VM, 1), "vm_64": (VM, 64), "bm_1": (BARE, 1), "bm_64": (BARE, 64)}
ENDS = (1, 64)


def run_measurements(run) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """This run's VM/P2P fits (required) and collective sweep (optional), through the diagnosis's declared
    needs (`run`: its helpers.core.layout.Run). A run saved before results carried methods is mapped at load
    (helpers.interconnect.recorded_labels, the aligned start's lead taken from the sweep): read as it was
    written, its fit table names no method, and the link was picked from the eager all-reduce instead of the
    graph-timed one the older book used."""
    lead_us: dict = {}

    def tidy(df):
        lead_us.update(recorded_labels.leads(df))
        return recorded_labels.from_tidy(df)

    sweep = run.need("06_vm_p2p", "collective_sweep", adapt=tidy)
    fits = run.need("06_vm_p2p", "fits", adapt=lambda df: recorded_labels.from_fits(df, lead_us=lead_us))
    return fits, sweep


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


def save(run, part: Part, *more: Part) -> None:
    """Write the parts' tables into the run: `run` is this chapter's helpers.core.layout.Run (or the run
    folder, for which one is made); a name helpers.core.layout does not declare is an error."""
    run = run if isinstance(run, layout.Run) else layout.Run(run, CHAPTER)
    for p in (part, *more):
        for name, table in p.tables.items():
            run.save(name, table)


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
    study: mb.PrecisionStudy | None = None   # the study the shared expert's hidden fraction was measured in

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
                   bd.primary_observations(), v, study)

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
                      "and reference links only (no fits of this run), and its compute the committed "
                      "decode-step study {where}, timed on {device}.")
RUN_STEP_TEXT = ("The decode-step measurement is this run's: the decode-step chapter timed the model's real TP8 "
                 "shapes on {device}.")
FALLBACK_STEP_TEXT = ("This run has no decode-step measurement of the model's real TP8 shapes on a GPU (the "
                      "decode-step chapter did not run, or ran on a CPU or in recorded mode), so the compute comes "
                      "from the committed study {where}, timed on {device}.")


def step_source_text(d: Diagnosis) -> str:
    """Where the compute comes from, as the page says it (three variants)."""
    text = RECORDED_STEP_TEXT if not d.live else RUN_STEP_TEXT if d.meas.where == "this run" else FALLBACK_STEP_TEXT
    return text.format(where=d.meas.where, device=d.meas.device)


def overview(d: Diagnosis) -> dict:
    return {"obs_vm_1": d.observed(VM, 1), "step_source_text": step_source_text(d)}
