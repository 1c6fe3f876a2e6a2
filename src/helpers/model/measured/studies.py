"""The decode-step measurements the budget on measured compute reads: this run's (07_decode_step's results,
read as the reading chapter declares: helpers.core.layout.NEEDS) or the committed studies under
data/measured/ (the unfused step, the fused one, bf16 against FP8), and the datasheet bandwidth of the GPU
a measurement was made on."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from helpers.core import layout, recorded
from helpers.model import arith as ma
from helpers.model import budget as bd

STEP_CHAPTER = "07_decode_step"
STEP_ROLE = "decode-step"     # the measured study (data/sources.yaml role) used where this run has none
FUSED_ROLE = "decode-step-fused"   # the fused step beside the unfused one, bf16 and FP8 (device-step-fused.sh)
PRECISION_ROLE = "decode-step-fp8"   # the bf16-against-FP8 study (and the overlap on and off), likewise
TP = 8


class MeasuredBudgetError(LookupError):
    """A measurement or table row the budget needs is missing."""


# --------------------------------------------------------------------------------------------------
# The step measurement the projection uses


@dataclass(frozen=True)
class StepMeasurement:
    timings: pd.DataFrame
    bytes: pd.DataFrame
    meta: dict
    where: str            # "this run" or the data/ folder
    device: str
    source: str

    def floor_us(self) -> float:
        v = self.meta.get("graph_us_per_kernel")
        if not v:
            raise MeasuredBudgetError(f"{self.where}: no graph launch floor (meta graph_us_per_kernel): the "
                                      f"measurement was not made with CUDA graphs")
        return float(v)

    def meta_value(self, key: str):
        """One entry of the measurement's meta.json; MeasuredBudgetError naming it where it is absent."""
        if key not in self.meta:
            raise MeasuredBudgetError(f"{self.where}: the measurement's meta has no '{key}' (it has "
                                      f"{sorted(self.meta)})")
        return self.meta[key]

    @property
    def fusion(self) -> str:
        """The step's implementation path (helpers.model.step.FUSIONS): the timings' `fusion` column, or
        "unfused" for studies made before the fused path existed (they have no such column)."""
        t = self.timings
        if "fusion" not in t.columns:
            return "unfused"
        found = sorted(set(t["fusion"].dropna().astype(str)))
        if len(found) != 1:
            raise MeasuredBudgetError(f"{self.where}: timings of {found or 'no'} fusion paths (expected one; "
                                      f"keep one sweep's rows per measurement)")
        return found[0]

    def has_op(self, name: str) -> bool:
        """Whether the measurement timed an op of this name alone (op names differ between fusion paths)."""
        return bool((self.timings["what"] == f"op:{name}").any())

    def peak(self) -> bd.Quantity:
        """The datasheet memory bandwidth of the GPU this was measured on (data/reference/gpu_specs.csv)."""
        return gpu_bandwidth(spec_name(self.device))

    def row(self, batch: int, context: int, what: str, mode: str = "graph", attention: str = "dense") -> pd.Series:
        t = self.timings
        r = t[(t["batch"] == batch) & (t["context"] == context) & (t["what"] == what) & (t["mode"] == mode)
              & (t["attention"] == attention)]
        if len(r) != 1:
            raise MeasuredBudgetError(f"{self.where}: {len(r)} timing rows for batch {batch}, context {context}, "
                                      f"'{what}', {mode}, {attention} (expected one)")
        return r.iloc[0]

    def component_bytes(self, batch: int, context: int, component: str, attention: str = "dense") -> pd.Series:
        b = self.bytes
        r = b[(b["batch"] == batch) & (b["context"] == context) & (b["component"] == component)]
        if "attention" in b.columns:
            r = r[r["attention"] == attention]
        if len(r) != 1:
            raise MeasuredBudgetError(f"{self.where}: {len(r)} byte rows for batch {batch}, context {context}, "
                                      f"component '{component}'")
        return r.iloc[0]


def _real_model(t: pd.DataFrame, model_name: str) -> bool:
    return len(t) and (t["model"] == model_name).all() and t["device"].astype(str).str.startswith("cuda").all() \
        and (t["tp"] == TP).all()


def run_result(run_dir: str | Path, reader: str, name: str, required: bool = False):
    """07_decode_step's result `name` in this run, read by chapter `reader`: its own result where `reader` is
    07_decode_step, else through `reader`'s declared need (helpers.core.layout.NEEDS; LayoutError where it
    declares none). None where the run has none; with `required`, MissingResult (naming the chapter that
    writes it) instead."""
    run = layout.Run(run_dir, reader)
    if reader == STEP_CHAPTER:
        return run.load(name) if required else run.load_if_present(name)
    got = run.need(STEP_CHAPTER, name)
    if got is None and required:
        return layout.load(run_dir, STEP_CHAPTER, name)     # raises MissingResult
    return got


def step_measurement(run_dir: str | Path | None, model: str = "glm5", reader: str = STEP_CHAPTER
                     ) -> StepMeasurement:
    """This run's decode-step measurement (07_decode_step's results, read by chapter `reader`: see
    run_result) where it timed the real model's TP8 shapes on a GPU with graphs; otherwise the committed
    fused study's bf16 fused sweep (role FUSED_ROLE, where one holds the chapter's whole sweep:
    FusionStudy.full), else the committed study of role STEP_ROLE (the unfused step) under data/measured/."""
    name = ma.load_model(model).name
    if run_dir:
        t = run_result(run_dir, reader, "step_times")
        if t is not None and _real_model(t, name) and (t["mode"] == "graph").any():
            b = run_result(run_dir, reader, "step_bytes", required=True)
            meta = run_result(run_dir, reader, "step_meta", required=True)
            return StepMeasurement(t, b, meta, "this run", str(meta.get("device_name", "")), "this run")
    import json

    fs = fusion_study()
    if fs is not None and fs.full():
        return fs.measurement("bf16", "fused")
    return unfused_measurement()


def unfused_measurement() -> StepMeasurement:
    """The committed study of role STEP_ROLE: the unfused step in bf16, every batch, context and mode."""
    import json

    s = recorded.study(STEP_ROLE)
    rel = f"measured/{s.id}"
    t = recorded.load(f"{rel}/timings.csv")
    b = recorded.load(f"{rel}/bytes.csv")
    meta = json.loads((recorded.data_dir() / rel / "meta.json").read_text())
    return StepMeasurement(t, b, meta, f"data/{rel}", str(meta.get("device_name", "")), s.id)


@dataclass(frozen=True)
class FusionStudy:
    """The step fused and unfused, in bf16 and FP8, as scripts/device-step-fused.sh merges it
    (steptime.merge_sweeps): every timing row with its `dtype` and `fusion`, the bytes per precision, and
    each sweep's meta under meta["sweeps"]."""

    timings: pd.DataFrame
    bytes: pd.DataFrame
    meta: dict
    where: str
    device: str
    id: str

    def sweep_meta(self, dtype: str, fusion: str) -> dict:
        """The meta of the sweep that timed `dtype` `fusion` with its components (the full one)."""
        found = [m for m in self.meta.get("sweeps", {}).values()
                 if m["config"].get("dtype") == dtype and m["config"].get("fusion", "unfused") == fusion]
        found.sort(key=lambda m: (not m["config"].get("components", True), -len(m["config"].get("batches", []))))
        if not found:
            raise MeasuredBudgetError(f"{self.where}: no {dtype} {fusion} sweep (it has "
                                      f"{sorted(self.meta.get('sweeps', {}))})")
        return found[0]

    def full(self, dtype: str = "bf16") -> bool:
        """Whether the fused sweep in `dtype` holds what the decode-step chapter reads of its measurement:
        graphs and eager, two contexts or more, op by op, DSA sparse points (a QUICK run does not)."""
        try:
            c = self.sweep_meta(dtype, "fused")["config"]
        except MeasuredBudgetError:
            return False
        return ({"graph", "eager"} <= set(c.get("modes", ())) and bool(c.get("op_level"))
                and bool(c.get("sparse_points")) and len(c.get("contexts", ())) > 1)

    def measurement(self, dtype: str = "bf16", fusion: str = "fused") -> StepMeasurement:
        """One sweep's rows as a StepMeasurement (its meta: that sweep's)."""
        t = self.timings[(self.timings["dtype"] == dtype) & (self.timings["fusion"] == fusion)]
        b = self.bytes[self.bytes["dtype"] == dtype] if "dtype" in self.bytes.columns else self.bytes
        if not len(t):
            raise MeasuredBudgetError(f"{self.where}: no {dtype} {fusion} timings")
        return StepMeasurement(t.reset_index(drop=True), b.reset_index(drop=True), self.sweep_meta(dtype, fusion),
                               self.where, self.device, self.id)

    def step(self, dtype: str, fusion: str, batch: int, context: int, what: str = "step",
             mode: str = "graph") -> pd.Series | None:
        """The one row of `what` at that point, or None where the study did not time it."""
        t = self.timings
        r = t[(t["dtype"] == dtype) & (t["fusion"] == fusion) & (t["batch"] == batch) & (t["context"] == context)
              & (t["what"] == what) & (t["mode"] == mode) & (t["attention"] == "dense")]
        if len(r) > 1:
            raise MeasuredBudgetError(f"{self.where}: {len(r)} rows for {dtype} {fusion} batch {batch} context "
                                      f"{context} '{what}' {mode} (expected at most one)")
        return r.iloc[0] if len(r) else None


def fusion_study() -> FusionStudy | None:
    """The committed study of role FUSED_ROLE: the last one registered in data/sources.yaml that holds the
    chapter's whole sweep (FusionStudy.full), else the last registered; None where there is none."""
    import json

    found = recorded.measured_studies(FUSED_ROLE)
    if not found:
        return None
    studies = []
    for s in found:
        rel = f"measured/{s.id}"
        meta = json.loads((recorded.data_dir() / rel / "meta.json").read_text())
        name = next((m.get("device_name") for m in meta.get("sweeps", {}).values()), "")
        studies.append(FusionStudy(recorded.load(f"{rel}/timings.csv"), recorded.load(f"{rel}/bytes.csv"), meta,
                                   f"data/{rel}", str(name), s.id))
    return pick_fusion_study(studies)


def pick_fusion_study(studies: list[FusionStudy]) -> FusionStudy | None:
    """Of studies in registration order: the last that holds the chapter's whole sweep, else the last."""
    full = [f for f in studies if f.full()]
    return (full or studies)[-1] if studies else None


def fused_precisions(fs: "FusionStudy | None") -> "PrecisionStudy | None":
    """The fused step's bf16 and FP8 rows of a fusion study as a PrecisionStudy (what an engine's FP8 step
    costs against its bf16 one), or None where `fs` lacks either precision's fused rows. It holds no step
    on one stream (the shared expert overlapped only): the second stream's saving comes from precision_study."""
    if fs is None:
        return None
    t = fs.timings[fs.timings["fusion"] == "fused"]
    if not {"bf16", "fp8"} <= set(t["dtype"].astype(str)):
        return None
    return PrecisionStudy(t.reset_index(drop=True), fs.bytes, fs.meta, fs.where, fs.device)


@dataclass(frozen=True)
class PrecisionStudy:
    """The step timed in bf16 and in FP8, with the shared expert overlapped and not (steptime.merge_sweeps'
    shape): every timing row with its `dtype` and `overlap`, the bytes per precision, each sweep's meta."""

    timings: pd.DataFrame
    bytes: pd.DataFrame
    meta: dict
    where: str
    device: str

    def precisions(self) -> list[str]:
        return sorted(set(self.timings["dtype"].astype(str)))

    def row(self, dtype: str, batch: int, context: int, what: str = "step", mode: str = "graph",
            overlap: bool | None = None, attention: str = "dense") -> pd.Series:
        t = self.timings
        m = ((t["dtype"] == dtype) & (t["batch"] == batch) & (t["context"] == context) & (t["what"] == what)
             & (t["mode"] == mode) & (t["attention"] == attention))
        if overlap is not None:
            m &= t["overlap"].astype(bool) == bool(overlap)
        r = t[m]
        if len(r) != 1:
            raise MeasuredBudgetError(f"{self.where}: {len(r)} timing rows for {dtype}, batch {batch}, context "
                                      f"{context}, '{what}', {mode}, overlap {overlap} (expected one)")
        return r.iloc[0]

    def component_bytes(self, dtype: str, batch: int, context: int, component: str) -> float:
        b = self.bytes
        r = b[(b["dtype"] == dtype) & (b["batch"] == batch) & (b["context"] == context)
              & (b["component"] == component) & (b["attention"] == "dense")]
        if len(r) != 1:
            raise MeasuredBudgetError(f"{self.where}: {len(r)} byte rows for {dtype}, batch {batch}, context "
                                      f"{context}, '{component}'")
        return float(r["bytes_emulated"].iloc[0])

    def main_overlap(self) -> bool:
        """The overlap setting of the full sweeps (the ones that timed components): True where both
        precisions have component rows with the shared expert overlapped."""
        t = self.timings[self.timings["what"] == "moe"]
        on = t[t["overlap"].astype(bool)]
        return bool(len(on) and set(on["dtype"]) >= set(self.precisions()))


def precision_study(run_dir: str | Path | None, reader: str = STEP_CHAPTER) -> PrecisionStudy | None:
    """This run's bf16-against-FP8 timings (07_decode_step's `precision_times`, read by chapter `reader`: see
    run_result) where it made them, else the committed study of role PRECISION_ROLE, else None (no FP8
    measurement exists)."""
    import json

    if run_dir:
        t = run_result(run_dir, reader, "precision_times")
        if t is not None and (t["dtype"] == "fp8").any():
            meta = run_result(run_dir, reader, "precision_meta", required=True)
            name = next((m.get("device_name") for m in meta.get("sweeps", {}).values()), "")
            return PrecisionStudy(t, run_result(run_dir, reader, "precision_bytes", required=True), meta,
                                  "this run", str(name))
    found = recorded.measured_studies(PRECISION_ROLE)
    if not found:
        return None
    s = found[0]
    rel = f"measured/{s.id}"
    meta = json.loads((recorded.data_dir() / rel / "meta.json").read_text())
    name = next((m.get("device_name") for m in meta.get("sweeps", {}).values()), "")
    return PrecisionStudy(recorded.load(f"{rel}/timings.csv"), recorded.load(f"{rel}/bytes.csv"), meta,
                          f"data/{rel}", str(name))


def gpu_bandwidth(system: str) -> bd.Quantity:
    return bd.mem_bandwidth(system)



def spec_name(device_name: str) -> str:
    """The gpu_specs.csv system for a device name torch reports."""
    specs = recorded.load("reference/gpu_specs.csv")
    for s in specs["system"].unique():
        if str(s).lower() in device_name.lower() or device_name.lower() in str(s).lower():
            return str(s)
    raise MeasuredBudgetError(f"no data/reference/gpu_specs.csv row for the device '{device_name}'; known: "
                              f"{sorted(specs['system'].unique())}: add a memory_bandwidth row for it (the datasheet "
                              f"figure, with its source in data/sources.yaml)")
