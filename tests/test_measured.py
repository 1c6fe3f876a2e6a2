"""aiconfigurator's kernel tables at GLM-5's shapes, the budget on measured compute, the projection of the
emulated step and its checks (data only: no GPU)."""
import math
import tempfile

import numpy as np
import pandas as pd
import pytest

from helpers.chapters import decode_step as sr
from helpers.model import arith as ma
from helpers.model import budget as bd
from helpers.model import kernels as kt
from helpers.model import measured as mb


@pytest.fixture(scope="module")
def glm5():
    return ma.load_model("glm5")


@pytest.fixture(scope="module")
def meas():
    return mb.step_measurement(None)


def test_lookups_hit_grid_points_exactly_and_interpolate_between():
    # an exact grid point: the table's own row
    g = kt.table("gemm")
    r = g[(g.system == kt.RTX) & (g.gemm_dtype == "bfloat16") & (g.m == 64) & (g.n == 6144) & (g.k == 2048)]
    assert math.isclose(kt.gemm_us(kt.RTX, "bf16", 64, 6144, 2048), float(r.latency_us.mean()))
    # n = 2624 lies between 2560 and 3072: between their times
    lo, hi = kt.gemm_us(kt.RTX, "bf16", 1, 2560, 6144), kt.gemm_us(kt.RTX, "bf16", 1, 3072, 6144)
    assert min(lo, hi) <= kt.gemm_us(kt.RTX, "bf16", 1, 2624, 6144) <= max(lo, hi)
    # message sizes interpolate log-log and stay between neighbours
    a, b = kt.comm_us(kt.RTX, "all_reduce", 8, 8192), kt.comm_us(kt.RTX, "all_reduce", 8, 16384)
    assert a <= kt.comm_us(kt.RTX, "all_reduce", 8, 12288) <= b


def test_lookups_name_what_is_missing():
    with pytest.raises(kt.KernelTableError, match="outside the measured grid"):
        kt.gemm_us(kt.RTX, "bf16", 10**6, 6144, 2048)
    with pytest.raises(kt.KernelTableError, match="no rows with system"):
        kt.moe_us("NVIDIA GB300", "nvfp4", 1)   # a system the tables do not hold
    with pytest.raises(kt.KernelTableError, match="moe_dtype"):
        kt.moe_us(kt.H200, "nvfp4", 1)          # H200 has no NVFP4 MoE kernel


def test_aiconfigurator_estimate_is_read_as_recorded():
    est, status, note = kt.estimate_step_us(1)
    assert est and status == f"substitution: {kt.DSV3_GRAPH}"
    e = kt.estimate()
    stock = e[(e.substitution == "none")]
    assert (stock.status == "failed").all() and stock.note.str.contains("DSA").all()
    # both substitutions that ran are there, at both batches
    for sub in (kt.DSV3_GRAPH, kt.GLM5_GRAPH):
        d = e[(e.substitution == sub) & (e.quantity == "decode_step")]
        assert set(d.batch) == {1, 64} and (d.status == "ok").all()
    sh = mb.aic_shares(1, kt.GLM5_GRAPH)
    assert "generation_attention_mla (silicon)" in set(sh.op)
    assert math.isclose(sh.ms.sum(), kt.estimate_step_us(1, kt.GLM5_GRAPH)[0] / 1e3)


def test_kernel_terms_cover_the_step_and_label_every_figure(glm5, meas):
    t = mb.kernel_terms(glm5, 1, 384, meas.floor_us())
    assert set(t.component) == {"attention", "indexer", "moe", "shared/dense MLP", "norms and small ops",
                                "lm_head", "collectives"}
    assert set(t.kind) <= {"measured", "derived", "measured floor x assumed count"}
    coll = t[t.component == "collectives"]
    assert int(coll["count"].sum()) == ma.collectives_per_step(glm5)
    # the overlap row hides the shorter of the two MoE paths, never more
    shared = float(t.loc[t.op == "shared expert (gate_up + down)", "us_each"].iloc[0])
    over = float(t.loc[t.op.str.contains("overlap"), "us_each"].iloc[0])
    assert over == -shared or over < 0
    no_coll = mb.kernel_terms(glm5, 1, 384, meas.floor_us(), collectives=False)
    assert "collectives" not in set(no_coll.component)
    # more sequences never make a step cheaper
    assert mb.kernel_terms(glm5, 64, 384, meas.floor_us()).us_step.sum() > t.us_step.sum()


def test_projection_scales_only_the_non_launch_part(glm5, meas):
    p = mb.projected_terms(meas, glm5, 1, 384, collectives=False, tolerance=None).set_index("component")
    for c, r in p.iterrows():
        assert r.us >= r.launch_us - 1e-9
        expect = r.launch_us + max(0.0, r.measured_us - r.launch_us) * r.bytes_ratio * r.bandwidth_ratio
        assert math.isclose(r.us, expect, rel_tol=1e-12)
    assert math.isclose(p.bandwidth_ratio.iloc[0], 4800 / 1597, rel_tol=1e-9)


def test_projection_keeps_only_components_within_the_engine_tolerance(glm5, meas):
    """A component whose time on its own GPU is more than FIDELITY_TOLERANCE times the engine composite takes
    the recorded GPU's kernel tables instead; the ratio is engine_fidelity's own."""
    full = mb.projected_terms(meas, glm5, 1, 384, collectives=False, tolerance=None).set_index("component")
    p = mb.projected_terms(meas, glm5, 1, 384, collectives=False).set_index("component")
    fid = mb.engine_fidelity(meas.timings, glm5, 1, 384, "bf16", meas.floor_us()).set_index("component")
    kts = mb.components(mb.kernel_terms(glm5, 1, 384, meas.floor_us(), collectives=False)).set_index("component")
    assert set(p.priced_by) <= {"projection", f"aiconfigurator {kt.RTX} tables"}
    for c, r in p.iterrows():
        assert math.isclose(r.engine_ratio, fid.loc[c, "ratio"])
        if r.engine_ratio <= mb.FIDELITY_TOLERANCE:
            assert r.priced_by == "projection" and math.isclose(r.us, full.loc[c, "us"])
        else:
            assert r.priced_by != "projection" and math.isclose(r.us, kts.loc[c, "us"])
    # which side a component falls on depends on the study (the fused one keeps every component at batch 1);
    # a tolerance nothing meets leaves every component to the tables; one everything meets, to the projection
    assert (mb.projected_terms(meas, glm5, 1, 384, collectives=False, tolerance=0.01).priced_by != "projection").all()
    assert (mb.projected_terms(meas, glm5, 1, 384, collectives=False, tolerance=100).priced_by == "projection").all()


def test_op_fidelity_compares_like_with_like(glm5, meas):
    f = mb.op_fidelity(meas, glm5, 64, 384)
    assert {"fused q_a + kv_a", "o_proj", "lm_head", "attention", "routed experts (permute .. combine)"} <= set(f.op)
    assert (f.ours_us > 0).all() and (f.aic_here_us > 0).all() and (f.aic_target_us > 0).all()
    # the H200 GEMMs of the emulation are within a factor two of SGLang's on the same GPU class
    gemm = f[f.op.isin(["fused q_a + kv_a", "q_b", "o_proj", "lm_head"])]
    assert ((gemm.ratio_here > 0.5) & (gemm.ratio_here < 2)).all()


def test_budgets_table_and_goal_are_computed_not_typed(glm5, meas):
    pred = bd.predict_from_run(tempfile.mkdtemp())
    t = mb.budgets_table(glm5, pred, meas, 384)
    assert set(t.system) == {"original VM", "bare metal (reference)"}
    assert t.groupby(["system", "concurrency"]).size().min() >= 3
    obs = bd.primary_observations().set_index(["system", "concurrency"])["observed"]
    for r in t.itertuples():
        assert math.isclose(r.observed_tok_s, obs[(r.system, r.concurrency)])
        assert math.isclose(r.predicted_tok_s, r.concurrency * 1e3 / r.step_ms)
    terms = {b: mb.kernel_terms(glm5, b, 384, meas.floor_us()) for b in (1, 64)}
    g = mb.goal(t, terms).set_index("concurrency")
    assert set(g.index) == {1, 64}
    for c in (1, 64):
        assert math.isclose(g.loc[c, "predicted_ms"], float(terms[c].us_step.sum()) / 1e3)
    # aiconfigurator on both graphs, at both concurrencies, priced from the file
    for c in (1, 64):
        for bid, sub in mb.AIC_BUDGETS.items():
            r = mb.pick_budget(t, "bare metal (reference)", c, bid)
            assert math.isclose(r.step_ms, kt.estimate_step_us(c, sub)[0] / 1e3)
    with pytest.raises(mb.MeasuredBudgetError, match="'no such budget' is not one of"):
        mb.pick_budget(t, "bare metal (reference)", 1, "no such budget")
    with pytest.raises(mb.MeasuredBudgetError, match="0 rows for 'bare metal \\(reference\\)' at concurrency 1 with "
                                                     "budget_id 'aiconfigurator'"):
        mb.pick_budget(t[t.budget_id != "aiconfigurator"], "bare metal (reference)", 1, "aiconfigurator")


def test_step_report_picks_name_missing_rows(meas):
    s = sr.steps(meas)
    assert {"graph", "eager"} == set(s["mode"]) and (s.step_ms > 0).all()
    sp = sr.split(meas, 1, 384, 4800.0)
    assert math.isclose(sp.share.sum(), 1.0)
    with pytest.raises(mb.MeasuredBudgetError, match="timing rows for batch 3"):
        sr.split(meas, 3, 384)
    tb = sr.tuning_bounds(meas, 5.0, 2631, 90.0).set_index("tuning")
    assert tb.loc["--mem-fraction-static", "max_speedup"] == 1.0
    assert math.isclose(tb.loc["MoE runner", "max_speedup"], 90.0 / 85.0)


def test_step_measurement_prefers_a_real_gpu_run(tmp_path, meas):
    from helpers.core import layout
    # a CPU run of the scaled-down model is not used for the projection: the committed data is
    t = meas.timings.copy()
    t["model"] = "GLM-5 scaled down (CPU)"
    t["device"] = "cpu"
    layout.save(tmp_path, "07_decode_step", "step_times", t)
    assert mb.step_measurement(tmp_path).where.startswith("data/")
    t = meas.timings.copy()
    t["device"] = "cuda"
    layout.save(tmp_path, "07_decode_step", "step_times", t)
    layout.save(tmp_path, "07_decode_step", "step_bytes", meas.bytes)
    layout.save(tmp_path, "07_decode_step", "step_meta", meas.meta)
    assert mb.step_measurement(tmp_path).where == "this run"


def test_another_chapter_reads_the_step_only_through_its_declared_needs(tmp_path, meas):
    from helpers.core import layout
    t = meas.timings.copy()
    t["device"] = "cuda"
    layout.save(tmp_path, "07_decode_step", "step_times", t)
    # the diagnosis declares the step's results (optional needs): a run with the times but not the bytes fails
    # naming the chapter that writes them
    with pytest.raises(layout.MissingResult, match="written by chapter 07_decode_step"):
        mb.step_measurement(tmp_path, reader="07_diagnosis")
    layout.save(tmp_path, "07_decode_step", "step_bytes", meas.bytes)
    layout.save(tmp_path, "07_decode_step", "step_meta", meas.meta)
    assert mb.step_measurement(tmp_path, reader="07_diagnosis").where == "this run"
    # a chapter that declares no such need cannot read them
    with pytest.raises(layout.LayoutError, match="declares no need for 07_decode_step/step_times"):
        mb.step_measurement(tmp_path, reader="06_vm_p2p")
    with pytest.raises(layout.LayoutError, match="declares no need for 07_decode_step/precision_times"):
        mb.precision_study(tmp_path, reader="06_vm_p2p")
    assert mb.precision_study(tmp_path, reader="07_diagnosis").where.startswith("data/")   # none in this run
