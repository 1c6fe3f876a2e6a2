"""helpers.interconnect.hostpath: the host-path study's arms as data, its plan per machine, the VM topology
file it writes at run time, resume by settings, time estimates, the growth of an all-reduce's cost with the
number of ranks (derived, refused on one point); and real torchrun/gloo processes: the default arm across two
CPU ranks with the NCCL-only arms skipped, resume, a failed arm. (What chapter 06 says about the study is
tested with the chapter's module, tests/test_findings.py.)"""
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from helpers.interconnect import growth, hostpath as hp, settings, suite, topology
from helpers.interconnect.method import Method

DEC = [12288, 49152, 196608, 786432]


# ------------------------------------------------------------------ the arms and the plan
def test_arms_are_data_with_the_host_path_under_every_tuning_arm():
    assert hp.ARMS["default"].environment == {} and not hp.ARMS["default"].nccl_only
    assert hp.ARMS["host"].environment == {"NCCL_P2P_DISABLE": "1"}
    vm = hp.ARMS["host+cuda_memcpy+vm_topology"]
    assert vm.vm_topology and vm.environment == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_USE_CUDA_MEMCPY": "1"}
    assert vm.settings.endswith("NCCL_TOPO_FILE=<VM topology>")
    for name in hp.ARM_GROUPS["tuning"]:
        env = hp.ARMS[name].environment
        assert env["NCCL_P2P_DISABLE"] == "1" and len(env) == 2 and hp.ARMS[name].max_bytes == settings.TUNING_MAX_BYTES
    knobs = {k for n in hp.ARM_GROUPS["tuning"] for k in hp.ARMS[n].environment} - {"NCCL_P2P_DISABLE"}
    assert knobs == {"NCCL_PROTO", "NCCL_ALGO", "NCCL_MIN_NCHANNELS"}
    assert hp.arm_names("all") == tuple(hp.ARMS) and hp.arm_names("none") == ()
    assert hp.arm_names("main,host+ALGO=Tree,host") == hp.MAIN_ARMS + ("host+ALGO=Tree",)
    with pytest.raises(hp.StudyError, match=r"unknown host-path arm.*'host\+bogus'"):
        hp.arm_names("default,host+bogus")
    assert list(hp.arms_table().arm) == list(hp.ARMS)


@pytest.mark.parametrize("bad", ["", "2,x", "0", [2, 2.5], [True]])
def test_bad_world_sizes_are_refused(bad):
    with pytest.raises(hp.StudyError, match="world size"):
        hp.parse_world_sizes(bad)


def test_the_study_covers_4_bytes_to_256_mib_and_the_decode_sizes():
    cfg = hp.StudyConfig()
    sizes = cfg.sizes(hp.ARMS["host"])
    assert sizes[0] == 4 and sizes[-1] == 256 * 2**20 and set(DEC) <= set(sizes) and len(sizes) == 27 + 4
    assert max(cfg.sizes(hp.ARMS["host+PROTO=LL"])) == settings.TUNING_MAX_BYTES


def test_plan_on_cpu_skips_the_nccl_arms_with_their_reason_and_says_what_it_cannot_run():
    p = hp.plan_study(hp.StudyConfig(world_sizes=(2, 4, 8)), gpus=0, cpus=2)
    assert {l.world_size for l in p.launches} == {2} and all(l.backend == "gloo" for l in p.launches)
    run = [l for l in p.launches if not l.skip]
    assert [l.arm.name for l in run] == ["default"] and run[0].method == hp.CPU_METHOD
    skipped = {l.arm.name: l.skip for l in p.launches if l.skip}
    assert set(skipped) == set(hp.ARMS) - {"default"}
    assert "NCCL_P2P_DISABLE=1 is read by NCCL only" in skipped["host"]
    assert "4 and 8 ranks need as many CPU cores" in p.statements[0] and "no GPU" in p.statements[1]


def test_plan_on_four_gpus_times_like_the_variant_sweep_and_leaves_eight_to_the_extrapolation():
    p = hp.plan_study(hp.StudyConfig(world_sizes=(8, 4, 2)), gpus=4, cpus=64)
    assert [(l.world_size, l.arm.name) for l in p.launches] == (
        [(4, a) for a in hp.ARMS] + [(2, a) for a in hp.GROWTH_ARMS])   # tuning arms at the largest only
    assert all(l.method == suite.VARIANT_METHOD and l.backend == "nccl" and not l.skip for l in p.launches)
    assert p.statements == ["8 ranks need as many GPUs and this machine has 4: not measured here; where two world "
                            "sizes of 2 or more were measured, the figure for 8 ranks is extrapolated from them "
                            "(derived, with its assumption stated)."]


def test_launch_estimates_follow_their_stated_arithmetic():
    # one size of 1 MiB on 8 ranks, graph method: 1 + 5 + 21 + 100 = 127 calls of 30 us + 2^20 x 1.75 / 10 GB/s
    m = suite.VARIANT_METHOD
    calls = hp.calls_per_size(m, iters=20, warmup=5, repeats=5)
    assert calls == 127 and hp.calls_per_size(Method(), 20, 5, 5) == 106
    per_call_us = 30 + 2**20 * 1.75 / 10e3
    assert hp.estimate_launch_s([2**20], 8, calls, 30, 10, startup_s=12, per_size_s=0.05) == pytest.approx(
        12 + 0.05 + 127 * per_call_us / 1e6)
    t = hp.plan_table(hp.plan_study(hp.StudyConfig(world_sizes=(8,)), gpus=8, cpus=128), hp.StudyConfig())
    assert len(t) == len(hp.ARMS) and t.estimate_s.sum() < 540     # one device command, with room to spare


def test_the_plan_and_an_arms_environment_print_from_the_command_line(capsys):
    assert hp.main(["--plan", "--gpus", "8", "--world-sizes", "8", "--arms", "main"]) == 0
    out = capsys.readouterr().out
    assert "host+cuda_memcpy+vm_topology" in out and "8 ranks: 4 launches, estimated" in out
    assert hp.main(["--env", "host+ALGO=Tree"]) == 0
    assert capsys.readouterr().out.strip() == "NCCL_P2P_DISABLE=1 NCCL_ALGO=Tree"
    assert hp.main(["--env", "default"]) == 0 and capsys.readouterr().out.strip() == ""


# ------------------------------------------------------------------ the VM topology, named in the arm's environment
IDS = ["00000000:1B:00.0", "00000000:43:00.0", "00000000:52:00.0", "00000000:61:00.0"]


def test_the_vm_topology_arm_writes_its_file_for_the_ranks_gpus_and_names_it(tmp_path):
    env, digest = hp.arm_env(hp.ARMS["host+cuda_memcpy+vm_topology"], 2, tmp_path, bus_ids=IDS, sm=90)
    path = tmp_path / "topology" / "vm-topology-n2.xml"
    assert env == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_USE_CUDA_MEMCPY": "1", "NCCL_TOPO_FILE": str(path.resolve())}
    root = ET.parse(path).getroot()
    gpus = root.find("cpu").find("pci").findall("pci")
    assert [g.get("busid") for g in gpus] == ["0000:1b:00.0", "0000:43:00.0"]       # the first N, in CUDA's order
    assert all(g.get("link_speed") == topology.recorded_vm_link().speed for g in gpus)
    assert len(digest) == 12 and hp.shown_env(env, tmp_path).endswith("NCCL_TOPO_FILE=topology/vm-topology-n2.xml")
    assert hp.arm_env(hp.ARMS["host"], 2, tmp_path) == ({"NCCL_P2P_DISABLE": "1"}, "")
    with pytest.raises(hp.StudyError, match="8 GPUs needs 8 GPU bus ids; found 4"):
        hp.arm_env(hp.ARMS["host+cuda_memcpy+vm_topology"], 8, tmp_path, bus_ids=IDS, sm=90)


def test_points_are_kept_under_a_folder_named_by_every_setting(tmp_path):
    cfg = hp.StudyConfig()
    l = hp.plan_study(cfg, gpus=4, cpus=8).launches
    vm = next(x for x in l if x.arm.name == "host+cuda_memcpy+vm_topology" and x.world_size == 2)
    k1, k2 = hp.launch_key(vm, cfg, "aaaa"), hp.launch_key(vm, cfg, "bbbb")
    assert k1["env"]["NCCL_TOPO_FILE"] == "vm-topology:aaaa" and hp.key_folder(k1) != hp.key_folder(k2)
    assert hp.key_folder(k1).startswith("host_cuda_memcpy_vm_topology-n2-")
    more = hp.launch_key(vm, hp.StudyConfig(repeats=7), "aaaa")
    assert hp.key_folder(more) != hp.key_folder(k1) and hp.key_folder(hp.launch_key(vm, cfg, "aaaa")) == hp.key_folder(k1)


# ------------------------------------------------------------------ growth with the number of ranks
def _sweep(points, arm="host"):
    """A tidy-like sweep from {(world_size, size): time_us}."""
    return pd.DataFrame([{"op": "all_reduce", "arm": arm, "arm_settings": hp.ARMS[arm].settings,
                          "method": suite.VARIANT_METHOD.label, "world_size": n, "size_bytes": s, "time_us": t,
                          "time_us_p10": t * 0.95, "time_us_p90": t * 1.05, "kind": "measured: synthetic"}
                         for (n, s), t in points.items()])


def test_growth_to_eight_ranks_is_derived_from_two_and_four_under_a_stated_assumption():
    s = _sweep({(2, 1024): 20.0, (4, 1024): 30.0, (2, 2**20): 100.0, (4, 2**20): 100.0})
    d = growth.extrapolate(s, 8).set_index("size_bytes")
    # ring steps 2(N-1): 2 -> 20, 6 -> 30, so 14 -> 50; log2 N: 1, 2 -> 3 gives 40; 2(N-1)/N: 1, 1.5 -> 1.75 gives 35
    r = d.loc[1024]
    assert (r.time_us, r.time_us_low, r.time_us_high) == pytest.approx((50.0, 35.0, 50.0))
    assert r.world_size == 8 and r.from_world_sizes == "2,4" and r.model == "ring_steps"
    assert r.kind.startswith("derived: extrapolated to 8 ranks from the measured 2 and 4 ranks") and "2(N-1)" in r.assumption
    assert d.loc[2**20].time_us == pytest.approx(100.0)                     # flat stays flat
    assert growth.extrapolate(s, 8, model="log2").set_index("size_bytes").loc[1024].time_us == pytest.approx(40.0)
    three = _sweep({(2, 64): 10.0, (4, 64): 14.0, (6, 64): 18.0})          # least squares through more points
    assert growth.extrapolate(three, 8).time_us.iloc[0] == pytest.approx(22.0)


def test_growth_refuses_a_single_world_size():
    with pytest.raises(growth.GrowthError, match=r"arm 'host' at 1024 B was measured at \[4\].*needs two"):
        growth.extrapolate(_sweep({(4, 1024): 30.0, (1, 1024): 5.0}), 8)
    with pytest.raises(growth.GrowthError, match="unknown"):
        growth.extrapolate(_sweep({(2, 1024): 20.0, (4, 1024): 30.0}), 8, model="cubic")


def test_eight_ranks_are_extrapolated_only_where_they_were_not_measured():
    s = pd.concat([_sweep({(2, 1024): 20.0, (4, 1024): 30.0, (8, 1024): 61.0}),
                   _sweep({(2, 1024): 10.0, (4, 1024): 12.0}, arm="default")], ignore_index=True)
    t = growth.at_world_size(s, 8).set_index("arm")
    assert t.loc["host", "time_us"] == 61.0 and t.loc["host", "kind"] == "measured: synthetic"
    assert t.loc["default", "time_us"] == pytest.approx(16.0) and t.loc["default", "kind"].startswith("derived")


# ------------------------------------------------------------------ real processes: torchrun + gloo on CPU
SMALL = dict(min_bytes=64, max_bytes=1024, factor=16, iters=2, warmup=0, repeats=1, timeout_s=90)


@pytest.mark.integration
def test_the_study_runs_its_arms_on_two_cpu_ranks_and_resumes_finished_points(tmp_path):
    cfg = hp.StudyConfig(arms=hp.MAIN_ARMS, world_sizes=(2, 4), **SMALL)
    lines = []
    res = hp.run_study(cfg, tmp_path, log=lines.append, gpus=0, cpus=2)
    runs = res.runs.set_index("arm")
    assert runs.loc["default", "status"] == "ok" and runs.loc["default", "new_points"] == 2
    assert (runs.drop("default").status == "skipped").all()
    assert "read by NCCL only" in runs.loc["host+cuda_memcpy+vm_topology", "message"]
    s = res.sweep
    assert set(s.size_bytes) == {64, 1024} and set(s.arm) == {"default"} and set(s.method) == {hp.CPU_METHOD.label}
    assert (s.arm_settings == "NCCL defaults").all() and s.world_size.eq(2).all()
    assert any("4 ranks need as many CPU cores" in x for x in lines)
    assert any(x.startswith("hostpath [1/4] default, 2 ranks: ok, 2 of 2 points (0 kept, 2 new)") for x in lines)
    assert (tmp_path / "hostpath_runs.csv").exists() and len(pd.read_csv(tmp_path / "hostpath_sweep.csv")) == 2
    # the same settings again: nothing is launched, every point is kept
    again = hp.run_study(cfg, tmp_path, gpus=0, cpus=2).runs.set_index("arm").loc["default"]
    assert (again.status, again.kept_points, again.new_points, again.wall_s) == ("ok", 2, 0, 0.0)
    # a wider sweep under the same settings measures only the new size, in the same folder
    wider = hp.StudyConfig(arms=("default",), world_sizes=(2,), **{**SMALL, "max_bytes": 16384})
    r = hp.run_study(wider, tmp_path, gpus=0, cpus=2)
    row = r.runs.iloc[0]
    assert (row.status, row.kept_points, row.new_points, row.points) == ("ok", 2, 2, 4)   # 16 KiB and 12 KiB new
    assert set(r.sweep.size_bytes) == {64, 1024, 12288, 16384}
    # another study folder resumes from this one: its points are copied in, nothing is launched
    moved = hp.run_study(wider, tmp_path / "moved", resume_from=tmp_path, gpus=0, cpus=2).runs.iloc[0]
    assert (moved.kept_points, moved.new_points, moved.folder) == (4, 0, row.folder)


@pytest.mark.integration
def test_a_failed_arm_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    # an arm gloo can run but that cannot start: its processes look for a network interface that does not exist
    monkeypatch.setitem(hp.ARMS, "broken", settings.NcclSetting("broken", (("GLOO_SOCKET_IFNAME", "nosuchif0"),)))
    assert not hp.ARMS["broken"].nccl_only
    cfg = hp.StudyConfig(arms=("broken", "default"), world_sizes=(2,), **SMALL)
    res = hp.run_study(cfg, tmp_path, gpus=0, cpus=2)
    runs = res.runs.set_index("arm")
    assert runs.loc["broken", "status"] == "failed" and runs.loc["broken", "points"] == 0
    assert runs.loc["broken", "message"]
    assert runs.loc["default", "status"] == "ok" and set(res.sweep.arm) == {"default"}


def test_resume_from_needs_a_study_folder(tmp_path):
    with pytest.raises(hp.StudyError, match="has no points/ folder"):
        hp.copy_points(tmp_path, tmp_path / "b")


def test_a_time_budget_leaves_launches_for_the_next_call(tmp_path):
    cfg = hp.StudyConfig(arms=("default",), world_sizes=(2,), budget_s=1.0, **SMALL)
    row = hp.run_study(cfg, tmp_path, gpus=0, cpus=2).runs.iloc[0]
    assert row.status == "not started" and "run the study again to resume" in row.message and row.points == 0


def test_nccl_kept_every_attribute_of_the_generated_topology():
    """tests/fixtures/nccl/topo-dump-h200-1gpu.xml is what NCCL 2.28.9 wrote (NCCL_TOPO_DUMP_FILE) after
    reading the file vm_topology_xml made for the lent H200's one GPU (device dry run, 2026-12-01): every
    element and attribute the generated file sets is there with the same value; NCCL only added what it
    read from the machine (ids, host hash, CPU family, the network card, the rank)."""
    from helpers import repo_root

    dump = ET.parse(repo_root() / "tests" / "fixtures" / "nccl" / "topo-dump-h200-1gpu.xml").getroot()
    ours = ET.fromstring(topology.vm_topology_xml(["0000:00:06.0"], topology.recorded_vm_link(), sm=90))

    def kept(mine, theirs, path):
        assert theirs is not None, f"NCCL dropped {path}"
        for k, v in mine.attrib.items():
            assert theirs.get(k) == v, f"{path}@{k}: ours {v!r}, NCCL's {theirs.get(k)!r}"
        for child in mine:
            match = [c for c in theirs if c.tag == child.tag and c.get("busid") == child.get("busid")]
            kept(child, match[0] if match else None, f"{path}/{child.tag}")

    kept(ours, dump, "system")
    cpu = dump.find("cpu")
    assert cpu.get("numaid") == "-1" and cpu.get("affinity") == "" and len(cpu.findall("pci")) == 1
