"""How a collective was timed, as one object: `Method`.

A measurement's method is built once (`Method(harness="graph", timer="host", ...)`), checked when it is
built, handed to the worker as its command line (`cli_args`, read back there by `from_args`), and carried
on every result row as one column per field plus its `label` (`as_row`, `COLUMNS`), as nccl-tests prints
its settings with every table. Tables select rows by their fields or by a Method's label; nothing reads
settings back out of a label or a description. (Studies recorded before this module existed carry
their own strings: helpers.interconnect.recorded_labels maps those once, when they are loaded.)

    m = Method(harness="graph", timer="host", start="aligned", api="nccl")
    m.label        # 'graph+host_timer+aligned_300us+libnccl'
    m.cli_args()   # ['--api', 'nccl', '--harness', 'graph', '--timer', 'host', ...]
    m.description  # 'ncclAllReduce on a communicator of our own (ctypes, as sglang's pynccl) in one CUDA graph, ...'

`nodes` is how many torchrun nodes (agents) the ranks span (helpers.interconnect.nodes): one by default;
above one the ranks share no clock, so they are released by a barrier (an aligned start is refused).
"""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields, replace
from typing import Mapping

import numpy as np

#: How the collective is issued: torch.distributed, ncclAllReduce on a communicator of our own (ctypes,
#: as sglang's pynccl; helpers.interconnect.nccl), or ncclAllReduce through torch.cuda.nccl from one
#: process driving every GPU (nccl-tests' -g N shape; collectives.measure_direct).
APIS = ("torch", "nccl", "direct")
HARNESSES = ("eager", "graph")          # graph: the block captured in one CUDA graph (nccl-tests -G)
TIMERS = ("events", "host")             # host: nccl-tests' clock (first launch to end of a synchronize)
PLACEMENTS = ("in-place", "out-of-place")
STARTS = ("barrier", "aligned")         # aligned: every rank launches at one deadline on the host clock
CONTROLS = ("backend", "gloo")          # gloo: barriers and timings through gloo (with api 'nccl')
STREAMS = ("side", "legacy")            # legacy: the GPU work on the legacy default stream
MAX_NODES = 1024                        # a bound for the node count, not a tested size

# The aligned start's deadline lies START_LEAD_US after rank 0 picks it; the GPU idles about that long before
# each timed block, and idling costs time. Measured on two H200s (data/measured/allreduce-gap-h200x2-20261129c,
# 20 all-reduces per CUDA graph, below 64 KiB, median per call): 0.2 ms ahead 6.80 us, 2 ms 7.40 us, 20 ms
# 9.85 us; nccl-tests -np 2 -G 1 6.43 us. The all-reduce that carries the deadline takes tens of us, so 0.3 ms
# lets every rank have it in time; a rank that gets it late launches at once and is counted (late_starts).
START_LEAD_US = 300
#: The lead of the worker before it had --start-lead-us, and of benchmarks/allreduce_gap.py's aligned arms
#: (kept there so that its runs stay comparable).
LEGACY_LEAD_US = 2000

#: The result-table columns a method fills: its label, then one per field.
FIELDS = ("api", "harness", "timer", "placement", "rotate_bytes", "start", "start_lead_us", "control", "stream",
          "nodes")
COLUMNS = ("method",) + FIELDS


class MethodError(ValueError):
    """A timing method that does not exist or cannot run as asked; the message names the field and the fix."""


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"


def _is_int(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer))


@dataclass(frozen=True)
class Method:
    """One way of timing a collective. Defaults: torch.distributed, eager, CUDA events, in place, one
    buffer, ranks released by a barrier, GPU work on a non-blocking stream (nccl-tests' kind of stream).

    For nccl-tests' own method use timer="host", rotate_bytes=<its max size> and harness="graph" for its
    -G 1. placement="out-of-place": through torch.distributed a copy of the input, then the in-place
    all-reduce on it (torch has no out-of-place all-reduce); through NCCL its own out-of-place call.
    start="aligned": every rank launches at one deadline start_lead_us ahead on the host clock instead of
    as its barrier returns (one host only). control="gloo" (with api="nccl") keeps torch's own NCCL
    communicator out of the process. stream="legacy" puts the GPU work on the legacy default stream.
    api="direct" is the one-process call of collectives.measure_direct: no ranks, so no start, control
    plane or stream of its own (it runs on the legacy default stream). nodes=N (N > 1): the ranks span N
    torchrun nodes joined by a rendezvous (helpers.interconnect.nodes); hosts share no clock, so the ranks
    are released by a barrier and start must be 'barrier'."""

    api: str = "torch"
    harness: str = "eager"
    timer: str = "events"
    placement: str = "in-place"
    rotate_bytes: int = 0
    start: str = "barrier"
    start_lead_us: int | None = None        # aligned: filled with START_LEAD_US when not given
    control: str = "backend"
    stream: str = "side"
    nodes: int = 1                          # torchrun nodes the ranks span (1: one node, --standalone)

    def __post_init__(self):
        for name, allowed, why in (
                ("api", APIS, "nccl: ncclAllReduce on a communicator of our own, as sglang's pynccl; "
                              "direct: torch.cuda.nccl from one process"),
                ("harness", HARNESSES, "graph: the timed block captured in one CUDA graph"),
                ("timer", TIMERS, "host: nccl-tests' host clock"),
                ("placement", PLACEMENTS, ""),
                ("start", STARTS, "aligned: the ranks launch at one shared deadline, one host only"),
                ("control", CONTROLS, "gloo: barriers and timings through gloo, with api='nccl'"),
                ("stream", STREAMS, "side: a non-blocking stream, as nccl-tests uses; legacy: the legacy "
                                    "default stream")):
            v = getattr(self, name)
            if v not in allowed:
                raise MethodError(f"{name} = {v!r} is not known; choose one of {allowed}" + (f" ({why})" if why else ""))
        if not _is_int(self.rotate_bytes) or self.rotate_bytes < 0:
            raise MethodError(f"rotate_bytes = {self.rotate_bytes!r} must be an integer >= 0 (0: one buffer; "
                              "nccl-tests rotates within its max size, e.g. 268435456)")
        object.__setattr__(self, "rotate_bytes", int(self.rotate_bytes))
        if self.start == "aligned":
            lead = START_LEAD_US if self.start_lead_us is None else self.start_lead_us
            if not _is_int(lead) or lead < 1:
                raise MethodError(f"start_lead_us = {lead!r} must be an integer >= 1 (how far ahead, in us, "
                                  f"rank 0 sets the aligned start's deadline; default {START_LEAD_US})")
            object.__setattr__(self, "start_lead_us", int(lead))
        elif self.start_lead_us is not None:
            raise MethodError(f"start_lead_us = {self.start_lead_us!r} is given with start = {self.start!r}; "
                              "a lead belongs to start='aligned' only")
        if not _is_int(self.nodes) or not 1 <= self.nodes <= MAX_NODES:
            raise MethodError(f"nodes = {self.nodes!r} must be an integer from 1 to {MAX_NODES} (the torchrun nodes "
                              "the ranks span; 1 is one node)")
        object.__setattr__(self, "nodes", int(self.nodes))
        if self.nodes > 1 and self.start == "aligned":
            raise MethodError(f"start = 'aligned' with nodes = {self.nodes}: an aligned start launches every rank at "
                              "one deadline on the host's monotonic clock, which ranks on different nodes do not "
                              "share; use start='barrier' across nodes (Method.but(start='barrier'))")
        if self.api == "direct" and self.nodes != 1:
            raise MethodError("api = 'direct' is one process driving this host's GPUs: use nodes=1")
        if self.control == "gloo" and self.api != "nccl":
            raise MethodError(f"control = 'gloo' with api = {self.api!r}: choose control='backend', or 'gloo' "
                              "with api='nccl' (barriers and timings through gloo, so our NCCL communicator is "
                              "the process's only one)")
        if self.api == "direct" and (self.start, self.control, self.stream) != ("barrier", "backend", "legacy"):
            raise MethodError("api = 'direct' is one process driving every GPU on the legacy default stream: "
                              "use start='barrier', control='backend', stream='legacy' (Method.direct(...))")

    # ---------------------------------------------------------------- construction
    @classmethod
    def direct(cls, **kw) -> "Method":
        """The one-process method of collectives.measure_direct (torch.cuda.nccl)."""
        return cls(api="direct", stream="legacy", **kw)

    def but(self, **changes) -> "Method":
        """This method with some fields changed (checked again); a lead is dropped with an aligned start."""
        if changes.get("start") == "barrier" and "start_lead_us" not in changes:
            changes["start_lead_us"] = None
        return replace(self, **changes)

    def for_op(self, op: str) -> "Method":
        """The method as applied to `op`: all_to_all is always out of place, whatever was asked."""
        return self if op == "all_reduce" or self.placement == "out-of-place" else self.but(placement="out-of-place")

    # ---------------------------------------------------------------- checks
    def check_backend(self, backend: str) -> None:
        """Raise MethodError where this method cannot run on `backend` ('gloo', 'nccl', 'nccl-direct')."""
        if self.api == "direct":
            if backend != "nccl-direct":
                raise MethodError(f"api = 'direct' is measured by collectives.measure_direct (backend "
                                  f"'nccl-direct'), not by a torchrun launch on backend {backend!r}")
            return
        if backend == "nccl-direct":
            raise MethodError(f"backend 'nccl-direct' is measured with api='direct'; got api = {self.api!r}")
        if self.api == "nccl" and backend != "nccl":
            raise MethodError(f"api = 'nccl' calls libnccl on CUDA tensors, which backend {backend!r} does not "
                              "use; use backend='nccl' on a GPU or api='torch'")
        if self.stream == "legacy" and backend != "nccl":
            raise MethodError(f"stream = 'legacy' places GPU work, which backend {backend!r} has none of; "
                              "use stream='side' (the default) or backend='nccl'")
        if self.harness == "graph" and backend != "nccl":
            raise MethodError(f"harness = 'graph' needs CUDA graphs, which backend {backend!r} cannot capture; "
                              "use backend='nccl' on a GPU or harness='eager'")

    # ---------------------------------------------------------------- what it is called
    @property
    def label(self) -> str:
        """Compact and unique: the harness, then every setting that differs from the defaults, e.g.
        'graph+host_timer+rotate_256MiB+aligned_300us+libnccl+out_of_place'."""
        parts = [self.harness]
        if self.timer == "host":
            parts.append("host_timer")
        if self.rotate_bytes:
            parts.append(f"rotate_{_size(self.rotate_bytes)}")
        if self.start == "aligned":
            parts.append(f"aligned_{self.start_lead_us}us")
        if self.api == "nccl":
            parts.append("libnccl")
        elif self.api == "direct":
            parts.append("direct")
        if self.control == "gloo":
            parts.append("gloo_control")
        if self.stream == "legacy":
            parts.append("legacy_stream")
        if self.placement == "out-of-place":
            parts.append("out_of_place")
        if self.nodes > 1:
            parts.append(f"{self.nodes}_nodes")
        return "+".join(parts)

    @property
    def caller(self) -> str:
        return {"torch": "torch.distributed",
                "nccl": "ncclAllReduce on a communicator of our own (ctypes, as sglang's pynccl)",
                "direct": "ncclAllReduce direct (torch.cuda.nccl, one process)"}[self.api]

    @property
    def description(self) -> str:
        """One line for a reader: who issues the call and every setting."""
        parts = [self.caller + (" in one CUDA graph" if self.harness == "graph" else ", eager"),
                 "host timer" if self.timer == "host" else "CUDA events",
                 f"buffers rotating within {_size(self.rotate_bytes)}" if self.rotate_bytes else "one buffer"]
        if self.api != "direct":
            if self.nodes > 1:
                parts.append(f"ranks on {self.nodes} nodes (a torchrun rendezvous), released by a barrier: hosts "
                             "share no clock, so no aligned start")
            else:
                parts.append(f"ranks launched at one deadline {self.start_lead_us / 1000:g} ms ahead"
                             if self.start == "aligned" else "ranks released by a barrier")
            if self.control == "gloo":
                parts.append("barriers and timings through gloo")
        parts.append("legacy default stream" if self.stream == "legacy" else "non-blocking stream")
        oop = self.placement == "out-of-place"
        parts.append("out-of-place" + (" (a copy, then the in-place all-reduce)" if oop and self.api == "torch"
                                       else "") if oop else "in-place")
        return ", ".join(parts)

    @property
    def short(self) -> str:
        """A legend label: the caller, the harness and an aligned start."""
        who = {"torch": "torch.distributed", "nccl": "ncclAllReduce per process",
               "direct": "direct ncclAllReduce"}[self.api]
        return (f"{who}, {self.harness}" + (", aligned start" if self.start == "aligned" else "")
                + (f", {self.nodes} nodes" if self.nodes > 1 else ""))

    # ---------------------------------------------------------------- the worker's command line
    def cli_args(self) -> list[str]:
        """The worker's options for this method (helpers.interconnect.worker reads them with from_args)."""
        args = ["--api", self.api, "--harness", self.harness, "--timer", self.timer, "--placement", self.placement,
                "--rotate-bytes", str(self.rotate_bytes),
                "--rank-start", self.start,  # not --start: torchrun would take it for --start-method
                "--control", self.control, "--stream", self.stream, "--nodes", str(self.nodes)]
        if self.start == "aligned":
            args += ["--start-lead-us", str(self.start_lead_us)]
        return args

    @staticmethod
    def add_arguments(ap: argparse.ArgumentParser) -> None:
        """The worker's method options (the inverse of cli_args)."""
        ap.add_argument("--api", default="torch", choices=[a for a in APIS if a != "direct"],
                        help="issue collectives through torch.distributed or as NCCL calls (helpers.interconnect.nccl)")
        ap.add_argument("--harness", default="eager", choices=list(HARNESSES))
        ap.add_argument("--timer", default="events", choices=list(TIMERS))
        ap.add_argument("--placement", default="in-place", choices=list(PLACEMENTS),
                        help="all_reduce only; all_to_all is always out of place")
        ap.add_argument("--rotate-bytes", type=int, default=0,
                        help="pool size for rotating buffer offsets (nccl-tests style); 0 keeps one buffer")
        ap.add_argument("--rank-start", dest="start", default="barrier", choices=list(STARTS),
                        help="how ranks start a timed block: as their barrier returns, or at one shared deadline")
        ap.add_argument("--start-lead-us", type=int, default=None,
                        help=f"aligned start: how far ahead rank 0 sets the deadline (default {START_LEAD_US} us)")
        ap.add_argument("--control", default="backend", choices=list(CONTROLS),
                        help="with --api nccl: the process group for barriers and timings (gloo: torch makes no "
                             "NCCL communicator of its own)")
        ap.add_argument("--stream", default="side", choices=list(STREAMS),
                        help="GPU work on a stream created non-blocking, as nccl-tests' (side), or on the legacy "
                             "default stream (legacy)")
        ap.add_argument("--nodes", type=int, default=1,
                        help="torchrun nodes the ranks span; the worker checks it against torchrun's GROUP_WORLD_SIZE")

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> "Method":
        return cls(api=a.api, harness=a.harness, timer=a.timer, placement=a.placement, rotate_bytes=a.rotate_bytes,
                   start=a.start, start_lead_us=a.start_lead_us, control=a.control, stream=a.stream,
                   nodes=a.nodes)

    # ---------------------------------------------------------------- result rows
    def as_row(self) -> dict:
        """The columns every result row carries (COLUMNS): the label, then each field."""
        return {"method": self.label, **asdict(self)}

    @classmethod
    def from_row(cls, row: Mapping) -> "Method":
        """The method a result row was timed by, from its field columns; its `method` label must agree
        (a row whose label and fields disagree was written by other code and is refused). A row without
        `nodes` predates multi-node sweeps, which is to say it was measured on one node."""
        row = row if "nodes" in row else {**row, "nodes": 1}
        missing = [f for f in FIELDS if f not in row]
        if missing:
            raise MethodError(f"a result row lacks the method columns {missing}; expected {list(COLUMNS)} "
                              "(tables written before methods were objects: helpers.interconnect.recorded_labels)")
        kw = {}
        for f in fields(cls):
            v = row[f.name]
            if f.name == "start_lead_us":
                v = None if v is None or (isinstance(v, float) and np.isnan(v)) else int(v)
            elif f.name == "nodes":     # blank in a table that also holds rows from before multi-node sweeps
                v = 1 if v is None or (isinstance(v, float) and np.isnan(v)) else int(v)
            elif f.name == "rotate_bytes":
                v = int(v)
            kw[f.name] = v
        m = cls(**kw)
        label = row.get("method")
        if label is not None and label != m.label:
            raise MethodError(f"a result row's method label {label!r} disagrees with its fields, which make "
                              f"{m.label!r}; the table was written by other code: rebuild it")
        return m


def methods_of(table) -> list[Method]:
    """The distinct methods of a table's rows (its COLUMNS), in the order they first appear."""
    seen: dict[str, Method] = {}
    cols = [c for c in COLUMNS if c != "nodes" or c in table.columns]   # no `nodes`: one node (from_row)
    for row in table[cols].drop_duplicates().to_dict("records"):
        m = Method.from_row(row)
        seen.setdefault(m.label, m)
    return list(seen.values())


def by_method(table, what: str, where: dict | None = None, **fields):
    """The rows of `table` (with `where`, helpers.core.pick.rows) timed by the one method whose fields
    include `fields`: the method's label must agree with its fields (Method.from_row), and the fields must
    name one method, not several; helpers.core.pick.PickError naming `what` otherwise."""
    from helpers.core.pick import PickError, describe, rows

    bad = [f for f in fields if f not in FIELDS]
    if bad:
        raise PickError(f"{what}: {bad} are not method fields; choose from {FIELDS}")
    cand = rows(table, what, **(where or {})) if where else table
    cand = cand[cand.method.notna()]
    found = [m for m in methods_of(cand) if all(getattr(m, k) == v for k, v in fields.items())]
    if not found:
        raise PickError(f"{what}: no row timed by a method with {describe(fields)}"
                        + (f" where {describe(where)}" if where else "")
                        + f"; the methods there: {[m.label for m in methods_of(cand)]}")
    if len(found) > 1:
        raise PickError(f"{what}: {describe(fields)} names {len(found)} methods {[m.label for m in found]}; "
                        "name more fields")
    return cand[cand.method == found[0].label]
