"""Collective sweeps: nccl-tests arithmetic, bad requests, and real torchrun/gloo processes
(a 2-process sweep, a worker that hangs and is killed, a run that fails without stopping the next)."""
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from helpers.interconnect import collectives, launchlog, settings, suite as ic
from helpers.interconnect.collectives import CollectiveConfigError
from helpers.interconnect.method import Method, MethodError


# ---------------------------------------------------------------- arithmetic (nccl-tests PERFORMANCE.md)
@pytest.mark.parametrize("n,ar,a2a", [(1, 0.0, 0.0), (2, 1.0, 0.5), (4, 1.5, 0.75), (8, 1.75, 0.875)])
def test_bus_factors(n, ar, a2a):
    assert collectives.bus_factor("all_reduce", n) == pytest.approx(ar)
    assert collectives.bus_factor("all_to_all", n) == pytest.approx(a2a)


def test_algbw_and_busbw():
    # 1 GiB per rank in 10 ms: algbw = 2^30 / 1e-2 s = 107.37 GB/s; busbw on 8 ranks = x 7/4
    algbw = collectives.algbw_GBps(2**30, 10_000)
    assert algbw == pytest.approx(2**30 / 1e-2 / 1e9)
    assert collectives.busbw_GBps("all_reduce", 2**30, 10_000, 8) == pytest.approx(algbw * 2 * 7 / 8)
    assert collectives.busbw_GBps("all_to_all", 2**30, 10_000, 8) == pytest.approx(algbw * 7 / 8)


def test_bus_factor_bad_input():
    with pytest.raises(ValueError, match="world_size"):
        collectives.bus_factor("all_reduce", 0)
    with pytest.raises(ValueError, match="no bus-bandwidth factor"):
        collectives.bus_factor("gossip", 2)


def test_tidy_applies_the_arithmetic():
    r = collectives.RunResult("default", "nccl", 4, "ok", 0, 1.0, "", rows=[{
        "op": "all_reduce", "backend": "nccl", "variant": "default", "world_size": 4, "dtype": "float32",
        "count": 256, "size_bytes": 1024, "iters": 20, "repeats": 3, "warmup": 5, "times_us": [10.0, 12.0, 11.0],
        **Method().as_row(), "device": "GPU"}])
    t = collectives.tidy([r]).iloc[0]
    assert t.time_us == 11.0 and t.time_us_min == 10.0 and t.time_us_max == 12.0
    assert t.algbw_GBps == pytest.approx(1024 / 11e3)
    assert t.busbw_GBps == pytest.approx(1024 / 11e3 * 1.5)


# ---------------------------------------------------------------- bad requests
def test_unknown_backend():
    with pytest.raises(CollectiveConfigError, match="backend = 'mpi'"):
        collectives.run_collectives("mpi", 2, [64])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_nccl_without_a_gpu_is_unavailable():
    with pytest.raises(CollectiveConfigError, match="'nccl' is unavailable"):
        collectives.run_collectives("nccl", 2, [64])


def test_more_ranks_than_devices():
    n = os.cpu_count()
    with pytest.raises(CollectiveConfigError, match="more ranks than"):
        collectives.run_collectives("gloo", n + 1, [64])
    if torch.cuda.is_available():
        with pytest.raises(CollectiveConfigError, match="more ranks than"):
            collectives.run_collectives("nccl", torch.cuda.device_count() + 1, [64])


@pytest.mark.parametrize("sizes,msg", [([0], "not positive"), (["big"], "cannot be parsed"), ([], "empty")])
def test_bad_sizes(sizes, msg):
    with pytest.raises(ValueError, match=msg):
        collectives.run_collectives("gloo", 2, sizes)


def test_bad_ops_and_variants():
    with pytest.raises(CollectiveConfigError, match="ops"):
        collectives.run_collectives("gloo", 2, [64], ops=["broadcast_all"])
    with pytest.raises(CollectiveConfigError, match="must be a helpers.interconnect.method.Method"):
        collectives.run_collectives("gloo", 2, [64], method={"harness": "graph"})


def test_tidy_refuses_a_point_of_another_method():
    p = {"op": "all_reduce", "backend": "gloo", "variant": "default", "world_size": 2, "dtype": "float32",
         "count": 16, "size_bytes": 64, "iters": 2, "repeats": 1, "warmup": 1, "times_us": [3.0],
         **Method(timer="host").as_row(), "device": "cpu"}
    with pytest.raises(MethodError, match="not by the run's method 'eager'"):
        collectives.tidy([collectives.RunResult("default", "gloo", 2, "ok", 0, 1.0, "", rows=[p])])


def test_plans_by_machine():
    cpu = ic.plan_collectives(ic.Machine(0, "", 2, 0))
    assert cpu.runs == [("gloo", 2, "default", "CPU processes", ic.EAGER_METHOD)] and "no GPU" in cpu.statements[0]
    one = ic.plan_collectives(ic.Machine(1, "H200", 16, 0))
    assert [r[:3] for r in one.runs] == [("nccl", 1, "default"), ("gloo", 2, "default")]
    assert "one GPU" in one.statements[0] and "skipped" in one.statements[0]
    eight = ic.plan_collectives(ic.Machine(8, "GPU", 64, 56))
    assert {r[2] for r in eight.runs} == set(settings.VARIANTS) | {ic.REPEAT_VARIANT}
    assert all(r[1] == 8 for r in eight.runs)
    # the default once eager (the investigation's way), then every variant by the variant method
    assert eight.runs[0][2:] == ("default", "one process per GPU, eager", Method())
    assert [r[2] for r in eight.runs[1:]] == list(settings.VARIANTS) + [ic.REPEAT_VARIANT]
    assert all(r[4] == ic.VARIANT_METHOD for r in eight.runs[1:])
    some = ic.plan_collectives(ic.Machine(2, "GPU", 64, 2), variants="ALGO=Ring")
    assert [(r[2], r[4].harness) for r in some.runs] == \
        [("default", "eager"), ("default", "graph"), ("ALGO=Ring", "graph"), (ic.REPEAT_VARIANT, "graph")]
    none = ic.plan_collectives(ic.Machine(2, "GPU", 64, 2), variants="none")
    assert [(r[2], r[4]) for r in none.runs] == [("default", ic.EAGER_METHOD)]
    with pytest.raises(CollectiveConfigError, match="more ranks than the 2 GPUs"):
        ic.plan_collectives(ic.Machine(2, "GPU", 64, 2), world_size=4)
    with pytest.raises(CollectiveConfigError, match="unknown variant"):
        ic.plan_collectives(ic.Machine(2, "GPU", 64, 2), variants="warp")


def test_base_environment_always_disables_multicast():
    assert settings.BASE_ENV["NCCL_NVLS_ENABLE"] == "0"
    assert settings.BASE_ENV["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"


# ---------------------------------------------------------------- real processes (torchrun + gloo)
def _no_workers_left(marker: str) -> bool:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return not any("helpers.interconnect.worker" in line and marker in line for line in ps.splitlines())


@pytest.fixture(scope="module")
def failed_then_default(tmp_path_factory):
    """(a launch that fails, the default sweep launched right after it): gloo's processes look for a network
    interface that does not exist, then the default method sweeps two sizes across two processes. One launch of
    the default method serves the three tests that read it (the sweep itself, the launch after a failure, and the
    barrier start beside the aligned one): each launch starts torchrun and two workers, about 7 s of CPU."""
    wd = tmp_path_factory.mktemp("gloo")
    bad = collectives.run_collectives("gloo", 2, [64], iters=2, repeats=1, timeout_s=60, workdir=wd,
                                      env={"GLOO_SOCKET_IFNAME": "no-such-interface0"})
    good = collectives.run_collectives("gloo", 2, [64, 12288], warmup=1, iters=5, repeats=2, timeout_s=90,
                                       workdir=wd)
    return bad, good


@pytest.mark.timeout(180)
@pytest.mark.integration
def test_gloo_sweep_across_two_processes(failed_then_default):
    r = failed_then_default[1]
    assert r.status == "ok", r.message + r.log[-2000:]
    t = collectives.tidy([r])
    assert set(t.op) == set(collectives.OPS) and set(t.size_bytes) == {64, 12288}
    assert (t.world_size == 2).all() and (t.time_us > 0).all()
    ar = t[t.op == "all_reduce"]
    assert ar.busbw_GBps.to_numpy() == pytest.approx(ar.algbw_GBps.to_numpy())   # 2(n-1)/n = 1 at n = 2
    assert (t[t.op == "all_to_all"].placement == "out-of-place").all()


@pytest.mark.timeout(120)
@pytest.mark.integration
def test_a_hung_worker_is_killed_and_reported(tmp_path):
    r = collectives.run_collectives("gloo", 2, [64], warmup=1, iters=2, repeats=1, timeout_s=10, hang_rank=1,
                                    workdir=tmp_path, variant="hang-test")
    assert r.status == "timeout" and "killed" in r.message and r.wall_s < 40
    assert r.rows == []
    assert _no_workers_left("hang-test")


@pytest.mark.timeout(180)
@pytest.mark.integration
def test_a_failed_run_is_reported_and_the_next_still_runs(failed_then_default):
    bad, good = failed_then_default
    assert bad.status in ("failed", "timeout") and bad.message, (bad.status, bad.message)
    # the next launch, in the same folder right after the failure, ran every point: both ops at both sizes
    assert good.status == "ok" and len(good.rows) == len(collectives.OPS) * 2, (good.status, good.message, len(good.rows))


# ---------------------------------------------------------------- nccl-tests' timing method (fidelity options)
@pytest.mark.parametrize("kw,msg", [
    ({"harness": "replay"}, "harness = 'replay'"),
    ({"timer": "wallclock"}, "timer = 'wallclock'"),
    ({"placement": "sideways"}, "placement = 'sideways'"),
    ({"rotate_bytes": -1}, "rotate_bytes = -1"),
    ({"rotate_bytes": True}, "rotate_bytes = True"),
    ({"start": "whenever"}, "start = 'whenever'"),
])
def test_bad_timing_method(kw, msg):
    with pytest.raises(MethodError, match=msg):
        collectives.run_collectives("gloo", 2, [64], method=Method(**kw))


def test_a_method_the_backend_cannot_run_is_refused_before_launching():
    with pytest.raises(MethodError, match="harness = 'graph' needs CUDA graphs"):
        collectives.run_collectives("gloo", 2, [64], method=Method(harness="graph"))
    with pytest.raises(MethodError, match="measured by collectives.measure_direct"):
        collectives.run_collectives("gloo", 2, [64], method=Method.direct())


@pytest.mark.timeout(180)
@pytest.mark.integration
def test_aligned_start_runs_and_records_the_launch_skew(tmp_path, failed_then_default):
    # two gloo processes on this host: both record their launch instant on the shared monotonic clock
    m = Method(timer="host", start="aligned")
    r = collectives.run_collectives("gloo", 2, [64, 4096], ops=("all_reduce",), warmup=1, iters=4, repeats=3,
                                    timeout_s=90, workdir=tmp_path, method=m)
    assert r.status == "ok", r.message + r.log[-2000:]
    for p in r.rows:
        assert p["start"] == "aligned" and len(p["start_skew_us"]) == 3
        assert all(0 <= s < 1e6 for s in p["start_skew_us"])     # under a second apart: one deadline
    t = collectives.tidy([r])
    assert (t.method == m.label).all() and (t.start_skew_us >= 0).all() and (t.start == "aligned").all()
    b = failed_then_default[1]     # the default method (barrier start), 2 repeats
    assert b.status == "ok" and b.rows[0]["start"] == "barrier" and len(b.rows[0]["start_skew_us"]) == 2
    assert r.rows[0]["start_lead_us"] == 300 and b.rows[0]["start_lead_us"] is None
    assert (t.start_lead_us == 300).all() and (t.late_starts >= 0).all()
    # a longer lead: every rank still meets the deadline, and the point records the lead it used. 300 ms: at
    # 30 ms a rank of this test was once late under `make test` on the 2-core machine (three workers busy), where
    # one gloo all-reduce of the deadline can take longer than that
    lg = collectives.run_collectives("gloo", 2, [64], ops=("all_reduce",), warmup=1, iters=4, repeats=2,
                                     timeout_s=90, workdir=tmp_path, method=Method(start="aligned", start_lead_us=300_000))
    assert lg.status == "ok" and lg.rows[0]["start_lead_us"] == 300_000 and lg.rows[0]["late_starts"] == 0
    # a deadline 1 us ahead has passed before any rank can wait for it: every repeat is counted late
    sh = collectives.run_collectives("gloo", 2, [64], ops=("all_reduce",), warmup=1, iters=4, repeats=3,
                                     timeout_s=90, workdir=tmp_path, method=Method(start="aligned", start_lead_us=1))
    assert sh.status == "ok" and sh.rows[0]["late_starts"] == 3
    assert collectives.tidy([sh]).late_starts.iloc[0] == 3
    with pytest.raises(MethodError, match="start_lead_us = 0 must be an integer >= 1"):
        Method(start="aligned", start_lead_us=0)


@pytest.mark.timeout(120)
@pytest.mark.integration
def test_host_timer_out_of_place_and_rotation_run_for_real(tmp_path):
    # two gloo processes; the worker checks the out-of-place result (the sum lands in the second buffer)
    r = collectives.run_collectives("gloo", 2, [64, 4096], ops=("all_reduce",), warmup=2, iters=4, repeats=2,
                                    timeout_s=90, workdir=tmp_path,
                                    method=Method(timer="host", placement="out-of-place", rotate_bytes=8192))
    assert r.status == "ok", r.message + r.log[-2000:]
    t = collectives.tidy([r])
    assert set(t.size_bytes) == {64, 4096} and (t.time_us > 0).all()
    assert (t.placement == "out-of-place").all() and (t.method == "eager+host_timer+rotate_8KiB+out_of_place").all()
    assert all(p["rotate_bytes"] == 8192 and p["timer"] == "host" for p in r.rows)


def test_fit_table_columns_and_recorded_row():
    fits = ic.recorded_fit()
    assert list(fits.columns) == ic.FIT_COLUMNS
    row = fits.iloc[0]
    assert row.path == ic.RECORDED_PATH and row.kind == "derived: fit to recorded" and row.n_points == 4
    assert row.alpha_us > 0 and row.beta_GBps > 0
    sweep = pd.DataFrame({"path": "cpu_memcpy", "harness": "eager", "device": "CPU", "size_bytes": [64, 4096, 2**20],
                          "time_us": [1.0, 1.1, 20.0]})
    t = ic.fit_table(sweep, None)
    assert list(t.columns) == ic.FIT_COLUMNS and t.iloc[0].scope == "copy" and t.iloc[0].kind == "measured"


def test_the_fits_table_shows_no_beta_for_one_rank_and_labels_fits_derived():
    """Reading items 13 and 20: chapter 06 showed a one-rank NCCL all-reduce's beta (410346 GB/s: nothing crosses
    a link) and labelled fits of measured points 'measured'."""
    from helpers.chapters import vm_p2p
    sizes = [1024, 65536, 2**20]
    coll = pd.DataFrame([{"op": "all_reduce", "method": "eager", "variant": "default", "backend": "nccl",
                          "world_size": n, "harness": "eager", "device": "GPU", "size_bytes": b,
                          "time_us": 30.0 + b / (1e3 * n)} for n in (1, 2) for b in sizes])
    fits = ic.fit_table(None, coll)
    shown = vm_p2p.fits_table(fits)
    one, two = shown[shown.world_size == 1].iloc[0], shown[shown.world_size == 2].iloc[0]
    assert np.isnan(one.beta_GBps) and two.beta_GBps > 0
    assert set(shown.kind) == {"derived: fit to measured"}
    from helpers import repo_root
    nb = repo_root() / "notebooks" / "06_vm_p2p.ipynb"
    assert "one rank: no beta" in nb.read_text()   # the table's summary says why


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU: needs an NVIDIA GPU")
@pytest.mark.timeout(180)
def test_graph_harness_and_out_of_place_on_one_gpu(tmp_path):
    r = collectives.run_collectives("nccl", 1, [4096, 2**20], ops=("all_reduce",), warmup=2, iters=5, repeats=2,
                                    timeout_s=150, workdir=tmp_path, method=Method(
                                        harness="graph", timer="host", placement="out-of-place", rotate_bytes=2**22))
    assert r.status == "ok", r.message + r.log[-2000:]
    t = collectives.tidy([r])
    assert (t.method == "graph+host_timer+rotate_4MiB+out_of_place").all() and (t.time_us > 0).all()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_direct_nccl_without_a_gpu_is_a_clear_error():
    with pytest.raises(CollectiveConfigError, match="measure_direct needs a CUDA GPU"):
        collectives.measure_direct([64])
    with pytest.raises(MethodError, match="timer = 'sundial'"):
        collectives.measure_direct([64], method=Method.direct(timer="sundial"))
    with pytest.raises(MethodError, match="measured with api='direct'"):
        collectives.measure_direct([64], method=Method())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU: needs an NVIDIA GPU")
def test_direct_nccl_graph_out_of_place_on_one_gpu():
    m = Method.direct(placement="out-of-place", harness="graph", timer="host", rotate_bytes=2**22)
    r = collectives.measure_direct([4096, 2**20], method=m, iters=5, repeats=2)
    t = collectives.tidy([r])
    assert (t.backend == "nccl-direct").all() and (t.method == m.label).all()
    assert (t.time_us > 0).all()


def test_direct_nccl_bad_gpu_count_and_graph_across_gpus_are_clear_errors():
    with pytest.raises(CollectiveConfigError, match="gpus = 0"):
        collectives.measure_direct([64], gpus=0)
    with pytest.raises(CollectiveConfigError, match="harness='graph' needs gpus=1"):
        collectives.measure_direct([64], method=Method.direct(harness="graph"), gpus=2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="one GPU: needs two GPUs")
def test_direct_nccl_and_torchrun_across_two_gpus(tmp_path):
    r = collectives.measure_direct([4096, 2**20], method=Method.direct(placement="out-of-place", rotate_bytes=2**22),
                                   gpus=2, iters=5, repeats=2)
    t = collectives.tidy([r])
    assert (t.world_size == 2).all() and (t.time_us > 0).all() and (t.timer == "host").all()   # several GPUs
    r2 = collectives.run_collectives("nccl", 2, [4096, 2**20], warmup=2, iters=5, repeats=2, timeout_s=150,
                                     workdir=tmp_path, method=Method(harness="graph", timer="host", rotate_bytes=2**22))
    assert r2.status == "ok", r2.message + r2.log[-2000:]
    t2 = collectives.tidy([r2])
    assert set(t2.op) == {"all_reduce", "all_to_all"} and (t2.world_size == 2).all()


def test_nccl_api_needs_the_nccl_backend_and_a_known_name():
    with pytest.raises(MethodError, match="api = 'nccl' calls libnccl"):
        Method(api="nccl", timer="host").check_backend("gloo")
    with pytest.raises(MethodError, match="api = 'mpi' is not known"):
        Method(api="mpi")
    with pytest.raises(MethodError, match="stream = 'blue' is not known"):
        collectives.run_collectives("gloo", 2, [64], method=Method(stream="blue"))
    with pytest.raises(MethodError, match="control = 'gloo'"):
        collectives.run_collectives("gloo", 2, [64], method=Method(control="gloo"))
    with pytest.raises(MethodError, match="stream = 'legacy' places GPU work"):
        collectives.run_collectives("gloo", 2, [64], method=Method(stream="legacy"))


@pytest.mark.integration
def test_nccl_api_worker_refuses_gloo_with_a_clear_error(tmp_path):
    # the worker itself, started as torchrun starts it, on the CPU: it must name the option and the fix
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    p = subprocess.run([sys.executable, "-m", "helpers.interconnect.worker", "--backend", "gloo", "--sizes", "64",
                        "--api", "nccl", "--out", str(tmp_path / "o.jsonl")], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode != 0 and "api = 'nccl' calls libnccl" in p.stderr and "backend 'gloo'" in p.stderr


@pytest.mark.integration
def test_aligned_start_across_hosts_is_refused_by_the_worker(tmp_path):
    # torchrun says 1 of the 2 ranks is on this node: the ranks do not share one clock
    from helpers.serving.server import free_port

    port = free_port()
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.run([sys.executable, "-m", "helpers.interconnect.worker", "--backend", "gloo", "--sizes", "64",
                        "--rank-start", "aligned", "--out", str(tmp_path / "o.jsonl")], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode != 0 and "--rank-start aligned needs every rank on one host" in p.stderr, p.stderr[-2000:]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_ncclbind_on_a_cpu_build_says_what_is_missing():
    from helpers.interconnect import nccl as ncclbind

    try:
        lib = ncclbind.library()
    except ncclbind.NcclUnavailable as e:
        assert "install a CUDA build of torch" in str(e)
    else:  # a libnccl on the library path of a CPU machine still binds and reports its version
        assert lib.version().count(".") == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU: needs an NVIDIA GPU")
@pytest.mark.timeout(300)
def test_nccl_api_eager_and_graph_on_every_gpu(tmp_path):
    n = min(torch.cuda.device_count(), 2)
    for harness, placement in (("eager", "in-place"), ("graph", "out-of-place")):
        m = Method(harness=harness, timer="host", placement=placement, rotate_bytes=2**22, api="nccl",
                   start="aligned" if n > 1 else "barrier")
        r = collectives.run_collectives("nccl", n, [4096, 2**20], warmup=2, iters=5, repeats=2, timeout_s=150,
                                        workdir=tmp_path, method=m)
        assert r.status == "ok", r.message + r.log[-2000:]
        t = collectives.tidy([r])
        assert set(t.op) == {"all_reduce", "all_to_all"} and (t.world_size == n).all() and (t.time_us > 0).all()
        assert (t.api == "nccl").all() and set(t.method) == {m.label, m.for_op("all_to_all").label}


def test_best_variant_ranks_the_variant_method_rows_and_says_when_a_win_is_clear():
    def row(variant, method, t, p10, p90, size=12288):
        return {"op": "all_reduce", "backend": "nccl", "variant": variant, "world_size": 2, "method": method,
                "size_bytes": size, "time_us": t, "time_us_p10": p10, "time_us_p90": p90}
    g = ic.VARIANT_METHOD.label
    sweep = pd.DataFrame([
        row("default", "eager", 40.0, 30.0, 60.0), row("PROTO=LL", "eager", 20.0, 19.0, 21.0),   # eager: ignored
        row("default", g, 10.0, 9.8, 10.2), row("PROTO=LL", g, 8.0, 7.9, 8.1), row("ALGO=Ring", g, 9.9, 9.0, 11.0),
        row("default", g, 30.0, 29.0, 31.0, size=49152), row("ALGO=Ring", g, 29.5, 29.0, 31.0, size=49152),
    ])
    assert set(ic.variant_rows(sweep).method) == {g}
    best = ic.best_variant(sweep, [12288, 49152, 196608]).set_index("size_bytes")
    assert list(best.index) == [12288, 49152]                      # no row at 196608: left out
    assert best.loc[12288, "best_variant"] == "PROTO=LL" and best.loc[12288, "clear_win"]
    assert best.loc[12288, "default_time_us"] == 10.0
    assert best.loc[49152, "best_variant"] == "ALGO=Ring" and not best.loc[49152, "clear_win"]   # inside the spread
    assert np.isnan(best.loc[12288, "launch_spread_us"])          # the default ran once
    # the default launched again 2.5 us away: PROTO=LL's 2 us saving no longer counts as clear
    again = pd.concat([sweep, pd.DataFrame([row(ic.REPEAT_VARIANT, g, 7.5, 7.4, 7.6)])], ignore_index=True)
    b2 = ic.best_variant(again, [12288]).iloc[0]
    assert b2.best_variant == "PROTO=LL" and b2.launch_spread_us == 2.5 and not b2.clear_win
    # the ranking without a variant: the next best takes its place
    assert ic.best_variant(sweep, [12288], exclude=["PROTO=LL"]).iloc[0].best_variant == "ALGO=Ring"
    # a run made before the variant method existed: the eager rows are used
    old = sweep[sweep.method == "eager"]
    assert ic.best_variant(old, [12288]).iloc[0].best_variant == "PROTO=LL"


def test_a_failed_launch_reports_the_failing_ranks_own_error():
    out = "\n".join([
        "*****************************************", "Setting OMP_NUM_THREADS ...",
        "[rank1]: Traceback (most recent call last):", "[rank1]:   File \"worker.py\", line 3, in main",
        "[rank1]: torch.distributed.DistBackendError: NCCL error: invalid usage (ALGO=Tree)",
        "[rank0]: Traceback (most recent call last):", "[rank0]: RuntimeError: peer went away",
        "Traceback (most recent call last):", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "helpers.interconnect.worker FAILED", "Root Cause (first observed failure):"])
    msg = launchlog.failure_message(out)
    assert "invalid usage (ALGO=Tree)" in msg and "ChildFailedError" not in msg and "[rank0]" not in msg
    assert msg.startswith("[rank1]: torch.distributed.DistBackendError")   # the cause first, then the traceback
    assert msg.index("traceback:") < msg.index("line 3, in main")
    assert launchlog.failure_message("just a plain error\n***\n") == "just a plain error"
