"""The fused decode step (helpers.model.fused, DecodeStep(fusion="fused")) against the unfused reference: the
same logits within a stated tolerance in every precision, on the CPU at the scaled-down model's shapes; one
fused function compiled by torch.compile (Inductor's C++ backend) against its plain self; the op list an
engine would run (no separate quantization, residual or per-head rotary ops)."""
import pytest
import torch

from helpers.model import arith as ma
from helpers.model import fused as fz
from helpers.model import step

MINI = "glm5-mini"
#: fused against unfused, the unfused step's experts forced on both (metric: relative L2 error of the logits).
#: Measured here (glm5-mini, batch 4, context 64, seed 0, torch 2.13 CPU): fp32 8e-7, bf16 0.013, fp8 0.073
#: (each path rounds its own intermediate bf16 values: the routing weight is applied before the second
#: grouped product, and FP8 quantizes the weighted activation). bf16 against fp32 alone is 0.026 to 0.036
#: (step.FP8_TOLERANCE's note), FP8 against fp32 0.21 to 0.31.
TOLERANCE = {"fp32": 1e-5, "bf16": 0.04, "fp8": 0.15}


@pytest.fixture(scope="module")
def mini():
    return ma.load_model(MINI)


def _pair(rm, batch, context, **kw):
    un = step.DecodeStep(rm, batch, context, fusion="unfused", **kw)
    un.record_routing = True
    un.run()
    fu = step.DecodeStep(rm, batch, context, fusion="fused", **kw)
    fu.forced_routing = [r.clone() for r in un.routing]
    fu.run()
    return un.logits().float().clone(), fu.logits().float().clone()


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp8"])
@pytest.mark.integration
def test_fused_step_gives_the_unfused_logits(mini, precision):
    full = step.build_full(mini, 4, 64, "fp32")
    rm = full if precision == "fp32" else step.convert_model(full, precision)
    ref, got = _pair(rm, 4, 64)
    chk = step.compare_logits(ref, got, TOLERANCE[precision], metric="l2")
    assert chk.ok, (precision, chk)
    if precision == "fp32":
        assert chk.tokens_agree and chk.rel_err < 1e-5


@pytest.mark.integration
def test_fused_step_with_sparse_attention_and_its_own_routing(mini):
    """Past index_topk tokens the indexer's top-k picks what attention reads; its own router (no forcing)."""
    full = step.build_full(mini, 2, 200, "fp32")
    assert 200 > mini.index_topk
    a = step.DecodeStep(full, 2, 200, attention="sparse", fusion="unfused")
    a.run()
    b = step.DecodeStep(full, 2, 200, attention="sparse", fusion="fused")
    b.run()
    chk = step.compare_logits(a.logits(), b.logits())
    assert chk.ok, chk


@pytest.mark.integration
def test_a_wrong_fused_op_is_caught(mini, monkeypatch):
    """The comparison can fail: a fused norm that forgets the residual add is far outside the tolerance."""
    full = step.build_full(mini, 4, 64, "fp32")
    right = fz.add_rmsnorm
    bad = lambda h, a, b, w, eps, quant: right(h, None, None, w, eps, quant)  # noqa: E731
    monkeypatch.setattr(fz, "add_rmsnorm", bad)
    ref, got = _pair(full, 4, 64)
    assert not step.compare_logits(ref, got, TOLERANCE["fp32"], metric="l2").ok


@pytest.mark.integration
def test_the_fused_op_list_is_an_engines(mini):
    rm = step.convert_model(step.build_full(mini, 2, 32, "fp32"), "fp8")
    un = step.DecodeStep(rm, 2, 32, fusion="unfused")
    fu = step.DecodeStep(rm, 2, 32, fusion="fused")
    names = fu.op_names()
    assert not any(n.startswith("quantize") for n in names)
    assert "residual (MLP)" not in names and "indexer wk" not in names
    assert len(fu.ops) < len(un.ops)
    assert set(fu.components_present()) == set(un.components_present())
    # the indexer's wk is a part of the fused projection, whose weight the layer's own entry now views
    W = rm.layers[0]
    fused_w, parts = step.x_projection(W)
    assert parts[0] == W["qkv_a"].shape[-1] and W["qkv_a"].q.untyped_storage().data_ptr() == \
        fused_w.q.untyped_storage().data_ptr()
    assert not fu.compiled      # on a CPU the fused functions run uncompiled unless asked


@pytest.mark.integration
def test_fusion_and_compile_settings_are_checked(mini):
    full = step.build_full(mini, 1, 16, "fp32")
    with pytest.raises(step.StepError, match="fusion 'fast'"):
        step.DecodeStep(full, 1, 16, fusion="fast")
    with pytest.raises(step.StepError, match="compile 'yes'"):
        step.DecodeStep(full, 1, 16, compile="yes")


@pytest.mark.integration
def test_one_compiled_function_equals_its_plain_self():
    """torch.compile (Inductor, the CPU's C++ backend here, Triton on CUDA) of the fused residual add, RMSNorm
    and FP8 quantization gives the plain function's values (about 20 s to compile on two cores)."""
    g = torch.Generator().manual_seed(0)
    h, a, b = (torch.randn(3, 256, generator=g).bfloat16() for _ in range(3))
    w = torch.rand(256, generator=g).bfloat16()
    c = fz.compiled(fz.add_rmsnorm, True)
    got = c(h, a, b, w, 1e-5, True)
    ref = fz.add_rmsnorm(h, a, b, w, 1e-5, True)
    # Inductor keeps the sum of the three in float32 where the plain function rounds a + b to bf16 first:
    # the two differ by bf16 rounding (relative L2 about 2e-3), not more
    rel = lambda x, y: float((x.float() - y.float()).norm() / y.float().norm())  # noqa: E731
    assert rel(got[0], ref[0]) < 5e-3 and rel(got[1], ref[1]) < 5e-3
    assert torch.allclose(got[2][1], ref[2][1], rtol=2e-2)
    assert any(r["function"] == "add_rmsnorm" for r in fz.COMPILE_LOG)


def test_every_compiled_function_names_its_varying_sizes():
    """Each function the fused program hands to the compiler has a VARYING entry naming parameters it takes
    (compiled() refuses one without: a new function cannot silently compile with every size static, nor name
    a parameter it lost)."""
    import ast
    import inspect

    from helpers.model.step import program_fused

    used = {n.attr for n in ast.walk(ast.parse(inspect.getsource(program_fused)))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "fz"
            and callable(getattr(fz, n.attr, None)) and n.attr not in ("compiled", "route_triton", "route_triton_ok")}
    assert used and used <= set(fz.VARYING), used - set(fz.VARYING)
    for name in fz.VARYING:
        assert fz.varying_positions(getattr(fz, name))
    with pytest.raises(KeyError, match="no entry in VARYING"):
        fz.compiled(fz._rms, True)


@pytest.mark.integration
def test_only_the_batch_is_symbolic_and_other_widths_get_graphs_of_their_own():
    """Dynamo (the eager backend: the graphs, not the kernels) on the fused norm as compiled() sets it up:
    batch 1 a graph of its own, every larger batch one symbolic graph, and another hidden width a third graph
    beside them, never one that replaces the first (what made the first call differ, issue 34), while the
    widths stay constants (all sizes symbolic cost 6-11 % of the step on the H200, issue 48)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    c = fz._Timed(torch.compile(fz.add_rmsnorm, backend="eager", dynamic=False, fullgraph=True), fz.add_rmsnorm)
    shapes = []
    for b, width in ((1, 64), (2, 64), (8, 64), (64, 64), (3, 32), (5, 64), (7, 32)):
        h = torch.randn(b, width)
        c(h, h, None, torch.ones(width), 1e-5, False)
        shapes.append(counters["stats"]["unique_graphs"])
    assert shapes == [1, 2, 2, 2, 3, 3, 3], shapes
    torch._dynamo.reset()


def test_the_kernel_tiles_follow_the_h200_sweep():
    """moe_triton.config at GLM-5's TP8 per-rank shapes takes what benchmarks/tune_moe.py measured fastest on
    the H200: two pipeline stages for the experts' down product (K 256: one or two trips of the K loop), four
    for the long K of gate/up, K split where batch 1's few experts leave SMs idle, and no FP8 dense product
    narrower than 32 columns. (Pure arithmetic: no GPU.)"""
    from helpers.model import moe_triton as mt
    for fp8_ in (False, True):
        for rows in (8, 512):                               # batch 1 and 64, top-8
            n, _, split, _, stages = mt.config(rows, 256, 6144, 256, fp8_)
            assert stages == 2 and split == 1, (fp8_, rows)
        n, _, split, _, stages = mt.config(8, 256, 512, 6144, fp8_)
        assert stages == 4 and split == 2 and n == 32
    for k, n_out in ((6144, 2752), (8192, 6144), (256, 6144), (2048, 2048)):
        assert mt.config(1, 1, n_out, k, True)[0] >= 32
    # a product its consumer takes whole (q_b: K 2048, FP8) is not split, and its K loop of 8 trips keeps
    # four stages (in study c the stages followed a split of 4 that was not taken: q_b ran 1.6x bf16's time)
    n, bk, split, _, stages = mt.config(1, 1, 2048, 2048, True, split_ok=False)
    assert split == 1 and stages == 4 and 2048 // bk > 2
    assert mt.config(1, 1, 2048, 2048, True)[2] > 1              # where the consumer adds partial sums


def test_index_scores_add_the_split_products_partial_sums():
    """fused.indexer_scores takes the weights_proj product either whole (B, H) or as float32 partial sums
    over split K (S, B, H), which it adds; compiled, the sum sits in the scores' own kernel."""
    g = torch.Generator().manual_seed(1)
    iq, keys = torch.randn(2, 4, 16, generator=g).bfloat16(), torch.randn(2, 10, 16, generator=g).bfloat16()
    parts = torch.randn(4, 2, 4, generator=g)
    want = fz.indexer_scores(iq, keys, parts.sum(0).bfloat16())
    assert torch.equal(fz.indexer_scores(iq, keys, parts), want)
    assert not torch.equal(fz.indexer_scores(iq, keys, parts[:3]), want)     # every partial sum counts


@pytest.mark.gpu
def test_gpu_fused_step_compiles_and_matches_and_the_router_kernel_is_right():
    if not torch.cuda.is_available():
        pytest.skip("no GPU: no CUDA device")
    m = ma.load_model(MINI)
    full = step.to_device(step.build_full(m, 4, 64, "bf16"), "cuda")
    ref, got = _pair(full, 4, 64)
    assert step.compare_logits(ref, got, TOLERANCE["bf16"], metric="l2").ok
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(64, 256, device="cuda", generator=g).bfloat16()
    bias = torch.randn(256, device="cuda", generator=g) * 0.1
    w1, i1 = fz.route(logits, bias, 8, 2.5, torch.bfloat16)
    w2, i2 = fz.route_triton(logits, bias, 8, 2.5, torch.bfloat16)
    assert torch.equal(i1.sort(-1).values, i2.sort(-1).values)
    assert torch.allclose(w1.float().sort(-1).values, w2.float().sort(-1).values, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 5, 64, 300])
def test_gpu_triton_moe_kernels_match_torchs_grouped_products(batch):
    """helpers.model.moe_triton against torch's own products on the same rows: bf16 against
    torch._grouped_mm, FP8 against the same E4M3 values and scales multiplied in float32 (what
    torch._scaled_grouped_mm computes), with experts that get no rows and (at 300 tokens) experts with more
    rows than one BLOCK_M; a dense FP8 product against fp8.emulated_linear; and the fused step on the GPU
    takes the kernel by default and gives the unfused step's logits in FP8 as well."""
    from helpers.model import fp8, moe_triton
    if not torch.cuda.is_available():
        pytest.skip("no GPU: no CUDA device")
    assert moe_triton.available("cuda"), "a CUDA host without Triton: the fused step's MoE kernel cannot run"
    g = torch.Generator(device="cuda").manual_seed(batch)
    E, K, N, k = 64, 1024, 384, 8
    # the last four experts never chosen: their programs must return without writing
    ids = torch.stack([torch.randperm(E - 4, device="cuda", generator=g)[:k] for _ in range(batch)])
    counts = torch.bincount(ids.reshape(-1), minlength=E)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    assert (counts[-4:] == 0).all() and (batch < 300 or counts.max() > moe_triton.BLOCK_M)
    x = torch.randn(batch * k, K, device="cuda", generator=g).bfloat16()
    w = (torch.randn(E, K, N, device="cuda", generator=g) * 0.05).bfloat16()
    ref = torch._grouped_mm(x, w, offs=offs).float()

    def rel(got, want):
        return ((got.float() - want.float()).norm() / want.float().norm()).item()
    assert rel(moe_triton.moe_gemm(x, w, offs), ref) < 1e-2
    part = moe_triton.moe_gemm(x, w, offs, split=True)         # K split where few experts have rows
    assert rel(part.sum(0) if part.dim() == 3 else part, ref) < 1e-2
    xq, xs = fp8.quantize_rows(x)
    qw = fp8.quantize(w, "w")
    bounds = list(zip([0] + offs[:-1].tolist(), offs.tolist()))
    ref8 = torch.cat([fp8.emulated_linear(xq[a:b], xs[a:b], fp8.QWeight(qw.q[e], qw.scale[e]), torch.float32)
                      for e, (a, b) in enumerate(bounds)])
    assert rel(moe_triton.moe_gemm_fp8(xq, xs, qw, offs), ref8) < 1e-2
    part8 = moe_triton.moe_gemm_fp8(xq, xs, qw, offs, split=True)
    assert rel(part8.sum(0) if part8.dim() == 3 else part8, ref8) < 1e-2
    d = fp8.quantize((torch.randn(K, N, device="cuda", generator=g) * 0.05).bfloat16(), "d")
    dref = fp8.emulated_linear(xq[:batch], xs[:batch], d, torch.float32)
    assert rel(moe_triton.linear_fp8(xq[:batch], xs[:batch], d), dref) < 1e-2
    dpart = moe_triton.linear_fp8(xq[:batch], xs[:batch], d, split=True)
    assert rel(dpart.sum(0) if dpart.dim() == 3 else dpart, dref) < 1e-2
    # the dense bf16 product of few rows (the FP8 step's weights_proj: K 6144, 32 columns), split over K
    wp = (torch.randn(6144, 32, device="cuda", generator=g) * 0.05).bfloat16()
    xp = torch.randn(batch, 6144, device="cuda", generator=g).bfloat16()
    pref = xp.float() @ wp.float()
    assert rel(moe_triton.linear(xp, wp), pref) < 1e-2
    ppart = moe_triton.linear(xp, wp, split=True)
    assert ppart.dim() == 3 and ppart.shape[0] > 1 and rel(ppart.sum(0), pref) < 1e-2
    if batch == 5:
        # the whole FP8 step with the kernels against the fp32 step on the CPU from the same weights and
        # routing, at the FP8 step's tolerance (as tests/test_fp8.py checks torch's FP8 products); the
        # unfused FP8 step (torch's products) beside it, at the same tolerance
        m = ma.load_model(MINI)
        routing: list = []
        ref = step.unsharded_logits(m, 4, 64, routing=routing)
        full = step.to_device(step.convert_model(step.build_full(m, 4, 64, "fp32"), "fp8"), "cuda")
        for fusion, overlap in (("fused", "off"), ("unfused", "off"), ("fused", "on")):
            st = step.DecodeStep(full, 4, 64, fusion=fusion, shared_overlap=overlap)
            assert st.moe_impl == ("triton" if fusion == "fused" else "grouped_mm")
            # with the overlap, the FP8 step's own weights_proj runs on the second stream (SGLang's indexer)
            if fusion == "fused":
                streams = {o.stream for o in st.ops if o.name == "indexer weights_proj"}
                assert streams == ({"alt"} if overlap == "on" else {"main"})
            st.forced_routing = [r.cuda() for r in routing]
            st.run()
            chk = step.compare_logits(ref, st.logits().float().cpu(), step.FP8_TOLERANCE, metric="l2")
            assert chk.ok, (fusion, chk)


def test_bad_inputs_are_refused_before_anything_is_allocated(mini, monkeypatch):
    """Each names the input and the fix; none gets as far as drawing a weight (a draw would call _fill)."""
    def no_alloc(*a, **k):
        raise AssertionError("allocated before refusing")
    monkeypatch.setattr(step.build, "_fill", no_alloc)      # build_full and build_rank draw through it
    glm5 = ma.load_model("glm5")
    cases = [
        (dict(m=mini, tp=2, dtype="int4", batch_max=1, context_max=16), step.StepError, "precision 'int4'"),
        (dict(m=glm5, tp=3, dtype="bf16", batch_max=1, context_max=16), ma.ModelError, "does not divide the 64"),
        (dict(m=glm5, tp=8, dtype="bf16", batch_max=1, context_max=300000), step.StepError,
         "beyond GLM-5.*202752.*max_position_embeddings"),
        (dict(m=glm5, tp=1, dtype="bf16", batch_max=64, context_max=8192), step.StepMemoryError,
         "needs at least .* GiB per rank.*larger TP degree"),
    ]
    for kw, err, msg in cases:
        with pytest.raises(err, match=msg):
            step.build_rank(kw["m"], kw["tp"], 0, kw["batch_max"], kw["context_max"], "cpu", kw["dtype"],
                            plan=None if err is not step.StepMemoryError else
                            step.plan_memory(kw["m"], kw["tp"], kw["dtype"], kw["batch_max"], kw["context_max"],
                                             10 * 2**30))
    from helpers.model import steptime
    with pytest.raises(step.StepError, match="context = 999999"):
        steptime.sweep(steptime.SweepConfig(model=MINI, tp=2, batches=(1,), contexts=(999999,), modes=("eager",),
                                            device="cpu"))


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.integration
def test_the_fused_step_runs_no_more_ops_a_layer_than_the_op_list_for_sglang(mini, precision):
    """Ops that launch work, per layer kind, against the budget's op list for SGLang less its collectives
    (helpers.model.budget; one kernel per listed op, assumed). The kernels each op launches are counted from
    the CUDA graph on a GPU (device-step-fused.sh); this bounds what the op list itself contributes."""
    from helpers.model import budget as bd

    rm = step.convert_model(step.build_full(mini, 2, 32, "fp32"), precision)
    st = step.DecodeStep(rm, 2, 32, fusion="fused")
    n = {c: 0 for c in ("attention", "indexer", "moe", "shared/dense MLP", "norms and small ops", "lm_head")}
    for o in st.ops:
        if o.kind == "op" and o.component in n:
            n[o.component] += 1
    ops = sum(n.values())
    coll = ("all-reduce", "embedding all-reduce", "logits all-gather")
    listed = sum(len([o for o in ops_ if o not in coll]) * k for ops_, k in (
        (bd.ATTENTION_OPS, mini.layers), (bd.INDEXER_OPS, mini.layers), (bd.DENSE_MLP_OPS, mini.dense_layers),
        (bd.MOE_OPS, mini.moe_layers), (bd.HEAD_OPS, 1)))
    assert ops <= listed, (ops, listed, n)
    # and no op an engine fuses away is left as an op of its own
    names = set(st.op_names())
    assert not names & {"add shared", "residual (MLP)", "indexer rope", "top-k", "index scores"}
