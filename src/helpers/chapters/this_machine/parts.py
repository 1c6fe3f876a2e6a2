"""The machine verdict's parts: what the chapter reads from the run (`Inputs`, `inputs`), the verdict built from
it (`verdict`, pure) and the values the page glues (`Values`)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from helpers.core import layout
from helpers.interconnect import pairs as pc
from helpers.interconnect import recorded_labels, studies
from helpers.machine import virt
from helpers.model import arith as ma
from helpers.model import thismachine as tm

CHAPTER = "08_this_machine"
#: where a part could not be filled: the target that fills it (appendix/rerun.md says the same per target)
FILL = {"gpu": "the `h200` target (or `auto`) on a GPU host", "pairs": "the `multi-gpu` target on two GPUs or more",
        "serve": "chapter 03 at it (`server_url`)"}
#: the committed study that timed the decisive recipe on a healthy pair (two H200s over NVLink)
HEALTHY_STUDY, HEALTHY_SETTING = "fidelity-h200x2-20261129e", "-g 2, out-of-place"


@dataclass(frozen=True)
class Inputs:
    """What the verdict reads, typed at the chapter's boundary. `gpus`: GPUs the run saw; `grant`: the N x N
    P2P read codes; `copies`/`writes`/`log`/`recipe`: the pair check's files (this chapter's, or chapter 06's
    copy sweep for `copies`); `sweep`: chapter 06's collective sweep; `served`: chapter 03's record."""
    mode: str
    probe: dict | None = None
    gpus: int = 0
    device: str | None = None
    grant: list | None = None
    copies: pd.DataFrame | None = None
    copies_how: str = ""
    writes: pd.DataFrame | None = None
    log: str | None = None
    recipe: pd.DataFrame | None = None
    sweep: pd.DataFrame | None = None
    served: dict | None = None
    typed: tm.Observation | None = None
    floor_us: float | None = None       # the graph floor 07_decode_step measured on this run's GPU (None: not here)
    #: 07_decode_step's emulated TP8 rank on this run's GPU (graphs, its first context): {batch: step ms} at one
    #: sequence and its largest batch; None where it did not time the real shapes here (site-read5 N13)
    emulated_step: dict | None = None


def _copies_from_06(cs: pd.DataFrame | None) -> pd.DataFrame | None:
    """GPU 0 -> GPU 1 from chapter 06's copy sweep: the peer and host-bounce copies, eager, at the largest size
    both measured."""
    if cs is None or not len(cs):
        return None
    e = cs[(cs["harness"] == "eager") & cs["path"].isin(["peer", "host_bounce"])]
    both = e.groupby("size_bytes")["path"].nunique()
    if not (both == 2).any():
        return None
    s = int(both[both == 2].index.max())
    bw = e[e["size_bytes"] == s].set_index("path")["bandwidth_GBps"]
    return pd.DataFrame([{"a": 0, "b": 1, "bytes": s, "peer_GBps": float(bw["peer"]), "host_GBps": float(bw["host_bounce"])}])


def inputs(run: layout.Run, mode: str, typed: tm.Observation | None = None, checked: dict | None = None) -> Inputs:
    """Everything the verdict reads from the run, through this chapter's declared needs (`checked`: what this
    chapter's own pair check left, helpers.interconnect.pairs.load; None: it did not run)."""
    if mode == "recorded":
        return Inputs(mode, typed=typed)
    probe = run.need("01_environment", "probe")
    gpus_list = (probe or {}).get("gpus") or []
    machine = run.need("06_vm_p2p", "machine")
    gpus = len(gpus_list) if probe else int((machine or {}).get("gpus") or 0)
    device = gpus_list[0].get("name") if gpus_list else (machine or {}).get("gpu_name")
    grant = (probe or {}).get("p2p_read")
    if not grant:
        cp = run.need("06_vm_p2p", "cuda_p2p")
        if cp is not None and len(cp) >= 2:
            grant = [["X" if v == "self" else ("OK" if v == "yes" else "NS") for v in r[1:]] for r in cp.itertuples(index=False)]
    checked = checked or {}
    copies, how = checked.get("copies"), "this chapter's pair check (every ordered pair, 64 MiB)"
    if copies is None:
        copies, how = _copies_from_06(run.need("06_vm_p2p", "copy_sweep")), "chapter 06's copy sweep (GPU 0 to GPU 1)"
    return Inputs(mode, probe, gpus, device, grant, copies, how, checked.get("writes"), checked.get("log"),
                  checked.get("allreduce"), run.need("06_vm_p2p", "collective_sweep", adapt=recorded_labels.from_tidy),
                  run.need("03_baselines_tuning", "served"), typed, _run_floor(run), _run_step(run))


def _run_step(run: layout.Run) -> dict | None:
    """The decode-step chapter's emulated TP8 rank timed on this run's GPU with CUDA graphs: {batch: step ms} at one
    sequence and at its largest batch, at its first context, as that chapter's answer states them (the same rows)."""
    from helpers.model import measured as mb

    meas = mb.step_measurement(run.root, reader=CHAPTER)
    if meas.where != "this run":
        return None
    cfg = meas.meta.get("config") or {}
    batches, contexts = cfg.get("batches") or [], cfg.get("contexts") or []
    if not batches or not contexts:
        return None
    return {b: float(meas.row(b, int(contexts[0]), "step", "graph")["median_us"]) / 1e3
            for b in sorted({min(batches), max(batches)})}


def _run_floor(run: layout.Run) -> float | None:
    """The graph-replay floor 07_decode_step measured on this run's GPU, where it timed the real shapes there."""
    from helpers.model import measured as mb

    meas = mb.step_measurement(run.root, reader=CHAPTER)
    return meas.floor_us() if meas.where == "this run" else None


def pair_check(run: layout.Run, mode: str, model: str = "glm5", timeout_s: float = 300.0) -> dict | None:
    """This chapter's own measurement: in mode auto, on two GPUs or more, every pair checked four ways and the
    decisive recipe's all-reduce at the decode sizes (helpers.interconnect.pairs.measure, a child process);
    in mode replay, what auto left in the run; otherwise (recorded, or fewer than two GPUs) None."""
    folder = run.path("pair_check")
    if mode == "replay":
        return pc.load(folder) if folder.exists() else None
    if mode != "auto" or pc.gpu_count() < 2:
        return None
    rep = pc.measure(folder, tm.decode_sizes(ma.load_model(model)), timeout_s=timeout_s)
    got = pc.load(folder)
    got["report"] = rep
    return got


def typed_observation(tok_1: float, tok_max: float, conc_max: int) -> tm.Observation | None:
    """The observation typed as parameters (all three, or none: 0)."""
    if not (tok_1 or tok_max or conc_max):
        return None
    return tm.Observation(float(tok_1), float(tok_max), float(conc_max), "typed as this chapter's parameters")


def stand_in_words(served: dict, probe: dict | None) -> str:
    """What chapter 03 served, the engine named once with its version as the run's environment probe recorded it
    (site-read5 N11): 'transformers 5.17.0 (the environment probe's record)', or 'X through vllm 0.9 (...)' where
    the model is not named for its engine."""
    engine, name = str(served.get("engine") or "an unnamed engine"), served.get("served_model")
    version = ((probe or {}).get("software") or {}).get(engine)
    what = (f"{engine} {version} (the environment probe's record)" if version
            else f"{engine} (its version not recorded)")
    return what if not name or name == engine else f"{name} through {what}"


def observation(inp: Inputs) -> tuple[tm.Observation | None, str]:
    """The observation the verdict compares with, and why it is that one: typed parameters win; else chapter
    03's record where it served a real model (a given server, or SGLang on a checkpoint), never a stand-in."""
    if inp.typed is not None:
        return inp.typed, "typed"
    s = inp.served
    if not s:
        # no record is not "nothing served": a run made before chapter 03 wrote its record (the published run's
        # chapter 03 swept a stand-in model live) has none either
        return None, "this run holds no serving record of chapter 03's: it served nothing live, or predates the record"
    if not s.get("is_model"):
        return None, (f"chapter 03 served {stand_in_words(s, inp.probe)}, a stand-in, not GLM-5: "
                      "its speed is no observation of the model")
    if not s.get("single_stream_tok_s"):
        return None, "chapter 03's sweep has no one-stream point"
    conc = s.get("achieved_concurrency") or s["max_concurrency"]
    return tm.Observation(float(s["single_stream_tok_s"]), float(s["max_tok_s"]), float(conc),
                          f"chapter 03's sweep of {s['served_model']} ({s['engine']} server), measured"), "served"


# ------------------------------------------------------------------------------------------ the verdict
@dataclass
class MachineVerdict:
    """Every part of the verdict: the lines the page states and the tables behind them."""
    lines: dict = field(default_factory=dict)
    virt: virt.VirtVerdict | None = None
    pairs: pd.DataFrame | None = None
    allreduce: pd.DataFrame | None = None
    prediction: dict = field(default_factory=dict)
    loss: pd.DataFrame | None = None
    remedies: list = field(default_factory=list)
    values: dict = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        return pd.DataFrame([{"part": k, "line": v} for k, v in self.lines.items()])


def healthy_recipe(sizes) -> pd.DataFrame | None:
    """nccl-tests by the decisive recipe's method (`-g 2`, eager, out of place) on the book's own healthy pair of
    H200s over NVLink (committed fidelity study), at `sizes`, beside aiconfigurator's H200 table over two GPUs:
    what a healthy machine reads by this method against that reference."""
    f = studies.fidelity_tables()
    t = f[(f["study"] == HEALTHY_STUDY) & (f["quantity"] == "all_reduce time per call")
          & (f["tool_setting"] == HEALTHY_SETTING)]
    if not len(t):
        return None
    t = t.groupby("size_bytes", as_index=False)["tool_value"].median().rename(columns={"tool_value": "time_us"})
    here = tm.at_sizes(t, sizes)
    ref, _ = tm.reference_allreduce(tm.reference_system("NVIDIA H200"), 2, sizes)
    return pd.DataFrame({"size_bytes": sizes, "recipe_us": here, "reference_us": ref, "ratio": here / ref})


@dataclass(frozen=True)
class Values:
    """What the page glues (one value per quantity: the lines and the figures they cite)."""
    tm_vm: str
    tm_p2p: str
    tm_allreduce: str
    tm_predicted: str
    tm_observed: str
    tm_thresholds: str
    tm_remedy: str
    chk1: str
    tm_system: str
    tm_pred_how: str
    tm_ar_timed: str    # section 2's opening: timed by the decisive recipe, or not timed and why (ar_timed)
    tm_ar_reference: str   # what the timing is set beside: aiconfigurator's table for this GPU kind, or none (ar_reference)


def ar_timed(v: MachineVerdict) -> str:
    """Section 2's opening words: whether this run timed the all-reduce, and if not, why (the recipe is then
    described, not claimed)."""
    if v.allreduce is not None:
        return "Timed as the decisive recipe times it"
    why = v.values.get("ar_untimed", "nothing was timed")
    return f"Not timed in this run ({why}); the decisive recipe times it so"


def ar_reference(v: MachineVerdict) -> str:
    """Section 2's reference clause: aiconfigurator's NCCL table for this GPU kind where it ships one, else that it
    ships none for it (the answer names the kinds it has), so the clause never promises a table that is absent."""
    from helpers.model import thismachine as tm

    system = str(v.values.get("system", "none"))
    if system in tm.REFERENCE_HOSTS:
        return f"beside aiconfigurator's NCCL table for {system} over as many GPUs (reference)"
    return (f"beside aiconfigurator's NCCL table for the GPU kind where it ships one (reference; none for "
            f"{system if system not in ('none', 'no GPU') else 'this run, which read no GPU'})")


def answer_values(v: MachineVerdict) -> Values:
    return Values(v.lines["vm"], v.lines["p2p"], v.lines["allreduce"], v.lines["predicted"], v.lines["observed"],
                  v.lines.get("thresholds", v.lines["observed"]), v.lines["remedy"], v.values["chk1"],
                  v.values["system"], v.values.get("pred_how", "no prediction in this run"), ar_timed(v),
                  ar_reference(v))


@dataclass(frozen=True)
class FormulaValues:
    """The formula's constants as the page states them: all-reduces per decode step (derived from the model)
    and the two marks (the diagnosis's, helpers.model.verdict)."""
    tm_n_ar: int
    tm_explains_pct: float
    tm_cannot_pct: float


def formula_values(model: str = "glm5") -> FormulaValues:
    from helpers.model.verdict.ranges import CANNOT, EXPLAINS

    return FormulaValues(tm.all_reduces_per_step(ma.load_model(model)), 100 * EXPLAINS, 100 * CANNOT)
