"""The fused step's op list priced with aiconfigurator's H200 SGLang kernels (helpers.model.measured.
engine_composite) and set beside a measurement (engine_fidelity); the H200 tables it reads."""
import pandas as pd
import pytest

from helpers.core import recorded
from helpers.model import arith as ma
from helpers.model import kernels as kt
from helpers.model import measured as mb


@pytest.fixture(scope="module")
def glm5():
    return ma.load_model("glm5")


def test_h200_fp8_gemm_and_indexer_tables_are_there_with_their_source():
    g = recorded.load("reference/aic_h200_gemm_fp8.csv")
    assert set(g["system"]) == {kt.H200} and set(g["gemm_dtype"]) == {"fp8"}
    assert set(g["kernel_source"]) == {"sglang_sgl_kernel_fp8_scaled_mm"}
    i = recorded.load("reference/aic_h200_indexer.csv")
    assert set(i["op"]) == {"glm5_mqa_logits_module", "glm5_topk_module"}
    assert (g["source"] == "aiconfigurator-core-0.12.0").all() and (i["source"] == "aiconfigurator-core-0.12.0").all()
    # a table point read back through the lookup (on the grid: no interpolation)
    r = g[(g.m == 1) & (g.n == 2048) & (g.k == 2048)].iloc[0]
    assert kt.gemm_us(kt.H200, "fp8", 1, 2048, 2048) == pytest.approx(r.latency_us)


def test_engine_composite_prices_every_op_and_fp8_reads_fp8_tables(glm5):
    b16 = mb.engine_composite(glm5, 1, 384, "bf16", 1.0)
    f8 = mb.engine_composite(glm5, 1, 384, "fp8", 1.0)
    assert set(b16["component"]) == {"attention", "indexer", "moe", "shared/dense MLP", "norms and small ops",
                                     "lm_head", mb.OVERLAP}
    own = b16[b16["component"] != mb.OVERLAP]
    assert (own["us_step"] >= 0).all() and b16["us_step"].sum() > 0
    # the shared expert alone (as the step times its component) and, apart, what the second stream hides
    hidden = float(b16.loc[b16["component"] == mb.OVERLAP, "us_each"].iloc[0])
    shared = float(b16.loc[b16.op == "shared expert", "us_each"].iloc[0])
    assert -shared <= hidden < 0
    # the experts: SGLang's bf16 and fp8_block fused MoE on H200; FP8 reads half the bytes and is faster
    e16 = float(b16.loc[b16.op == "routed experts", "us_each"].iloc[0])
    e8 = float(f8.loc[f8.op == "routed experts", "us_each"].iloc[0])
    assert e16 == pytest.approx(kt.moe_us(kt.H200, "bf16", 1)) and e8 == pytest.approx(kt.moe_us(kt.H200, "fp8_block", 1))
    assert "indexer weights_proj" in set(f8.op) and "indexer weights_proj" not in set(b16.op)
    with pytest.raises(mb.MeasuredBudgetError, match="precision 'fp32'"):
        mb.engine_composite(glm5, 1, 384, "fp32", 1.0)


def test_engine_fidelity_sets_measured_beside_engine_and_names_a_missing_row(glm5):
    eng = mb.engine_composite(glm5, 1, 384, "bf16", 1.0)
    comp = eng.groupby("component")["us_step"].sum()
    rows = [{"batch": 1, "context": 384, "mode": "graph", "attention": "dense", "dtype": "bf16", "fusion": "fused",
             "what": c, "median_us": 2 * float(v), "kernels": 10} for c, v in comp.items()]
    rows.append({**rows[0], "what": "step", "median_us": 1.5 * float(comp.sum())})
    f = mb.engine_fidelity(pd.DataFrame(rows), glm5, 1, 384, "bf16", 1.0)
    assert f.set_index("component").loc["step", "ratio"] == pytest.approx(1.5)
    assert f[f.component != "step"]["ratio"].tolist() == pytest.approx([2.0] * (len(f) - 1))
    with pytest.raises(mb.MeasuredBudgetError, match="0 timing rows for 'attention', fp8 fused"):
        mb.engine_fidelity(pd.DataFrame(rows), glm5, 1, 384, "fp8", 1.0)
