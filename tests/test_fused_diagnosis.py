"""The GPU run's path through the book with the FUSED step (the default of 07_decode_step): a run folder
whose decode-step tables carry the fused path's op names at GLM-5's real TP8 shapes on a GPU with graphs
(tests/fused_study.py builds them from the committed study: the times are stand-ins, the names are the fused
step's own) must be read by the decode-step chapter's functions and by every section of the diagnosis, as
the lent H200's run reads its own."""
import math

import numpy as np
import pytest

import fused_study as fs
from helpers.chapters import decode_step as sr
from helpers.chapters import diagnosis as dg
from helpers.model import arith as ma
from helpers.model import measured as mb

CTX, BMAX = 384, 64
#: every test reads tables made from a real fused step of the scaled-down model (fused_study.fused_op_names)
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("fused-run")
    fs.write_run(d)
    return d


@pytest.fixture(scope="module")
def meas(run):
    return mb.step_measurement(run, "glm5")


@pytest.fixture(scope="module")
def glm5():
    return ma.load_model("glm5")


def test_the_fused_run_is_taken_as_this_runs_measurement(meas):
    assert meas.where == "this run" and meas.fusion == "fused"
    names = {w[3:] for w in meas.timings["what"] if w.startswith("op:")}
    assert "indexer weights_proj" not in names and "residual (MLP)" not in names   # bf16 fused: folded in
    assert {"index scores + top-k", "indexer k_norm + rope"} <= names
    assert meas.floor_us() > 0


def test_op_fidelity_reads_the_fused_op_list(meas, glm5):
    fid = mb.op_fidelity_table(meas, glm5, (1, BMAX), CTX)
    ops = set(fid["op"])
    assert "indexer weights_proj" not in ops            # part of the fused q_a + kv_a product in bf16
    assert {"fused q_a + kv_a", "routed experts (permute .. combine)", "attention"} <= ops
    assert np.isfinite(fid[["ours_us", "aic_here_us", "projected_us", "aic_target_us"]].to_numpy()).all()
    # the fused product is priced at its own width: q_a + kv_a + rope + the indexer's wk and weights_proj
    un = mb.op_fidelity(mb.unfused_measurement(), glm5, 1, CTX)
    fu = fid[fid["batch"] == 1]
    b_un = float(un.loc[un.op == "fused q_a + kv_a", "bytes_emulated"].iloc[0])
    b_fu = float(fu.loc[fu.op == "fused q_a + kv_a", "bytes_emulated"].iloc[0])
    extra = 2 * glm5.hidden * (glm5.index_head_dim + glm5.index_n_heads)
    assert math.isclose(b_fu - b_un, extra)


def test_every_diagnosis_section_runs_on_the_fused_run(run, meas):
    study = mb.precision_study(run)
    assert study.where == "this run"
    d = dg.Diagnosis.build("glm5", 0.25, meas, live=True, study=study)
    sections = (dg.inputs, dg.mapping, dg.baseline, dg.check, dg.measured_compute, dg.projection_check,
                dg.bare_metal_band, dg.vm_predicted, dg.attribution, dg.decision, dg.ceilings, dg.run_link,
                dg.collectives, dg.remedies)
    for f in sections:
        part = f(d)
        assert part.values, f.__name__
        dg.save(run, part)
    assert dg.overview(d)["step_source_text"].startswith("The decode-step measurement is this run's")
    pc = dg.projection_check(d)
    assert "indexer weights_proj" not in set(pc.tables["projection_check"]["op"])


def test_the_decode_step_chapter_reads_the_fused_run(run, meas, glm5):
    assert len(sr.bytes_table(meas, CTX)) and sr.bytes_values(meas, CTX)
    s = sr.steps(meas)
    assert len(s[s["batch"] == BMAX])
    assert sr.measurement_values(meas, BMAX, CTX, 8192)["step_1"] > 0
    split = sr.split_table(meas, (1, BMAX), CTX)
    assert sr.split_values(split, BMAX, sr.step_ms(meas, 1, CTX), sr.step_ms(meas, BMAX, CTX))
    assert sr.answer_what(meas) and sr.sparse_text(meas, BMAX, 8192)
    assert len(sr.split_by_batch(meas, CTX))
    sr.precision_bytes(meas, glm5, 8, CTX)
    fid = mb.op_fidelity_table(meas, glm5, (1, BMAX), CTX)
    assert sr.fidelity_values(fid, BMAX)
    tune, values = sr.tuning(meas, glm5, CTX)
    assert len(tune) and values
    ps = mb.precision_study(run)
    values = sr.precision_values(ps, CTX)
    assert values and sr.fp8_verdict(values)
    for b in (1, BMAX):
        assert len(sr.precision_split(ps, b, CTX))
    assert len(sr.precision_steps(ps, CTX))
    if sr.has_overlap_pair(ps):
        assert len(sr.overlap_steps(ps, CTX))
