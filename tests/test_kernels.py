"""aiconfigurator's collective tables in the book's units, pinned to aiconfigurator's own engine, and the choice
among its estimates (data only; the live engine test runs where an interpreter has aiconfigurator-core)."""
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from helpers.core import recorded
from helpers.model import arith as ma
from helpers.model import kernels as kt

ROOT = Path(__file__).resolve().parents[1]
EXTRACT = ROOT / "benchmarks" / "extract_aiconfigurator.py"
#: how far the book's lookup may sit from the engine's answer: both interpolate the same rows linearly, so only
#: the CSV's six significant digits separate them
REL = 1e-4
LIBRARY = {"NCCL": "nccl", "SGLang custom all-reduce": "sglang"}


def book_lookup(row) -> float:
    """The book's own lookup for an engine row: its message in bytes, as the book's callers pass it."""
    nbytes = int(row.tokens) * int(row.elements_per_token) * kt.element_bytes(row.dtype)
    return kt.comm_us(kt.RTX, row.op, int(row.num_gpus), nbytes, library=LIBRARY[row.library])


def test_the_collective_table_is_keyed_on_elements_and_converted_to_bytes_once():
    raw = recorded.load("reference/aic_comm.csv")
    assert "message_elements" in raw.columns and "message_bytes" not in raw.columns
    t = kt.table("comm")
    for dtype, size in (("half", 2), ("bfloat16", 2)):
        d = t[t.dtype == dtype]
        assert len(d) and (d.message_bytes == d.message_elements * size).all()
    # on a grid point the lookup in bytes returns the row measured at bytes / 2 elements
    t = t[(t.system == kt.RTX) & t.library.str.startswith("nccl") & (t.op == "all_reduce") & (t.num_gpus == 8)]
    r = t[t.message_elements == 8192].iloc[0]
    assert kt.comm_us(kt.RTX, "all_reduce", 8, 8192 * 2) == pytest.approx(float(r.latency_us), rel=1e-12)
    # between grid points: linear in the message, as the engine interpolates
    lo = t[t.message_elements.isin([4096, 8192])].sort_values("message_elements").latency_us.astype(float).tolist()
    assert kt.comm_us(kt.RTX, "all_reduce", 8, 6144 * 2) == pytest.approx((lo[0] + lo[1]) / 2, rel=1e-12)


def test_an_unknown_dtype_or_a_bytes_keyed_table_is_refused_naming_it():
    df = pd.DataFrame({"dtype": ["half", "e2m1x"], "message_elements": [1, 2]})
    with pytest.raises(kt.KernelTableError, match="'e2m1x' has no known element size.*ELEMENT_BYTES"):
        kt.with_message_bytes(df, "a test table")
    with pytest.raises(kt.KernelTableError, match="a test table: no 'message_elements' column"):
        kt.with_message_bytes(pd.DataFrame({"dtype": ["half"], "message_bytes": [2]}), "a test table")
    assert kt.element_bytes("fp8") == 1 and kt.element_bytes("float") == 4 and kt.element_bytes("bfloat16") == 2


def test_the_engine_answers_are_recorded_for_the_books_queries():
    e = kt.table("engine_comm")
    nccl = e[e.library == "NCCL"]
    asked = {(r.op, int(r.tokens), int(r.elements_per_token)) for r in nccl.itertuples()}
    # 8 GPUs, NCCL, half precision, 1 and 64 tokens of hidden 6144; and the logits all-gather
    assert {("all_reduce", 1, 6144), ("all_reduce", 64, 6144), ("all_gather", 1, 154880),
            ("all_gather", 64, 154880)} <= asked
    assert (e.num_gpus == 8).all() and (e.dtype == "half").all() and (e.engine_source == "silicon").all()
    assert e["query"].str.contains("_evaluate_single_op").all() and e.engine_version.str.startswith(
        "aiconfigurator-core").all()


def test_the_books_lookup_equals_aiconfigurators_engine():
    e = kt.table("engine_comm")
    m = ma.load_model("glm5")
    for r in e.itertuples():
        assert book_lookup(r) == pytest.approx(float(r.latency_us), rel=REL), (r.library, r.op, r.tokens)
    # the message the book's callers pass for the TP all-reduce and the logits gather is what the engine was asked
    sched = {c.kind: c for c in ma.collective_schedule(m)}
    for r in e[e.library == "NCCL"].itertuples():
        c = sched[r.op]
        assert int(r.tokens) * c.bytes_per_token == int(r.message_elements) * kt.element_bytes(r.dtype)
    # the defect this pins: a lookup at tokens x 6144 x 2 read as elements lands on twice the message
    ar64 = e[(e.library == "NCCL") & (e.op == "all_reduce") & (e.tokens == 64)].iloc[0]
    doubled = kt.comm_us(kt.RTX, "all_reduce", 8, 64 * 6144 * 2 * 2)
    assert not math.isclose(doubled, float(ar64.latency_us), rel_tol=0.05)


def _engine_python() -> str | None:
    if importlib.util.find_spec("aiconfigurator_core") is not None:
        return sys.executable
    return os.environ.get("AIC_PYTHON") or None


@pytest.mark.skipif(_engine_python() is None, reason="aiconfigurator-core is not importable here (pip install "
                    "aiconfigurator-core==0.12.0, or set AIC_PYTHON to an interpreter that has it)")
def test_the_books_lookup_equals_the_engine_asked_live(tmp_path):
    """Asks aiconfigurator's engine now, through the extraction script (which imports nothing from the book)."""
    out = subprocess.run([_engine_python(), str(EXTRACT), "--only", "aic_engine_comm.csv", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    live = pd.read_csv(tmp_path / "aic_engine_comm.csv")
    rec = kt.table("engine_comm")
    assert len(live) == len(rec)
    for r in live.itertuples():
        assert book_lookup(r) == pytest.approx(float(r.latency_us), rel=REL), (r.library, r.op, r.tokens)
        same = rec[(rec.library == r.library) & (rec.op == r.op) & (rec.tokens == r.tokens)]
        assert len(same) == 1
        if same.engine_version.iloc[0] == r.engine_version:
            assert float(same.latency_us.iloc[0]) == pytest.approx(float(r.latency_us), rel=1e-5)


def test_estimates_are_picked_by_substitution_and_a_missing_one_is_named():
    dsv3, status, _ = kt.estimate_step_us(1)
    assert status == f"substitution: {kt.DSV3_GRAPH}"
    glm, status, note = kt.estimate_step_us(1, kt.GLM5_GRAPH)
    assert status == f"substitution: {kt.GLM5_GRAPH}" and "GenerationDSAModule" in note and "no indexer" in note
    e = kt.estimate(kt.GLM5_GRAPH)
    assert (e.substitution == kt.GLM5_GRAPH).all()
    assert glm == float(e[(e.quantity == "decode_step") & (e.batch == 1)].value.iloc[0]) and glm != dsv3
    idx, _, note = kt.estimate_step_us(64, kt.GLM5_GRAPH_INDEXER)
    assert "indexer" in note and idx > kt.estimate_step_us(64, kt.GLM5_GRAPH)[0]
    with pytest.raises(kt.KernelTableError, match="no rows with substitution 'GLM-6'.*DeepseekV3ForCausalLM"):
        kt.estimate("GLM-6")
    with pytest.raises(kt.KernelTableError, match="batch 1 with substitution 'GLM-6'"):
        kt.estimate_step_us(1, "GLM-6")
    # the shares of each substitution's generation ops sum to one
    for sub in (kt.DSV3_GRAPH, kt.GLM5_GRAPH, kt.GLM5_GRAPH_INDEXER):
        s = kt.estimate(sub)
        for b in (1, 64):
            sh = s[(s.batch == b) & s.quantity.str.startswith("share of generation")]
            assert sh.value.astype(float).sum() == pytest.approx(1.0, rel=1e-9)
