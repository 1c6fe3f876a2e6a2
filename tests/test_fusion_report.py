"""What the decode-step chapter says about fusion (helpers.chapters.decode_step: fusion_table, kernel_compare,
sglang_kernels, engine_table), read from the committed fused study and checked against its rows picked here
with pandas alone; the op map for SGLang refuses an op it cannot place; step_measurement takes a fused study
only where it holds the chapter's whole sweep."""
import json

import pandas as pd
import pytest

from helpers.chapters import decode_step as sr
from helpers.core import recorded
from helpers.model import arith as ma
from helpers.model import budget as bd
from helpers.model import measured as mb

CTX = 384


@pytest.fixture(scope="module")
def fs():
    return mb.fusion_study()


@pytest.fixture(scope="module")
def glm5():
    return ma.load_model("glm5")


def _rows(fs, mode="graph"):
    t = recorded.load(f"measured/{fs.id}/timings.csv")
    return t[(t.what == "step") & (t["mode"] == mode) & (t.attention == "dense") & (t.context == CTX)]


def test_the_fusion_table_is_the_studys_rows(fs):
    tab = sr.fusion_table(fs, CTX)
    for r in tab.itertuples():
        st = _rows(fs, r.mode)
        fu = st[(st.dtype == r.precision) & (st.fusion == "fused") & (st.batch == r.batch)].iloc[0]
        un = st[(st.dtype == r.precision) & (st.fusion == "unfused") & (st.batch == r.batch)].iloc[0]
        assert r.fused_ms == fu.median_us / 1e3 and r.unfused_ms == un.median_us / 1e3
        assert (r.fused_kernels, r.unfused_kernels) == (fu.kernels, un.kernels) or r.mode == "eager"
        assert r.speedup == pytest.approx(un.median_us / fu.median_us)
    v = sr.fusion_values(tab, fs, 64)
    assert v["fp8_vs_bf16_1"] == pytest.approx(v["fus_fp8_1"] / v["fus_bf16_1"])


def test_kernels_beside_the_op_list_for_sglang(fs, glm5):
    sg = sr.sglang_kernels(glm5)
    assert int(sg.sum()) == bd.kernels_per_step(glm5)
    assert sg["lm_head"] == 1 and sg["indexer"] == len(bd.INDEXER_OPS) * glm5.layers
    k = sr.kernel_compare(fs, mb.unfused_measurement(), glm5, CTX).set_index("component")
    st = _rows(fs)
    assert k.loc["step", "fused"] == st[(st.dtype == "bf16") & (st.fusion == "fused") & (st.batch == 1)].kernels.iloc[0]
    # each component's kernels sum to the step's (they are the same graph's nodes, timed apart)
    assert k.loc[list(sr.SPLIT), "fused"].sum() == k.loc["step", "fused"]
    assert k.loc["step", "sglang_op_list"] + k.loc["collectives (not on one GPU)", "sglang_op_list"] == sg.sum()
    v = sr.kernel_values(k.reset_index())
    assert v["k_vs_sglang"] == pytest.approx(k.loc["step", "fused"] / k.loc["step", "sglang_op_list"])


def test_an_op_the_map_cannot_place_is_named(glm5, monkeypatch):
    monkeypatch.setattr(bd, "MOE_OPS", bd.MOE_OPS + ("a new fused op",))
    with pytest.raises(mb.MeasuredBudgetError, match="'a new fused op'"):
        sr.sglang_kernels(glm5)


def test_engine_table_sets_each_component_beside_the_composite(fs, glm5):
    e = sr.engine_table(fs, glm5, CTX, (1, 64))
    assert set(e.precision) == {"bf16", "fp8"} and set(e.batch) == {1, 64}
    for (prec, b), g in e.groupby(["precision", "batch"]):
        floor = fs.sweep_meta(prec, "fused")["graph_us_per_kernel"]
        comp = mb.engine_composite(glm5, b, CTX, prec, floor)
        step = g[g.component == "step"].iloc[0]
        assert step.engine_us == pytest.approx(comp.us_step.sum())
        assert step.ratio == pytest.approx(step.measured_us / step.engine_us)
    v = sr.engine_values(e, 64)
    outside = e[(e.component != "step") & (e.ratio > mb.FIDELITY_TOLERANCE)]
    assert (v["engine_outside"] == "none") == (len(outside) == 0)


def test_only_a_full_fused_study_becomes_the_step_measurement(fs):
    """A QUICK study (no eager, op-level or sparse points) is shown but not taken as the step measurement; the
    same rows with the full sweep's config are, and of several the last registered full one wins."""
    def variant(full: bool, sid: str):
        meta = json.loads(json.dumps(fs.meta))
        for m in meta["sweeps"].values():
            m["config"].update({"modes": ["graph", "eager"] if full else ["graph"],
                                "op_level": [[1, CTX]] if full else [], "sparse_points": [[1, 8192]] if full else [],
                                "contexts": [CTX, 8192] if full else [CTX]})
        return mb.FusionStudy(fs.timings, fs.bytes, meta, f"data/measured/{sid}", fs.device, sid)

    quick, full_a, full_b = variant(False, "q"), variant(True, "a"), variant(True, "b")
    assert not quick.full() and full_a.full()
    assert mb.pick_fusion_study([full_a, full_b, quick]).id == "b"
    assert mb.pick_fusion_study([quick]).id == "q" and mb.pick_fusion_study([]) is None
    # the committed data: the unfused study is the measurement unless a full fused study is registered
    expect = f"data/measured/{fs.id}" if fs.full() else f"data/measured/{recorded.study(mb.STEP_ROLE).id}"
    assert mb.step_measurement(None).where == expect
    m = full_a.measurement("bf16", "fused")
    assert m.fusion == "fused" and set(m.timings.dtype) == {"bf16"} and set(m.bytes.dtype) == {"bf16"}
    assert m.floor_us() == fs.sweep_meta("bf16", "fused")["graph_us_per_kernel"]
    with pytest.raises(mb.MeasuredBudgetError, match="no fp32 fused sweep"):
        full_a.sweep_meta("fp32", "fused")
    assert isinstance(m.timings, pd.DataFrame)
