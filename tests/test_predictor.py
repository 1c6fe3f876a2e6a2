"""The any-system predictor (helpers.model.verdict.predictor): held to aiconfigurator's own engine on one
configuration per system (the engine's answers recorded by benchmarks/extract_aiconfigurator.py in
data/reference/aic_engine_ops.csv), and to its own contract (bands, refusals, settings that move it)."""
from __future__ import annotations

import json
from functools import lru_cache

import pytest

from helpers.core import recorded
from helpers.model import arith as ma
from helpers.model import kernels as kt
from helpers.model import measured as mb
from helpers.model.verdict import predictor as pr

#: the engine reads a few tables differently between grid points (the lm_head's n, the DSA module's context, the
#: NCCL version it picks for H200 and B200): agreement within this share is agreement; a unit (ms for us), a count
#: (one layer for 78) or a size (elements for bytes) error is a factor of 2 or more
TOLERANCE = 0.10


@lru_cache(maxsize=None)
def _predict(system: str, c: int, **kw) -> pr.Prediction:
    return pr.predict("glm5", system, 8, c, 384, pr.EngineSettings(**kw), samples=400)


def _book_us(r) -> float:
    sh = json.loads(r.shape)
    b, ctx = int(r.batch), int(r.context)
    if r.kind == "gemm":
        return kt.gemm_us(r.system, sh["dtype"], b, sh["n"], sh["k"])
    if r.kind == "moe":
        return kt.moe_us(r.system, sh["dtype"], b, sh["distribution"], kernel_source=pr.TABLE_MOE[(r.system, sh["dtype"])])
    if r.kind == "all_reduce":   # the engine asks at tokens x elements; the book at bytes (2 per half element)
        return kt.comm_us(r.system, "all_reduce", 8, b * sh["elements_per_token"] * kt.element_bytes(sh["dtype"]))
    if r.kind == "mla":
        return kt.mla_us(r.system, b, ctx)
    if r.kind == "dsa":   # the engine's op covers every layer
        return kt.dsa_module_us(b, ctx, r.system, sh["model"], "fp8_block") * int(r.count)
    raise AssertionError(r.kind)


def test_lookups_equal_aiconfigurators_engine_on_each_system():
    e = recorded.load("reference/aic_engine_ops.csv")
    assert set(e["system"]) == {kt.RTX, kt.H200, kt.B200}
    for r in e.itertuples():
        book, engine = _book_us(r), float(r.latency_us)
        assert abs(book - engine) / engine <= TOLERANCE, (r.system, r.what, book, engine)


def test_counts_match_the_engines_layers():
    """The engine prices the DSA module once for all 78 layers; the book's op list has 3 dense and 75 MoE layers
    and one attention per layer."""
    e = recorded.load("reference/aic_engine_ops.csv")
    dsa = e[e["kind"] == "dsa"]
    for ckpt in ("glm5", "glm5-fp8"):
        m = ma.load_model(ckpt)
        assert (dsa["count"] == m.layers).all()
        assert m.moe_layers + m.dense_layers == m.layers
    t = mb.kernel_terms(ma.load_model("glm5-fp8"), 64, 1024, 2.0, kt.H200, attention="dsa",
                        moe_kernel=pr.TABLE_MOE[(kt.H200, "fp8_block")])
    att = t[t["op"] == "attention"]
    assert int(att["count"].iloc[0]) == int(dsa["count"].iloc[0])
    want = float(dsa[dsa["system"] == kt.H200]["latency_us"].iloc[0])
    assert abs(float(att["us_step"].iloc[0]) - want) / want <= TOLERANCE


@pytest.mark.parametrize("system", ["rtx_pro_6000_server", "h200_sxm", "b200_sxm"])
def test_predict_runs_on_every_system_with_its_point_in_its_band(system):
    ckpt = "nvfp4" if system == "rtx_pro_6000_server" else "fp8"
    p = _predict(system, 1, checkpoint=ckpt)
    assert p.band[0] <= p.tok_s <= p.band[1]
    assert p.system == kt.SYSTEMS[system]
    assert p.step_band_ms[0] <= p.step_ms <= p.step_band_ms[1]
    assert 0 < p.tok_s < 1000
    assert set(p.ranges["input"]) == set(pr.DRAWN)
    assert abs(p.terms.loc[p.terms["term"] == "step", "ms"].iloc[0] - 1e3 / p.at_mid_tok_s) < 1e-6


def test_the_model_error_widens_every_band():
    p = _predict("rtx_pro_6000_server", 1)
    r = p.ranges.set_index("input").loc["model_error"]
    assert r["low"] < 1 < r["high"]
    assert p.band[1] / p.band[0] > r["high"] / r["low"] * 0.8


def test_tuned_nccl_moves_the_rtx_at_64_and_custom_allreduce_the_h200():
    slow, fast = _predict("rtx_pro_6000_server", 64), _predict("rtx_pro_6000_server", 64, nccl_tuned=True)
    assert fast.tok_s > slow.tok_s
    nccl = _predict("h200_sxm", 64, checkpoint="fp8", custom_allreduce=False)
    custom = _predict("h200_sxm", 64, checkpoint="fp8", custom_allreduce=True)
    coll = lambda p: float(p.terms.loc[p.terms["term"] == "collectives", "ms"].iloc[0])  # noqa: E731
    assert coll(custom) < coll(nccl)


def test_graph_cap_prices_eager_launches_only_above_it():
    under = _predict("rtx_pro_6000_server", 64, cuda_graph_max_bs=64)
    over = _predict("rtx_pro_6000_server", 64, cuda_graph_max_bs=32)
    assert over.band[0] < under.band[0]
    acts = over.ranges.set_index("input")["acts"]
    assert acts["eager_launch"] == "yes"
    assert under.ranges.set_index("input")["acts"]["eager_launch"].startswith("no")


@pytest.mark.parametrize("kw, words", [
    ({"system": "mi300x"}, "no kernel tables"),
    ({"tp": 4}, "tensor parallelism 8"),
    ({"settings": pr.EngineSettings(speculative=True)}, "speculative decoding"),
    ({"settings": pr.EngineSettings(checkpoint="int4")}, "checkpoint"),
    ({"concurrency": 0}, "concurrency"),
])
def test_refuses_what_it_cannot_price_naming_it(kw, words):
    args = {"model": "glm5", "system": kt.RTX, "tp": 8, "concurrency": 1, "context": 384, **kw}
    with pytest.raises(pr.PredictorError, match=words):
        pr.predict(**args)
