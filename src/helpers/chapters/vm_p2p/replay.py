"""Chapter 06 in mode `replay`: what the chapter's `auto` execution measured and saved in the run, loaded back
to be presented again by today's chapter, measuring nothing (no torch, no NVML, nothing of this host).

`measure` is the `auto` side: it runs the suite and saves, besides the suite's tables, what the page also
uses (the plan's statements, the machine and CUDA's peer-access answer), so that a later replay presents the
run exactly. `saved_suite` is the replay side: the same tables (an older run's method labels mapped by helpers.interconnect.recorded_labels), the machine named from what the run saved
(older runs without machine.json: from the copy sweep's device label) and the statements where recorded
(None where the run predates saving them: the page then says they were not recorded).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from helpers.core.pick import PickError
from helpers.interconnect import hostpath as hp, recorded_labels, suite as ic


@dataclass
class SavedSuite:
    """The suite's tables as the run saved them (the fields a chapter reads of a SuiteResult)."""
    machine: ic.Machine
    statements: list | None      # None: not recorded in this run
    copy_sweep: pd.DataFrame | None
    copy_skipped: pd.DataFrame | None
    collective_sweep: pd.DataFrame
    collective_runs: pd.DataFrame
    fits: pd.DataFrame


def machine_record(m: ic.Machine) -> dict:
    return {"gpus": m.gpus, "gpu_name": m.gpu_name, "cpus": m.cpus, "p2p_pairs": m.p2p_pairs}


def measure(run, sweep: str, **suite_args) -> ic.SuiteResult:
    """`auto`: run the suite into the run (`run`, a helpers.core.layout.Run), saving its tables as they come,
    then the plan's statements and the machine."""
    res = ic.run_suite(sweep, run.path("collective_points"), save=run.save, **suite_args)
    run.save("statements", list(res.statements))
    run.save("machine", machine_record(res.machine))
    return res


def cuda_p2p(run, mode: str, gpus: int, probe: dict | None) -> pd.DataFrame | None:
    """CUDA's peer-access answer where the page needs it (a GPU machine whose probe has no P2P matrix):
    measured and saved in `auto`, the saved one in `replay` (None where the run did not save it)."""
    if not gpus or (probe or {}).get("p2p_read"):
        return None
    if mode == "auto":
        from helpers.interconnect import copies

        m = copies.p2p_matrix()
        run.save("cuda_p2p", m)
        return m
    return run.load_if_present("cuda_p2p") if mode == "replay" else None


def _machine_from_tables(cs: pd.DataFrame | None, coll: pd.DataFrame) -> ic.Machine:
    """A run saved before machine.json: the GPU count and name from the copy sweep's device label
    ("2x NVIDIA H200", written by helpers.interconnect.copies), else from the collective sweep."""
    labels = [] if cs is None or "device" not in cs else cs.device.dropna().unique().tolist()
    for label in labels:
        m = re.fullmatch(r"(\d+)x (.+)", str(label))
        if m:
            return ic.Machine(int(m.group(1)), m.group(2), 0, 0)
    if len(coll) and "device" in coll and (coll.backend == "nccl").any():
        nccl = coll[coll.backend == "nccl"]
        return ic.Machine(int(nccl.world_size.max()), str(nccl.device.iloc[0]), 0, 0)
    raise PickError(f"replay: the run saved no machine.json and its copy sweep names no GPU device (device labels "
                    f"{labels}); a run without GPUs is replayable only where it saved machine.json")


def saved_suite(run) -> SavedSuite:
    """`replay`: the suite's tables as the run saved them (MissingResult names a missing one)."""
    lead_us = {}   # an older run's lead per harness label: its sweep has it, its run and fit tables do not

    def tidy(df):
        lead_us.update(recorded_labels.leads(df))
        return recorded_labels.from_tidy(df)

    cs, coll = run.load("copy_sweep"), run.load("collective_sweep", adapt=tidy)
    runs = run.load("collective_runs", adapt=lambda df: recorded_labels.from_runs(df, lead_us=lead_us))
    fits = run.load("fits", adapt=lambda df: recorded_labels.from_fits(df, lead_us=lead_us))
    rec = run.load_if_present("machine")
    m = ic.Machine(**rec) if rec else _machine_from_tables(cs, coll)
    return SavedSuite(m, run.load_if_present("statements"), cs, run.load_if_present("copy_skipped"), coll, runs, fits)


def saved_hostpath(run) -> hp.StudyResult | None:
    """`replay`: the host-path study as the run saved it, or None where it did not run."""
    sweep, runs = run.load_if_present("hostpath_sweep"), run.load_if_present("hostpath_runs")
    if sweep is None or runs is None:
        return None
    return hp.StudyResult(sweep, runs, [], None)
