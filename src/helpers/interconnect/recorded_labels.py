"""Method strings in results recorded before methods were objects, mapped once, at load, to `Method`s.

Committed studies (data/measured/) and runs (runs/<id>/) hold three vocabularies that code of their time
wrote instead of a method's fields:
- the compact harness label of collectives.tidy's `harness` column ('graph+host_timer+rotate+aligned'),
  which left out the rotation's size, the lead of an aligned start (a column of its own from 96c65a0 on,
  2 ms before), the placement (a column of its own) and, before the worker had --stream (9feee48), that
  GPU work ran on the legacy default stream;
- benchmarks/fidelity.py's `ours_method` descriptions in fidelity.csv;
- benchmarks/allreduce_gap.py's `method` strings in allreduce_gap.csv.
Each string is listed here with the Method it stands for, whole: nothing is searched inside a string,
and a string that is not listed is an error naming it (a reworded file fails at load). What a string does
not say comes from the row's own columns or from the study (`STUDY_STREAM`, the rotation sizes below).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.interconnect.method import COLUMNS, LEGACY_LEAD_US, Method


class RecordedLabelError(ValueError):
    """A recorded method string that this module does not map; the message names it and the known ones."""


#: collectives.tidy's harness labels of the time: the fields each one names. "rotate" stands for a
#: rotation whose size the table did not record (from_tidy takes it from the study).
HARNESS_LABELS: dict[str, dict] = {
    "eager": {},
    "eager+host_timer": {"timer": "host"},
    "eager+host_timer+aligned": {"timer": "host", "start": "aligned"},
    "eager+host_timer+rotate": {"timer": "host", "rotate": True},
    "eager+host_timer+rotate+libnccl": {"timer": "host", "rotate": True, "api": "nccl"},
    "graph+host_timer": {"harness": "graph", "timer": "host"},
    "graph+host_timer+rotate": {"harness": "graph", "timer": "host", "rotate": True},
    "graph+host_timer+rotate+libnccl": {"harness": "graph", "timer": "host", "rotate": True, "api": "nccl"},
    "graph+host_timer+rotate+aligned": {"harness": "graph", "timer": "host", "rotate": True, "start": "aligned"},
    "graph+host_timer+rotate+aligned+libnccl": {"harness": "graph", "timer": "host", "rotate": True,
                                                "start": "aligned", "api": "nccl"},
    "graph+host_timer+aligned+libnccl": {"harness": "graph", "timer": "host", "start": "aligned", "api": "nccl"},
}

#: Studies whose GPU work ran on the legacy default stream though their strings do not say so (measured
#: before the worker had --stream, 9feee48); every other study ran on a non-blocking stream.
STUDY_STREAM = {"fidelity-h200-20261129": "legacy"}

#: benchmarks/fidelity.py rotated every rotating method's buffers within its largest size, 256 MiB.
FIDELITY_ROTATE_BYTES = 256 * 2**20
#: benchmarks/allreduce_gap.py rotated within its --max, 1 MiB in every committed run.
GAP_ROTATE_BYTES = 2**20


def _method(fields: dict, rotate_bytes: int, stream: str, lead_us=None, placement="in-place",
            direct=False) -> Method:
    kw = {k: v for k, v in fields.items() if k != "rotate"}
    if fields.get("rotate"):
        if not rotate_bytes:
            raise RecordedLabelError("a recorded label says the buffers rotated, but no rotation size was given "
                                     "for its study (pass the study's rotate_bytes)")
        kw["rotate_bytes"] = rotate_bytes
    if kw.get("start") == "aligned":
        kw["start_lead_us"] = int(lead_us) if lead_us is not None and not pd.isna(lead_us) else LEGACY_LEAD_US
    if direct:
        return Method.direct(placement=placement, **kw)
    return Method(placement=placement, stream=kw.pop("stream", stream), **kw)


def _with_methods(df: pd.DataFrame, methods: list[Method | None], drop: list[str]) -> pd.DataFrame:
    out = df.drop(columns=[c for c in drop + list(COLUMNS) if c in df.columns])
    rows = [m.as_row() if m is not None else {c: np.nan for c in COLUMNS} for m in methods]
    return pd.concat([out.reset_index(drop=True), pd.DataFrame(rows, columns=list(COLUMNS))], axis=1)


def _unknown(kind: str, value, known) -> RecordedLabelError:
    return RecordedLabelError(f"{kind} {value!r} is not a recorded string that helpers.interconnect.recorded_labels "
                              f"maps; known: {sorted(known)}. A recorded file was changed, or written by newer code "
                              "(then it carries the method columns and needs no mapping)")


def _row_method(r: dict, rotate_bytes: int, stream: str, lead_us=None, placement: str = "in-place") -> Method:
    """The Method a recorded row's `harness` label and `backend` stand for (RecordedLabelError on a label
    this module does not map); nccl rows take `stream`, others 'side'; 'nccl-direct' rows are Method.direct."""
    label = r.get("harness")
    if label not in HARNESS_LABELS:
        raise _unknown("harness label", label, HARNESS_LABELS)
    return _method(HARNESS_LABELS[label], rotate_bytes, stream if r.get("backend") == "nccl" else "side", lead_us,
                   placement, r.get("backend") == "nccl-direct")


def from_tidy(df: pd.DataFrame, rotate_bytes: int = 0, stream: str = "side") -> pd.DataFrame:
    """A collectives.tidy table of the time (a `harness` label column, no method columns) with the method
    columns of today: the label and every field. `rotate_bytes` and `stream` are the study's (the labels
    do not say them); aligned rows take their lead from start_lead_us, or LEGACY_LEAD_US where the table
    has none; backend 'nccl-direct' rows are Method.direct. gloo rows keep stream 'side' (no GPU work)."""
    if "method" in df.columns:
        return df
    methods = [_row_method(r, rotate_bytes, stream, r.get("start_lead_us"), r.get("placement") or "in-place")
               for r in df.to_dict("records")]
    out = _with_methods(df, methods, drop=["harness", "placement", "start_lead_us"])
    # today's column order: the point, its method, then the measurements
    from helpers.interconnect.collectives import TIDY_COLUMNS

    return out[[c for c in TIDY_COLUMNS if c in out.columns] + [c for c in out.columns if c not in TIDY_COLUMNS]]


def leads(tidy: pd.DataFrame) -> dict:
    """An older collective sweep's lead of an aligned start per harness label (its start_lead_us column), for
    the run and fit tables of the same run, which do not record it; empty for a table of today's layout."""
    if "method" in tidy.columns or "start_lead_us" not in tidy.columns:
        return {}
    return {k: float(v.dropna().iloc[0]) for k, v in tidy.groupby("harness").start_lead_us if v.notna().any()}


def from_runs(df: pd.DataFrame, stream: str = "side", lead_us: dict | None = None) -> pd.DataFrame:
    """The suite's run table of the time (collective_runs.csv with a `harness` label, no `method`) with
    today's `method` column (the Method's label) in place of the label; a table that has it is returned as is.
    `lead_us`: the lead per label, as the same run's sweep recorded it (`leads`; LEGACY_LEAD_US without)."""
    if "method" in df.columns:
        return df
    methods = [_row_method(r, 0, stream, (lead_us or {}).get(r.get("harness"))).label
               for r in df.to_dict("records")]
    out = df.drop(columns=["harness"]).copy()
    out.insert(min(3, len(out.columns)), "method", methods)
    return out


def from_fits(df: pd.DataFrame, stream: str = "side", lead_us: dict | None = None) -> pd.DataFrame:
    """The suite's fit table of the time (fits.csv whose `harness` held a collective's label, no `method`)
    with today's columns: `method` the Method's label (a copy's: its harness) and `harness` the Method's
    harness; a table that has `method` is returned as is. `lead_us`: as from_runs."""
    if "method" in df.columns:
        return df
    out = df.copy()
    methods, harnesses = [], []
    for r in df.to_dict("records"):
        label = r.get("harness")
        if r.get("scope") != "collective":
            methods.append(label)
            harnesses.append(label)
            continue
        m = _row_method(r, 0, stream, (lead_us or {}).get(label))
        methods.append(m.label)
        harnesses.append(m.harness)
    out["harness"] = harnesses
    out.insert(int(out.columns.get_loc("harness")) + 1, "method", methods)
    return out


# ------------------------------------------------------------------ fidelity.csv: ours_method descriptions
_TD = {}                                        # torch.distributed, as benchmarks/fidelity.py described it
_NC = {"api": "nccl"}
_R = {"timer": "host", "rotate": True}
_OOP_TORCH = "; out of place = a copy, then the in-place all-reduce"
#: description of the time -> (fields, placement, direct)
FIDELITY_METHODS: dict[str, tuple[dict, str, bool]] = {}
for _desc, _fields, _direct in [
        ("torch.distributed eager, CUDA events, one buffer (our default)", _TD, False),
        ("torch.distributed eager, host timer, rotating buffers", _R, False),
        ("torch.distributed in one CUDA graph, host timer, rotating buffers", {**_R, "harness": "graph"}, False),
        ("torch.distributed in one CUDA graph, host timer, rotating buffers, ranks launched at one deadline "
         "0.3 ms ahead", {**_R, "harness": "graph", "start": "aligned", "lead": 300}, False),
        ("ncclAllReduce on our own communicator (ctypes, as sglang's pynccl), eager, host timer, rotating buffers",
         {**_R, **_NC}, False),
        ("ncclAllReduce on our own communicator (ctypes, as sglang's pynccl) in one CUDA graph, host timer, "
         "rotating buffers", {**_R, **_NC, "harness": "graph"}, False),
        ("ncclAllReduce on our own communicator (ctypes, as sglang's pynccl) in one CUDA graph, host timer, "
         "rotating buffers, ranks launched at one deadline 0.3 ms ahead",
         {**_R, **_NC, "harness": "graph", "start": "aligned", "lead": 300}, False),
        ("ncclAllReduce direct (torch.cuda.nccl), eager, host timer, rotating buffers", _R, True),
        ("ncclAllReduce direct (torch.cuda.nccl) in one CUDA graph, host timer, rotating buffers",
         {**_R, "harness": "graph"}, True)]:
    FIDELITY_METHODS[_desc + ", in-place"] = (_fields, "in-place", _direct)
    FIDELITY_METHODS[_desc + ", out-of-place"] = (_fields, "out-of-place", _direct)
    if _desc.startswith("torch.distributed"):   # run e and later said how torch's out-of-place call is made
        FIDELITY_METHODS[_desc + _OOP_TORCH + ", out-of-place"] = (_fields, "out-of-place", _direct)

#: copy descriptions of the time -> the copy harness (helpers.interconnect.copies.HARNESSES)
FIDELITY_COPIES: dict[str, str] = {
    "copybench eager (Python-issued, host clock)": "eager",
    "copybench eager (Python-issued, host clock); torch copy_": "eager",
    "copybench eager (Python-issued, host clock); includes the copy and a final synchronize": "eager",
    "copybench graph (copies in one CUDA graph, CUDA events)": "graph",
    "copybench queued (spin kernel holds the stream, CUDA events)": "queued",
    "copybench queued (spin kernel holds the stream, CUDA events); cudaMemcpyPeerAsync": "queued",
    "copybench queued (spin kernel holds the stream, CUDA events); cudaMemcpyPeerAsync; GPU 0 -> GPU 1": "queued",
    "copybench queued (spin kernel holds the stream, CUDA events); cudaMemcpyPeerAsync; GPU 1 -> GPU 0": "queued",
}

#: rows that set a tool against itself: no method of ours
FIDELITY_TOOL_ROWS = {f"{tool} run {k} of {n} (tool: median of the runs)" for tool in
                      ("nccl-tests", "p2pBandwidthLatencyTest") for n in (1, 2, 3, 4, 5) for k in range(1, n + 1)} | {
    "p2pBandwidthLatencyTest GPU 0 -> GPU 1 (tool: its GPU 1 -> GPU 0)",
    "p2pBandwidthLatencyTest, GPUs listed in reverse (GPU 1 -> GPU 0 timed first)",
    "p2pBandwidthLatencyTest, GPUs listed in the usual order (GPU 0 -> GPU 1 timed first)"}

#: fidelity.csv's kind strings of the time -> the setup they name
FIDELITY_KINDS = {f"measured: {n}x NVIDIA H200, tool and ours on the same machine in one session": f"{n}x NVIDIA H200"
                  for n in (1, 2)}


def from_fidelity(df: pd.DataFrame, study: str) -> pd.DataFrame:
    """A fidelity.csv of the time (ours_method descriptions only) with today's columns: `setup`,
    `copy_harness` and the method columns, mapped from each row's strings."""
    if "method" in df.columns:
        return df
    stream = STUDY_STREAM.get(study, "side")
    methods, copies = [], []
    for desc in df.ours_method:
        if desc in FIDELITY_METHODS:
            f, placement, direct = FIDELITY_METHODS[desc]
            lead = f.get("lead")
            methods.append(_method({k: v for k, v in f.items() if k != "lead"}, FIDELITY_ROTATE_BYTES,
                                   "legacy" if direct else stream, lead, placement, direct))
            copies.append(np.nan)
        elif desc in FIDELITY_COPIES:
            methods.append(None)
            copies.append(FIDELITY_COPIES[desc])
        elif desc in FIDELITY_TOOL_ROWS:
            methods.append(None)
            copies.append(np.nan)
        else:
            raise _unknown(f"{study}: ours_method", desc, list(FIDELITY_METHODS) + list(FIDELITY_COPIES))
    bad = [k for k in df.kind.unique() if k not in FIDELITY_KINDS]
    if bad:
        raise _unknown(f"{study}: kind", bad[0], FIDELITY_KINDS)
    out = _with_methods(df.assign(setup=df.kind.map(FIDELITY_KINDS), copy_harness=copies), methods, drop=[])
    return out


# ------------------------------------------------------------------ allreduce_gap.csv: method strings
def _gap(start="aligned", lead=LEGACY_LEAD_US, api="torch", stream="side") -> Method:
    return Method(api=api, harness="graph", timer="host", rotate_bytes=GAP_ROTATE_BYTES, start=start,
                  start_lead_us=lead if start == "aligned" else None, stream=stream)


#: benchmarks/allreduce_gap.py's method strings of the time -> our Method, or the nccl-tests launch shape
GAP_METHODS: dict[str, Method | str] = {
    "ours, aligned start, legacy default stream": _gap(stream="legacy"),
    "ours, aligned start, non-blocking stream": _gap(),
    "ours, aligned start, ncclAllReduce direct, non-blocking stream": _gap(api="nccl"),
    "ours, aligned start 0.2 ms ahead, non-blocking stream": _gap(lead=200),
    "ours, aligned start 20 ms ahead, non-blocking stream": _gap(lead=20000),
    "ours, barrier start, non-blocking stream": _gap(start="barrier"),
    "nccl-tests -np 2 -g 1": "-np 2 -g 1",
    "nccl-tests -t 2 -g 1": "-t 2 -g 1",
}


def from_gap(df: pd.DataFrame) -> pd.DataFrame:
    """An allreduce_gap.csv of the time (a prose `method` column) with today's columns: `who`,
    `tool_shape` and the method columns (the tool's rows: `method` is 'nccl-tests <shape>', no fields)."""
    if "who" in df.columns:
        return df
    methods, who, shapes, labels = [], [], [], []
    for s in df.method:
        m = GAP_METHODS.get(s)
        if m is None:
            raise _unknown("all-reduce gap method", s, GAP_METHODS)
        if isinstance(m, Method):
            methods.append(m), who.append("ours"), shapes.append(np.nan), labels.append(m.label)
        else:
            methods.append(None), who.append("nccl-tests"), shapes.append(m), labels.append(f"nccl-tests {m}")
    out = _with_methods(df.drop(columns=["method"]).assign(who=who, tool_shape=shapes), methods, drop=[])
    out["method"] = labels
    return out
