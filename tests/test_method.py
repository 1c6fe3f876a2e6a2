"""helpers.interconnect.method: one timing method, its label, description, worker command line and checks."""
import argparse
import itertools

import pandas as pd
import pytest

from helpers.interconnect import worker
from helpers.interconnect.method import COLUMNS, FIELDS, START_LEAD_US, Method, MethodError, methods_of


def _grid():
    """Every combination of the fields that can be combined (a lead and a rotation of two sizes)."""
    out = []
    for api, harness, timer, placement, rot, start, control, stream in itertools.product(
            ("torch", "nccl"), ("eager", "graph"), ("events", "host"), ("in-place", "out-of-place"), (0, 2**20, 2**28),
            ("barrier", "aligned"), ("backend", "gloo"), ("side", "legacy")):
        if control == "gloo" and api != "nccl":
            continue
        leads = (None,) if start == "barrier" else (None, 2000)
        for lead in leads:
            out.append(Method(api=api, harness=harness, timer=timer, placement=placement, rotate_bytes=rot,
                              start=start, start_lead_us=lead, control=control, stream=stream))
    out += [Method.direct(harness=h, timer=t, placement=p, rotate_bytes=r) for h, t, p, r in itertools.product(
        ("eager", "graph"), ("events", "host"), ("in-place", "out-of-place"), (0, 2**28))]
    out += [m.but(nodes=n) for m in out if m.api != "direct" and m.start == "barrier" for n in (2, 16)]
    return out


def test_defaults_label_and_description():
    m = Method()
    assert m.label == "eager" and m.start_lead_us is None
    assert m.description == ("torch.distributed, eager, CUDA events, one buffer, ranks released by a barrier, "
                             "non-blocking stream, in-place")
    v = Method(harness="graph", timer="host", start="aligned", api="nccl")
    assert v.start_lead_us == START_LEAD_US
    assert v.label == f"graph+host_timer+aligned_{START_LEAD_US}us+libnccl"
    assert v.short == "ncclAllReduce per process, graph, aligned start"
    o = Method(timer="host", rotate_bytes=256 * 2**20, placement="out-of-place")
    assert o.label == "eager+host_timer+rotate_256MiB+out_of_place"
    assert o.description.endswith("buffers rotating within 256MiB, ranks released by a barrier, non-blocking stream, "
                                  "out-of-place (a copy, then the in-place all-reduce)")
    d = Method.direct(harness="graph", timer="host", rotate_bytes=2**28)
    assert d.label == "graph+host_timer+rotate_256MiB+direct+legacy_stream" and "ranks" not in d.description


def test_labels_are_unique_and_descriptions_too():
    grid = _grid()
    assert len({m.label for m in grid}) == len(grid)
    assert len({m.description for m in grid}) == len(grid)


@pytest.mark.parametrize("m", _grid()[::7], ids=lambda m: m.label)
def test_the_worker_command_line_gives_back_the_same_method(m):
    if m.api == "direct":
        pytest.skip("the direct method is measured in-process, not by the worker")
    ap = argparse.ArgumentParser()
    Method.add_arguments(ap)
    assert Method.from_args(ap.parse_args(m.cli_args())) == m
    # and the worker's own parser reads the same options
    a = worker.parse_args(["--backend", "nccl", "--sizes", "64", "--out", "x"] + m.cli_args())
    assert Method.from_args(a) == m


def test_rows_carry_the_method_and_give_it_back():
    m = Method(harness="graph", timer="host", start="aligned", start_lead_us=200, rotate_bytes=2**20)
    row = m.as_row()
    assert list(row) == list(COLUMNS) and row["method"] == m.label and row["start_lead_us"] == 200
    assert Method.from_row(row) == m
    t = pd.DataFrame([row, row, Method().as_row()])   # a table: NaN leads, numpy ints
    assert methods_of(t) == [m, Method()]
    with pytest.raises(MethodError, match="disagrees with its fields"):
        Method.from_row({**row, "method": "graph+host_timer+aligned"})
    with pytest.raises(MethodError, match="lacks the method columns"):
        Method.from_row({"method": "eager", "harness": "eager"})


def test_for_op_makes_all_to_all_out_of_place():
    m = Method(timer="host")
    assert m.for_op("all_reduce") is m
    assert m.for_op("all_to_all") == m.but(placement="out-of-place")
    assert m.but(start="aligned").but(start="barrier").start_lead_us is None


@pytest.mark.parametrize("kw,msg", [
    ({"harness": "replay"}, "harness = 'replay' is not known"),
    ({"timer": "sundial"}, "timer = 'sundial' is not known"),
    ({"api": "mpi"}, "api = 'mpi' is not known"),
    ({"placement": "sideways"}, "placement = 'sideways' is not known"),
    ({"start": "whenever"}, "start = 'whenever' is not known"),
    ({"stream": "blue"}, "stream = 'blue' is not known"),
    ({"control": "mpi"}, "control = 'mpi' is not known"),
    ({"rotate_bytes": -1}, "rotate_bytes = -1 must be an integer >= 0"),
    ({"rotate_bytes": 1.5}, "rotate_bytes = 1.5"),
    ({"start_lead_us": 300}, "a lead belongs to start='aligned' only"),
    ({"start": "aligned", "start_lead_us": 0}, "start_lead_us = 0 must be an integer >= 1"),
    ({"control": "gloo"}, "control = 'gloo' with api = 'torch'"),
    ({"api": "direct"}, "api = 'direct' is one process"),
    ({"nodes": 0}, "nodes = 0 must be an integer from 1"),
    ({"nodes": 2, "start": "aligned"}, "start = 'aligned' with nodes = 2: an aligned start launches every rank at one "
                                       "deadline on the host's monotonic clock, which ranks on different nodes do not share"),
])
def test_a_method_that_cannot_exist_is_refused_naming_the_field(kw, msg):
    with pytest.raises(MethodError, match=msg):
        Method(**kw)


@pytest.mark.parametrize("m,backend,msg", [
    (Method(api="nccl"), "gloo", "api = 'nccl' calls libnccl"),
    (Method(harness="graph"), "gloo", "harness = 'graph' needs CUDA graphs"),
    (Method(stream="legacy"), "gloo", "stream = 'legacy' places GPU work"),
    (Method.direct(), "nccl", "measured by collectives.measure_direct"),
    (Method(), "nccl-direct", "measured with api='direct'"),
])
def test_a_method_the_backend_cannot_run_is_refused(m, backend, msg):
    with pytest.raises(MethodError, match=msg):
        m.check_backend(backend)


def test_every_field_is_a_column():
    assert COLUMNS == ("method",) + FIELDS and set(FIELDS) == set(Method.__dataclass_fields__)


def test_a_method_across_nodes_says_so_in_its_label_description_and_rows():
    m = Method(nodes=2)
    assert m.label == "eager+2_nodes" and m.short == "torch.distributed, eager, 2 nodes"
    assert "ranks on 2 nodes (a torchrun rendezvous), released by a barrier: hosts share no clock, so no aligned " \
           "start" in m.description
    assert m.cli_args()[-2:] == ["--nodes", "2"] and m.as_row()["nodes"] == 2
    v = Method(harness="graph", timer="host", start="aligned", api="nccl")
    assert v.but(start="barrier", nodes=4).label == "graph+host_timer+libnccl+4_nodes"
    with pytest.raises(MethodError, match="aligned"):
        v.but(nodes=2)
    with pytest.raises(MethodError, match="api = 'direct'"):
        Method.direct(nodes=2)


def test_a_row_from_before_multi_node_sweeps_reads_as_one_node():
    old = {k: v for k, v in Method(timer="host").as_row().items() if k != "nodes"}
    assert Method.from_row(old) == Method(timer="host")
    t = pd.DataFrame([old, old])
    assert methods_of(t) == [Method(timer="host")]
    mixed = pd.DataFrame([old, Method(nodes=2).as_row()])      # the older row's nodes is blank
    assert methods_of(mixed) == [Method(timer="host"), Method(nodes=2)]
