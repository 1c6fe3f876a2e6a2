"""The decode-step budget on synthetic inputs with known answers, reproducibility from a run
directory, and clear errors on bad inputs."""
import math

import pandas as pd
import pytest

from helpers.core import layout

from helpers.model import budget as bd, arith as ma

from test_modelarith import TINY


@pytest.fixture
def tiny():
    return ma.ModelConfig.from_dict("tiny", TINY)


def q(name, value, unit="us", kind="assumed"):
    return bd.Quantity(name, value, unit, kind, "test")


def flat(alpha, collective=False):
    return bd.Link("flat", alpha, math.inf, "assumed", "test", collective=collective)


def test_collective_mappings_by_hand():
    lat = flat(10.0)
    assert bd.collective_time_us(lat, "all_reduce", 8000, 8, "ring") == pytest.approx(14 * 10)
    assert bd.collective_time_us(lat, "all_reduce", 8000, 8, "tree") == pytest.approx(6 * 10)
    assert bd.collective_time_us(lat, "all_reduce", 8000, 8, "one_shot") == pytest.approx(10)
    bw = bd.Link("bw", 10.0, 1.0, "assumed", "test")        # 1 GB/s = 1000 bytes per us
    assert bd.collective_time_us(bw, "all_reduce", 8000, 8, "ring") == pytest.approx(14 * (10 + 1))
    assert bd.collective_time_us(bw, "all_reduce", 8000, 8, "one_shot") == pytest.approx(10 + 7 * 8)
    assert bd.collective_time_us(bw, "all_gather", 8000, 8, "ring") == pytest.approx(7 * 11)
    assert bd.collective_time_us(bw, "all_reduce", 8000, 1, "ring") == 0.0
    # a fit of the collective itself is used as is
    assert bd.collective_time_us(flat(24.0, collective=True), "all_reduce", 8000, 8, "ring") == 24.0


def tiny_scenario(**kw):
    base = dict(name="synthetic", mem_bw=q("bw", 0.001, "GB/s"), link=flat(10.0),
                launch_graph=q("graph", 1.0), launch_eager=q("eager", 3.0), context=q("ctx", 5, "tokens"),
                tp=2)
    base.update(kw)
    return bd.Scenario(**base)


def test_step_terms_known_answer(tiny):
    t = bd.step_terms(tiny, tiny_scenario(), 1)
    # bytes per GPU at batch 1, TP2 (bf16 except routed nvfp4):
    #   replicated: latent attention + indexer 2 x 160 x 2 B = 640; norms (2 x 32 + 8) x 2 B = 144;
    #   router 32 x 2 B = 64                                                   -> 848
    #   sharded / 2: head-split attention 2 x 96 x 2 B = 384, dense 288, shared 96,
    #   routed 2 of 4 experts (192 x 0.5625 + 96) / 2 = 102, one embedding row 16, lm head 160 -> 523
    #   KV: 152 bytes                                                           -> 1523 bytes
    assert t["bytes_per_gpu"] == pytest.approx(1523)
    assert t["memory_us"] == pytest.approx(1523)              # 0.001 GB/s = 1 byte per us
    # kernels: dense layer 21 + 4, MoE layer 21 + 13, head 6 = 65, at 1 us with graphs
    assert t["launch_us"] == pytest.approx(65)
    # 5 all-reduces (ring over 2 GPUs: 2 steps of 10 us) and 1 logits all-gather (1 step)
    assert t["comm_us"] == pytest.approx(5 * 20 + 10)
    assert t["total_us"] == pytest.approx(1523 + 65 + 110)
    p = bd.predict(tiny, tiny_scenario(), [1, 2])
    assert p.loc[0, "tok_s_per_stream"] == pytest.approx(1e6 / 1698)
    assert p.loc[1, "tok_s_aggregate"] == pytest.approx(2 * p.loc[1, "tok_s_per_stream"])
    shares = p[["share_memory", "share_launch", "share_comm"]].sum(axis=1)
    assert shares.tolist() == pytest.approx([1.0, 1.0])
    assert "weight + KV reads" in bd.verdict(p)
    off = bd.step_terms(tiny, tiny_scenario(cuda_graphs=False), 1)
    assert off["launch_us"] == pytest.approx(65 * 3)


def test_verdict_names_collectives_when_they_dominate(tiny):
    p = bd.predict(tiny, tiny_scenario(mem_bw=q("bw", 1000.0, "GB/s"), link=flat(1000.0)), [1, 4])
    assert bd.verdict(p).count("collectives") == 1 and "still" in bd.verdict(p)


def test_bad_inputs(tiny):
    with pytest.raises(bd.BudgetError, match="batch"):
        bd.step_terms(tiny, tiny_scenario(), 0)
    with pytest.raises(bd.BudgetError, match="algorithm"):
        bd.collective_time_us(flat(1.0), "all_reduce", 10, 8, "butterfly")
    with pytest.raises(ma.ModelError, match="heads"):
        bd.step_terms(tiny, tiny_scenario(tp=4), 1)
    with pytest.raises(bd.BudgetError, match="pp"):
        bd.step_terms(tiny, tiny_scenario(pp=3, tp=1), 1)
    with pytest.raises(bd.BudgetError, match="kind"):
        bd.Quantity("x", 1.0, "us", "guessed", "test")
    with pytest.raises(bd.BudgetError, match="positive"):
        bd.Quantity("x", 0.0, "us", "assumed", "test")


FITS = """scope,path,harness,variant,backend,world_size,device,alpha_us,beta_GBps,median_rel_err,max_rel_err,n_points,min_bytes,max_bytes,kind,method
copy,gpu0_to_gpu1,eager,n/a,cuda,2,recorded,13.0,28.6,0.01,0.02,4,12288,786432,derived: fit to recorded,eager
collective,all_reduce,eager,default,gloo,2,2 CPU processes,{gloo},2.0,0.05,0.1,8,64,4194304,measured,eager
collective,all_reduce,eager,default,nccl,2,2x GPU,{nccl},50.0,0.05,0.1,8,64,4194304,measured,eager
"""


def make_run(tmp_path, gloo=80.0, nccl=30.0):
    d = tmp_path / "run" / "results" / "06_vm_p2p"
    d.mkdir(parents=True, exist_ok=True)
    (d / "fits.csv").write_text(FITS.format(gloo=gloo, nccl=nccl))
    return tmp_path / "run"


def test_prediction_reproducible_from_run_dir(tmp_path):
    run = make_run(tmp_path)
    a = bd.predict_from_run(run)
    b = bd.predict_from_run(run)
    pd.testing.assert_frame_equal(a, b)
    mine = a[a.scenario == "this run's measured link"]
    assert len(mine) and mine.link.iloc[0].startswith("this run: all_reduce")
    assert "nccl" in bd.select_run_link(bd.read_fits(run)).source       # NCCL preferred over gloo
    # a different measurement changes that scenario, and only that one
    run2 = make_run(tmp_path / "other", nccl=300.0)
    c = bd.predict_from_run(run2)
    base = a.scenario == bd.VM_SCENARIO
    pd.testing.assert_frame_equal(a[base].reset_index(drop=True), c[c.scenario == bd.VM_SCENARIO].reset_index(drop=True))
    assert (c[c.scenario == "this run's measured link"].total_ms.to_numpy() > mine.total_ms.to_numpy()).all()


def test_run_without_fits(tmp_path):
    (tmp_path / "empty").mkdir()
    t = bd.predict_from_run(tmp_path / "empty")
    assert "this run's measured link" not in set(t.scenario)
    assert {bd.VM_SCENARIO, bd.BAREMETAL_SCENARIO} <= set(t.scenario)


def test_run_dir_errors(tmp_path):
    with pytest.raises(bd.BudgetError, match="does not exist"):
        bd.predict_from_run(tmp_path / "missing")
    with pytest.raises(bd.BudgetError, match="empty"):
        bd.predict_from_run("")
    (tmp_path / "r").mkdir()
    with pytest.raises(ma.ModelError, match="unknown model"):
        bd.predict_from_run(tmp_path / "r", model="nope")
    d = tmp_path / "bad" / "results" / "06_vm_p2p"
    d.mkdir(parents=True)
    (d / "fits.csv").write_text("path,alpha_us\nx,1\n")
    with pytest.raises(layout.LayoutError, match="lacks its declared columns"):
        bd.predict_from_run(tmp_path / "bad")


def test_compare_and_ranking(tmp_path):
    (tmp_path / "r").mkdir()
    t = bd.predict_from_run(tmp_path / "r")
    c = bd.compare(t)
    assert set(c.system) == {"original VM", "bare metal (reference)"}
    assert set(c.concurrency) == {1, 64}
    # the observed step time is concurrency / observed tok/s
    r = c.iloc[0]
    assert r.observed_step_ms == pytest.approx(r.concurrency / r.observed_tok_s * 1e3)
    rk = bd.rank_next_steps(t, {"what-if: 4 GPUs TP4 (VM)": False})
    assert list(rk["rank"]) == list(range(1, len(rk) + 1))
    assert (rk.loc[rk.modelled_as == "what-if: 4 GPUs TP4 (VM)", "gain_batch1"] == 0).all()
    assert rk.gain_batch1.dropna().is_monotonic_decreasing


def test_run_link_prefers_the_graph_harness_fit(tmp_path):
    # a run with the default all-reduce timed both ways: the decode step runs in CUDA graphs, so the
    # graph fit (no per-call host cost) is the link, whatever the two fits' errors; chosen by the harness
    # field (the label is not parsed) and named by its method label
    text = FITS.format(gloo=80.0, nccl=44.0) + \
        "collective,all_reduce,graph,default,nccl,2,2x GPU,9.0,30.0,0.3,0.5,8,64,4194304,measured," \
        "graph+host_timer+aligned_300us+libnccl\n"
    d = tmp_path / "run" / "results" / "06_vm_p2p"
    d.mkdir(parents=True)
    (d / "fits.csv").write_text(text)
    link = bd.select_run_link(bd.read_fits(tmp_path / "run"))
    assert link.alpha_us == 9.0 and "method=graph+host_timer+aligned_300us+libnccl" in link.source
    # an all-to-all fit is not an all-reduce, whatever its other fields say
    a2a = text.replace("collective,all_reduce,graph", "collective,all_to_all,graph")
    (d / "fits.csv").write_text(a2a)
    assert bd.select_run_link(bd.read_fits(tmp_path / "run")).alpha_us == 44.0


def test_predict_all_without_fits_is_the_recorded_prediction(tmp_path):
    (tmp_path / "r").mkdir()
    m = ma.load_model("glm5")
    pd.testing.assert_frame_equal(bd.predict_all(m, None), bd.predict_from_run(tmp_path / "r"))
    with_run = bd.predict_all(m, bd.read_fits(make_run(tmp_path)))
    assert bd.RUN_SCENARIO in set(with_run.scenario) and bd.RUN_SCENARIO not in set(bd.predict_all(m).scenario)


def test_a_next_step_no_keyword_matches_fails_naming_it(tmp_path, monkeypatch):
    from helpers.core import recorded
    real = recorded.load
    steps = real("recorded/next_steps.csv").replace({"step": {"Try TP4+PP2": "Try two pipeline stages"}})
    monkeypatch.setattr(recorded, "load", lambda name: steps if name == "recorded/next_steps.csv" else real(name))
    with pytest.raises(bd.BudgetError, match="step 7 \\('Try two pipeline stages'\\) contains none of the keywords"):
        bd.rank_next_steps(bd.predict_all(ma.load_model("glm5")))


def test_a_one_gpu_all_reduce_or_a_copy_within_one_gpu_is_no_link(tmp_path):
    """Reader review, defect 4: a one-GPU run once predicted GLM-5 from a one-rank NCCL "all-reduce" (which
    moves nothing between GPUs). Such a fit, a gloo all-reduce between CPU processes and a copy within one GPU
    are not links; nor is, since issue 44, a one-GPU copy through host memory (it returns to the GPU it left, so
    it joins no two GPUs): a one-GPU run has no run link. A host-memory copy between two GPUs is one."""
    head = FITS.splitlines()[0] + "\n"
    one_gpu = head + (
        "collective,all_reduce,graph,default,nccl,1,1x GPU,16.0,19000.0,0.05,0.1,8,64,4194304,measured,graph\n"
        "collective,all_reduce,eager,default,gloo,2,2 CPU processes,200.0,2.4,0.05,0.1,8,64,4194304,measured,eager\n"
        "copy,same_device,graph,default,cuda,1,1x GPU,1.0,2600.0,0.05,0.1,8,64,4194304,measured,graph\n")
    d = tmp_path / "run" / "results" / "06_vm_p2p"
    d.mkdir(parents=True)
    (d / "fits.csv").write_text(one_gpu)
    assert bd.select_run_link(bd.read_fits(tmp_path / "run")) is None
    (d / "fits.csv").write_text(one_gpu + "copy,host_bounce,graph,default,cuda,1,1x GPU,8.1,26.4,0.05,0.1,8,64,"
                                "4194304,measured,graph\n")
    assert bd.select_run_link(bd.read_fits(tmp_path / "run")) is None
    (d / "fits.csv").write_text(one_gpu + "copy,host_bounce,graph,default,cuda,2,2x GPU,8.1,26.4,0.05,0.1,8,64,"
                                "4194304,measured,graph\n")
    link = bd.select_run_link(bd.read_fits(tmp_path / "run"))
    assert link.name == "this run: host_bounce (copy)" and not link.collective and link.alpha_us == 8.1
