"""The emulated decode step: sharding rules, the sharded step against the unsharded one over two real
gloo processes (and a wrong rule caught), memory planning, bytes per component, timing on the CPU."""
import math

import numpy as np
import pytest
import torch

from helpers.model import arith as ma
from helpers.model import step, steptime

MINI = "glm5-mini"


@pytest.fixture(scope="module")
def mini():
    return ma.load_model(MINI)


@pytest.fixture(scope="module")
def glm5():
    return ma.load_model("glm5")


def test_fused_split_keeps_gate_and_up_together():
    # [gate | up] fused along the last dim: each rank gets its slice of both, not one of them
    gate = torch.arange(8.0).reshape(1, 8)
    up = 100 + torch.arange(8.0).reshape(1, 8)
    full = torch.cat([gate, up], 1)
    r0 = step.shard_tensor(full, ("fused", 1, 2), 2, 0)
    r1 = step.shard_tensor(full, ("fused", 1, 2), 2, 1)
    assert r0.tolist() == [[0, 1, 2, 3, 100, 101, 102, 103]]
    assert r1.tolist() == [[4, 5, 6, 7, 104, 105, 106, 107]]
    assert step.shard_tensor(full, None, 2, 1) is full


def test_local_shapes_at_tp8_follow_the_deployment(glm5):
    specs = {s.name: s for s in step.attention_specs(glm5) + step.mlp_specs(glm5, False) + step.head_specs(glm5)}
    assert step.local_shape(specs["qkv_a"], 8) == (6144, 2048 + 512 + 64)        # replicated
    assert step.local_shape(specs["q_b"], 8) == (2048, 8 * 256)                   # 8 heads a rank
    assert step.local_shape(specs["o_proj"], 8) == (8 * 256, 6144)                # row-parallel
    assert step.local_shape(specs["w13"], 8) == (256, 6144, 2 * 256)             # intermediate / 8
    assert step.local_shape(specs["lm_head"], 8) == (6144, 154880 // 8)
    assert step.local_shape(specs["router"], 8) == (6144, 256)                    # replicated


@pytest.mark.integration
def test_bad_tp_is_refused(mini):
    with pytest.raises(ma.ModelError, match="does not divide"):
        step.shard_sizes(mini, 3)
    full = step.build_full(mini, 2, 16, moe_held=1)
    with pytest.raises(step.StepError, match="rank 2 is not in 0..1"):
        step.shard_model(full, 2, 2)


@pytest.mark.integration
def test_one_rank_equals_the_unsharded_step(mini):
    full = step.build_full(mini, 3, 40)
    a = step.DecodeStep(full, 3, 40)
    a.run()
    b = step.DecodeStep(step.shard_model(full, 1, 0), 3, 40)
    b.run()
    chk = step.compare_logits(a.logits(), b.logits())
    assert chk.max_abs_err == 0 and chk.ok


@pytest.mark.integration
def test_sharded_over_two_gloo_processes_matches_and_a_wrong_split_does_not(mini):
    """The claim that matters: two real processes over gloo, each with its shard and the all-reduces
    and the logits all-gather in the step, give the unsharded logits within FP32_TOLERANCE; splitting the
    fused gate_up weights as one block (a classic sharding bug) is caught by the same comparison."""
    ref = step.unsharded_logits(mini, 4, 60)
    out = step.run_sharded(MINI, 2, 4, 60, variants=[("right", None), ("naive gate_up", step.NAIVE_GATE_UP)])
    right = step.compare_logits(ref, out["right"])
    assert right.ok, right
    assert right.rel_err <= step.FP32_TOLERANCE
    bad = step.compare_logits(ref, out["naive gate_up"])
    assert not bad.ok and bad.rel_err > 100 * step.FP32_TOLERANCE


def test_comparison_flags_a_perturbed_shard_and_a_shape_mismatch():
    ref = torch.randn(4, 32)
    got = ref.clone()
    got[:, 16:] = got[:, 16:].roll(1, 0)        # rank 1's logits from the wrong sequences
    assert not step.compare_logits(ref, got).ok
    assert step.compare_logits(ref, ref + 1e-7).ok
    with pytest.raises(step.StepError, match="shapes differ"):
        step.compare_logits(ref, ref[:, :16])
    nan = ref.clone()
    nan[0, 0] = float("nan")
    assert not step.compare_logits(ref, nan).ok


def test_memory_plan_holds_what_fits_and_names_what_it_needs(glm5):
    big = step.plan_memory(glm5, 8, "bf16", 64, 8192, free_bytes=140 * ma.GiB)
    assert 1 <= big.moe_held < glm5.moe_layers
    assert big.needed_bytes <= big.available_bytes
    small = step.plan_memory(glm5, 8, "bf16", 64, 8192, free_bytes=40 * ma.GiB)
    assert small.moe_held < big.moe_held
    with pytest.raises(step.StepMemoryError) as e:
        step.plan_memory(glm5, 8, "bf16", 64, 8192, free_bytes=8 * ma.GiB)
    msg = str(e.value)
    assert "GLM-5-NVFP4 at TP8" in msg and "GiB" in msg and "batch 64 x 8192" in msg
    assert step.positions(glm5, 3, 4)[:9] == [0, 1, 2, 3, 4, 5, 6, 3, 4]


def test_checkpoint_bytes_agree_with_the_model_arithmetic(glm5):
    """component_bytes (one rank, checkpoint formats) against helpers.model.arith's per-GPU weight reads:
    the same model file, two codes."""
    for b in (1, 64):
        e = ma.expected_distinct_experts(glm5, b)
        cb = step.component_bytes(glm5, 8, b, 384, e)
        w = ma.step_weight_bytes(glm5, b)
        per_gpu = float(sum(r.read_bytes / (8 if r.tp_placement == "sharded" else 1) for r in w.itertuples()))
        kv = 78 * b * 384 * (512 + 64 + 128) * 2
        ours = float(cb.bytes_checkpoint.sum()) - kv
        assert math.isclose(ours, per_gpu, rel_tol=0.01), (b, ours, per_gpu)
    assert (cb.bytes_emulated >= cb.bytes_checkpoint).all()


@pytest.mark.integration
def test_distinct_experts_are_counted_from_the_routing(mini):
    full = step.build_full(mini, 8, 32)
    st = step.DecodeStep(full, 8, 32)
    st.record_routing = True
    st.run()
    d = st.distinct_experts()
    assert mini.top_k <= d <= mini.n_routed
    assert len(st.routing) == mini.moe_layers


@pytest.mark.integration
def test_components_alone_and_unknown_ones(mini):
    full = step.build_full(mini, 2, 32, "bf16")
    st = step.DecodeStep(full, 2, 32)
    st.run()
    assert set(st.components_present()) == set(step.COMPONENTS) - {"collectives"}
    st.run(["moe"])
    with pytest.raises(step.StepError, match="unknown components"):
        st.run(["experts"])
    with pytest.raises(step.StepError, match="exceeds"):
        step.DecodeStep(full, 4, 32)


@pytest.mark.integration
def test_loop_fallback_equals_grouped_mm(mini):
    full = step.build_full(mini, 4, 32)
    a = step.DecodeStep(full, 4, 32)
    a.run()
    la = a.logits().clone()
    b = step.DecodeStep(full, 4, 32, moe_impl="loop")
    b.run()
    assert step.compare_logits(la, b.logits()).ok


@pytest.mark.integration
def test_cpu_sweep_times_every_point_and_resumes(tmp_path):
    cfg = steptime.SweepConfig(model=MINI, tp=2, batches=(1, 2), contexts=(32,), modes=("eager",), device="cpu",
                               repeats=2, eager_repeats=2, time_limit_s=30)
    lines = []
    res = steptime.sweep(cfg, tmp_path, progress=lines.append)
    t = res.timings
    assert set(t.columns) == set(steptime.TIMING_COLUMNS)
    steps = t[t.what == "step"]
    assert sorted(steps.batch) == [1, 2] and (steps.median_us > 0).all()
    assert {"moe", "attention"} <= set(t.what)
    assert any("[2/2]" in s for s in lines)
    again = steptime.sweep(cfg, tmp_path, progress=lines.append)
    assert any("done before, skipped" in s for s in lines)
    assert len(again.timings) == len(t)
    assert (tmp_path / "meta.json").exists() and (tmp_path / "bytes.csv").exists()
    assert "kernels_tuned_at_batch" not in res.meta      # uncompiled on the CPU: no kernel to tune


@pytest.mark.integration
def test_time_limit_stops_a_point(mini):
    full = step.build_full(mini, 1, 16, "bf16")
    st = step.DecodeStep(full, 1, 16)
    with pytest.raises(steptime.TimeLimit, match="limit"):
        steptime.time_point(st, graphs=False, repeats=2, warmup=1, components=True, time_limit_s=1e-9)


@pytest.mark.gpu
def test_gpu_graph_and_eager_agree_and_components_are_timed():
    if not torch.cuda.is_available():
        pytest.skip("no GPU: no CUDA device")
    cfg = steptime.SweepConfig(model=MINI, tp=2, batches=(1, 4), contexts=(64,), device="cuda", repeats=3,
                               eager_repeats=2, time_limit_s=60)
    res = steptime.sweep(cfg)
    t = res.timings
    assert set(t["mode"]) == {"graph", "eager"}
    g = t[(t.what == "step") & (t["mode"] == "graph")]
    assert (g.kernels.fillna(1) > 0).all()
    # compiled on CUDA: the symbolic-batch kernels were tuned at the largest batch, before the sweep met 2
    assert res.meta["kernels_tuned_at_batch"] == 4 and "4x64 dense (kernels tuned)" in res.meta["first_step_s"]


@pytest.mark.integration
def test_torchrun_two_ranks_time_the_step_with_its_collectives(tmp_path):
    """bench_step.py under torchrun: one process per rank, gloo on the CPU, the all-reduces and the logits
    all-gather timed inside the step; rank 0 writes the results."""
    import subprocess
    import sys

    import pandas as pd

    from helpers import repo_root

    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "benchmarks/bench_step.py", "--device", "cpu", "--batches", "2", "--contexts", "32",
                           "--repeats", "2", "--eager-repeats", "2", "--out", str(tmp_path)],
                          cwd=repo_root(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    t = pd.read_csv(tmp_path / "timings.csv")
    assert (t["tp"] == 2).all() and "collectives" in set(t["what"])
    assert (t.loc[t["what"] == "collectives", "median_us"] > 0).all()


@pytest.mark.integration
def test_shared_overlap_is_cuda_only_and_off_on_a_cpu(mini):
    full = step.build_full(mini, 2, 32, "bf16")
    assert not step.DecodeStep(full, 2, 32).overlap                       # auto: off on a CPU
    with pytest.raises(step.StepError, match="second CUDA stream.*use 'auto' or 'off'"):
        step.DecodeStep(full, 2, 32, shared_overlap="on")
    with pytest.raises(step.StepError, match="shared_overlap 'sometimes'"):
        step.DecodeStep(full, 2, 32, shared_overlap="sometimes")
    st = step.DecodeStep(full, 2, 32, shared_overlap="off")
    assert all(o.stream == "main" and o.kind == "op" for o in st.ops)


@pytest.mark.gpu
def test_gpu_shared_overlap_forks_and_joins_inside_a_graph_and_changes_no_logit():
    """The shared expert on the current stream and the routed experts on a second one (SGLang's
    forward_normal_dual_stream): the same logits as one stream, eagerly and replayed from a CUDA graph,
    and each component alone (the MoE block with its fork and join) still captures."""
    if not torch.cuda.is_available():
        pytest.skip("no GPU: no CUDA device")
    full = step.to_device(step.build_full(ma.load_model(MINI), 4, 64, "bf16"), "cuda")
    serial = step.DecodeStep(full, 4, 64, shared_overlap="off")
    serial.record_routing = True
    serial.run()
    want = serial.logits().float().cpu().clone()
    st = step.DecodeStep(full, 4, 64)
    st.forced_routing = [r.clone() for r in serial.routing]   # index_add_ on CUDA adds in any order
    assert st.overlap and any(o.kind == "fork" for o in st.ops) and any(o.stream == "alt" for o in st.ops)
    st.run()
    torch.cuda.synchronize()
    assert step.compare_logits(want, st.logits().float().cpu(), 0.02, metric="l2").ok
    g = steptime.capture(st.run)
    g.replay()
    torch.cuda.synchronize()
    assert step.compare_logits(want, st.logits().float().cpu(), 0.02, metric="l2").ok
    rows = steptime.time_point(st, graphs=True, repeats=2, warmup=1, components=True)
    assert {r["what"] for r in rows} >= {"step", "moe", "shared/dense MLP"} and all(r["overlap"] for r in rows)


@pytest.mark.integration
def test_an_interrupted_sweep_keeps_its_finished_points_bytes_and_meta(tmp_path, monkeypatch):
    """A device script stops a sweep with SIGINT when its time is up: what finished stays on disk."""
    import json

    real, calls = steptime.time_point, []

    def stop_at_second(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(steptime, "time_point", stop_at_second)
    cfg = steptime.SweepConfig(model=MINI, tp=2, batches=(1, 2), contexts=(32,), modes=("eager",), device="cpu",
                               repeats=1, eager_repeats=1, op_level=())
    with pytest.raises(KeyboardInterrupt):
        steptime.sweep(cfg, tmp_path, progress=lambda s: None)
    import pandas as pd
    assert set(pd.read_csv(tmp_path / "timings.csv")["batch"]) == {1}
    assert len(pd.read_csv(tmp_path / "bytes.csv")) > 0
    assert json.loads((tmp_path / "meta.json").read_text())["finished"] is False
