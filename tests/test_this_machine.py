"""Chapter 08's machine verdict, fed the committed runs (the published one-GPU H200 run, the two-GPU study) and
synthetic ones (eight RTX PRO 6000s in a VM without P2P, eight on bare metal with P2P), line by line; the
virtualization verdict (check 1) on the published probe and a bare-metal fixture; NCCL's log read back; the
thresholds moving with the observation."""
import json

import numpy as np
import pandas as pd
import pytest

from helpers import repo_root
from helpers.chapters import this_machine as ch
from helpers.chapters.this_machine.parts import Inputs
from helpers.core import layout
from helpers.interconnect import pairs as pc
from helpers.machine import virt
from helpers.model import kernels as kt
from helpers.model import thismachine as tm

TWO_GPU = "runs/h200x2-20261129f"
BARE_METAL_VIRT = {"cpuinfo_hypervisor_flag": False, "dmi_sys_vendor": "Supermicro", "dmi_product_name": "SYS-421GE-TNRT",
                   "systemd_detect_virt": "none", "vm": "none", "container": "none", "container_hints": [],
                   "kernel_hints": []}
VM_VIRT = {"cpuinfo_hypervisor_flag": True, "dmi_sys_vendor": "QEMU", "dmi_product_name": "Standard PC (Q35 + ICH9, 2009)",
           "systemd_detect_virt": "kvm", "vm": "kvm", "container": "none", "container_hints": [], "kernel_hints": []}


def _published() -> str:
    from helpers.book.publish import site_run

    return site_run(repo_root())


def _probe(run):
    return json.loads((layout.path(repo_root() / run, "01_environment", "probe")).read_text())


def fake_predictor(tok_1=55.0, tok_64=876.0):
    """A predictor with fixed figures (the verdict's logic, not the model's): 10 % bands."""
    def p(system, batch):
        if system != kt.RTX:
            return f"no prediction for {system}"
        tok = tok_1 if batch <= 1 else tok_64 * batch / 64
        return tm.Predicted(float(batch), tok, 0.9 * tok, 1.1 * tok, "derived: a test's fixed figures")
    return p


def nccl_log(gpus, via):
    return "\n".join([f"host:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0"] +
                     [f"host:1:1 [{a}] NCCL INFO Channel 00/0 : {a}[{a}] -> {(a + 1) % gpus}[{(a + 1) % gpus}] via {via}"
                      for a in range(gpus)])


def synthetic(gpus=8, code="NS", direct=(27.0, 27.5), write="ok", access=False, via="SHM/direct/direct",
              allreduce_us=(390.0, 420.0, 700.0, 1400.0), virt_=None, typed=None):
    """An 8-GPU RTX PRO 6000 run's inputs: every pair's grant, copies, writes and NCCL log, and the recipe's
    all-reduce (a PCIe VM without P2P by default)."""
    grant = [["X" if i == j else code for j in range(gpus)] for i in range(gpus)]
    ordered = [(a, b) for a in range(gpus) for b in range(gpus) if a != b]
    copies = pd.DataFrame([{"a": a, "b": b, "peer_GBps": direct[0], "host_GBps": direct[1]} for a, b in ordered])
    writes = pd.DataFrame([{"writer": a, "owner": b, "peer_access": access, "verdict": write} for a, b in ordered])
    sizes = tm.decode_sizes(tm.ma.load_model("glm5"))
    recipe = pd.DataFrame({"op": "all_reduce", "world_size": gpus, "size_bytes": sizes, "time_us": allreduce_us})
    probe = {"virtualization": virt_ or VM_VIRT, "gpus": [{"name": kt.RTX}] * gpus, "p2p_read": grant}
    return Inputs("auto", probe, gpus, kt.RTX, grant, copies, "a test's pair check", writes, nccl_log(gpus, via),
                  recipe, None, None, typed)


# ------------------------------------------------------------------------------------------ check 1
@pytest.mark.parametrize("run", ["published", TWO_GPU])
def test_check_1_fails_on_the_committed_runs_own_probe(run):
    run = _published() if run == "published" else run
    v = virt.judge(_probe(run)["virtualization"])
    assert (v.passes, v.kind) == (False, "container in a VM")
    assert "CPUID hypervisor bit" in v.vm_signals and "Firecracker" in v.line()


def test_check_1_passes_on_bare_metal_and_on_a_container_there():
    assert virt.judge(BARE_METAL_VIRT).passes is True and virt.judge(BARE_METAL_VIRT).kind == "bare metal"
    c = virt.judge({**BARE_METAL_VIRT, "container_hints": ["/.dockerenv exists"]})
    assert (c.passes, c.kind) == (True, "container on bare metal")


def test_check_1_fails_on_any_one_signal_and_cannot_tell_from_none():
    assert virt.judge({**BARE_METAL_VIRT, "cpuinfo_hypervisor_flag": True}).passes is False
    assert virt.judge({**BARE_METAL_VIRT, "kernel_hints": ["Firecracker (kernel command line)"]}).passes is False
    # systemd-detect-virt --vm saying none is not enough where another signal names a hypervisor
    assert virt.judge({**VM_VIRT, "vm": "none", "systemd_detect_virt": "none"}).passes is False
    assert virt.judge({}).passes is None and "cannot tell" in virt.judge({}).line()


# ------------------------------------------------------------------------------------------ NCCL's log
def test_transports_read_from_ncclss_log():
    log = nccl_log(4, "P2P/CUMEM/read") + "\nx NCCL INFO Channel 01/0 : 3[3] -> 0[0] [receive] via SHM/direct/direct"
    t = pc.transports(log)
    assert t[(0, 1)] == {"P2P/CUMEM/read"} and t[(3, 0)] == {"P2P/CUMEM/read", "SHM/direct/direct"}
    assert pc.transport_kind(t[(3, 0)]) == "SHM" and pc.transport_kind(t[(0, 1)]) == "P2P"
    assert pc.nccl_version(log) == "2.28.9+cuda13.0"


# ------------------------------------------------------------------------------------------ the runs
def test_published_one_gpu_run_prices_nothing_from_a_one_rank_link():
    inp = ch.inputs(layout.Run(repo_root() / _published(), ch.CHAPTER), "replay")
    assert inp.gpus == 1
    v = ch.verdict(inp, predictor=fake_predictor())
    assert v.lines["vm"].startswith("check 1 fails: container in a VM (Firecracker)")
    assert v.lines["p2p"].startswith("not measured here: one GPU has no pair")
    assert v.lines["allreduce"].startswith("not measured here: one GPU has no collective")
    assert "multi-gpu" in v.lines["allreduce"] and v.allreduce is None
    # the fake predictor prices only the RTX PRO 6000; the published run's GPU (an H100 since issue 48's run) is none
    # ... and points to the decode-step chapter's emulated rank timed on it (site-read5 N13)
    assert v.lines["predicted"].startswith(f"not predicted: no prediction for {tm.reference_system(inp.device)} (the "
                                           "decode-step chapter timed one emulated TP8 rank here")
    # the published run's chapter 03 served a stand-in live: its record names it, and a stand-in is no observation
    assert v.lines["observed"].startswith("nothing observed (chapter 03 served transformers")
    assert "a stand-in, not GLM-5" in v.lines["observed"]
    assert v.loss is None and v.lines["remedy"].startswith("none called for")
    # section 2 does not claim a timing the run did not make (reading item: "Timed as the recipe times it" on one GPU)
    assert ch.answer_values(v).tm_ar_timed == ("Not timed in this run (1 GPU: no collective between GPUs to time); "
                                               "the decisive recipe times it so")


def test_two_gpu_study_renders_its_pair_and_pair_all_reduce():
    v = ch.verdict(ch.inputs(layout.Run(repo_root() / TWO_GPU, ch.CHAPTER), "replay"), predictor=fake_predictor())
    assert v.lines["p2p"].startswith("1 GPU pair: driver grant ok on 1 of 1; bandwidth ok on 1 of 1; owner-side "
                                     "write not measured; NCCL transport not measured")
    assert v.lines["p2p"].endswith("P2P is real on every way measured")
    sweep = ch.inputs(layout.Run(repo_root() / TWO_GPU, ch.CHAPTER), "replay").sweep
    eager = sweep[(sweep.op == "all_reduce") & (sweep.variant == "default") & (sweep.harness == "eager")]
    at12 = float(eager.loc[eager.size_bytes == 12288, "time_us"].iloc[0])
    assert v.lines["allreduce"].startswith(f"over 2 GPUs {at12:.1f} µs at 12 KiB")
    assert "h200_sxm" in v.lines["allreduce"] and v.allreduce["gpus"].eq(2).all()
    assert v.lines["remedy"] == "none: no check failed on this machine"
    assert ch.answer_values(v).tm_ar_timed == "Timed as the decisive recipe times it"


def test_synthetic_8_gpu_vm_without_p2p_line_by_line():
    obs = tm.Observation(11.0, 210.9, 64, "a test's observation")
    v = ch.verdict(synthetic(typed=obs), predictor=fake_predictor())
    assert v.lines["vm"] == ("check 1 fails: VM (kvm, QEMU): found by CPUID hypervisor bit, DMI vendor and product, "
                             f"systemd-detect-virt, systemd-detect-virt --vm ({virt.CHECK1_RULE})")
    assert v.lines["p2p"].startswith("28 GPU pairs: driver grant ok on 0 of 28, failing on 28; bandwidth ok on 0 of 28, "
                                     "failing on 28; owner-side write not measured; NCCL transport ok on 0 of 28, "
                                     "failing on 8, not measured on 20")
    assert "first failing way: driver grant" in v.lines["p2p"] and "x-nv-gpudirect-clique" in v.lines["p2p"]
    assert v.lines["allreduce"].startswith("over 8 GPUs 390.0 µs at 12 KiB and 1400.0 µs at 768 KiB")
    one = v.loss.iloc[0]
    loss_ms = 1e3 / 11.0 - 1e3 / 55.0
    assert one.loss_ms == pytest.approx(loss_ms)
    ref = kt.comm_us(kt.RTX, "all_reduce", 8, 12288)
    assert one.explains_us == pytest.approx(ref + 0.8 * loss_ms * 1e3 / 157)
    assert one.cannot_us == pytest.approx(ref + 0.25 * loss_ms * 1e3 / 157)
    assert one.share == pytest.approx((390.0 - ref) * 157 / 1e3 / loss_ms)
    assert f"{one.explains_us:.0f} µs or more at 12 KiB" in v.lines["thresholds"]
    assert v.lines["remedy"].startswith("first, a GPUDirect clique for the guest")
    assert f"predicted {1e3 / (1e3 / 11.0 - (390.0 - ref) * 157 / 1e3):.1f} tokens/s" in v.lines["remedy"]


def test_thresholds_move_with_the_observation():
    lines = {}
    for tok in (11.0, 30.0):
        v = ch.verdict(synthetic(typed=tm.Observation(tok, 210.9, 64, "a test")), predictor=fake_predictor())
        lines[tok] = v.loss.iloc[0]
    assert lines[30.0].explains_us < lines[11.0].explains_us
    assert lines[30.0].loss_ms == pytest.approx(1e3 / 30 - 1e3 / 55)
    # nothing lost: no threshold to state
    v = ch.verdict(synthetic(typed=tm.Observation(60.0, 900.0, 64, "a test")), predictor=fake_predictor())
    assert v.lines["thresholds"].startswith("no thresholds: this machine runs at or above its prediction")
    assert "this machine gains" in v.lines["observed"] and "(faster than predicted)" in v.lines["observed"]


def test_synthetic_bare_metal_box_passes_every_check():
    inp = synthetic(code="OK", direct=(53.0, 27.0), write="ok", access=True, via="P2P/CUMEM/read",
                    allreduce_us=(27.0, 32.0, 66.0, 144.0), virt_=BARE_METAL_VIRT,
                    typed=tm.Observation(50.4, 1010.6, 64, "a test"))
    v = ch.verdict(inp, predictor=fake_predictor())
    assert v.lines["vm"].startswith("check 1 passes: bare metal")
    assert v.lines["p2p"].startswith("28 GPU pairs: driver grant ok on 28 of 28; bandwidth ok on 28 of 28; owner-side "
                                     "write ok on 28 of 28; NCCL transport ok on 8 of 28, not measured on 20")
    assert v.lines["p2p"].endswith("P2P is real on every way measured")
    assert v.lines["remedy"] == "none: no check failed on this machine"


def test_a_false_grant_is_ranked_first():
    v = ch.verdict(synthetic(code="OK", direct=(53.0, 27.0), write="private copy", access=True, via="P2P/CUMEM/read"),
                   predictor=fake_predictor())
    assert "first failing way: owner-side write" in v.lines["p2p"]
    assert v.lines["remedy"].startswith("first, keep P2P off: the grant is false")


def test_an_observation_of_a_stand_in_is_no_observation():
    served = {"server": "launched", "engine": "transformers", "served_model": "transformers", "is_model": False,
              "single_stream_tok_s": 44.0, "max_tok_s": 634.0, "max_concurrency": 64, "achieved_concurrency": 60.0}
    inp = Inputs("auto", served=served)
    obs, why = ch.observation(inp)
    assert obs is None and "a stand-in, not GLM-5" in why
    real = {**served, "server": "given", "engine": "external", "served_model": "glm-5", "is_model": True}
    obs, _ = ch.observation(Inputs("auto", served=real))
    assert (obs.tok_s_1, obs.tok_s_max, obs.concurrency_max) == (44.0, 634.0, 60.0)


def test_recorded_mode_names_what_to_run():
    v = ch.verdict(Inputs("recorded"))
    assert all(line.startswith("not measured here") for line in v.lines.values())
    assert ch.answer_values(v).tm_ar_timed.startswith("Not timed in this run (recorded data only)")


def test_the_healthy_pair_is_read_by_the_recipe_slower_than_the_table():
    """The rule the page states for the all-reduce is the healthy pair's own ratio: applied to that pair (the
    committed study of two H200s over NVLink), the recipe reads more than the reference table, so a ratio alone
    does not flag a machine."""
    h = ch.parts.healthy_recipe(tm.decode_sizes(tm.ma.load_model("glm5")))
    assert h is not None and (h["ratio"] > 1).all() and np.isfinite(h["recipe_us"]).all()


def test_a_one_h200_run_is_predicted_by_the_predictor_on_its_own_gpu_kind():
    """Part 3 on a committed one-H200 run (h200-20261202f; the published run is an H100, which has no kernel tables):
    GLM-5 at TP8 on eight H200s from helpers.model.verdict.predictor (the FP8 checkpoint: the H200's tables price no
    NVFP4 MoE), with the graph floor 07_decode_step measured there; the all-reduces are the table's, said so."""
    from helpers.model.verdict import predictor as pr

    inp = ch.inputs(layout.Run(repo_root() / "runs/h200-20261202f", ch.CHAPTER), "replay")
    assert inp.floor_us is not None
    v = ch.verdict(inp)
    p1 = pr.predict("glm5", kt.H200, 8, 1, 0, pr.EngineSettings(checkpoint="fp8"), floor_us=inp.floor_us)
    assert v.lines["predicted"].startswith(f"GLM-5 at TP8 on 8 x NVIDIA H200: {p1.tok_s:.1f} tokens/s for one stream "
                                           f"(band {p1.band[0]:.1f}-{p1.band[1]:.1f})")
    assert "FP8 checkpoint" in ch.answer_values(v).tm_pred_how and "not measured here (1 GPU ran)" in v.lines["predicted"]


def test_chapter_03s_served_record_reads_one_stream_and_the_highest_concurrency():
    from helpers.serving import observed

    sweep = pd.DataFrame({"variant": ["v", "v", "v", "w"], "workload": ["256/256"] * 4, "concurrency": [1, 8, 64, 64],
                          "completed": [5, 40, 320, 320], "output_throughput": [48.0, 300.0, 900.0, 10.0],
                          "achieved_concurrency": [1.0, 7.9, 41.5, 60.0]})
    s = observed.served(sweep, server_url="http://h:1", served_model="glm-5", engine="sglang", tp_size=8)
    assert (s["single_stream_tok_s"], s["max_tok_s"], s["max_concurrency"], s["achieved_concurrency"]) == \
        (48.0, 900.0, 64, 41.5)
    assert s["is_model"] and s["server"] == "given"
    tiny = observed.served(sweep, server_url="", served_model="", engine="transformers", tp_size=8)
    assert not tiny["is_model"] and tiny["tp_size"] is None
    assert observed.served(None, server_url="", served_model="", engine="sglang", tp_size=8) is None
    obs, how = ch.observation(Inputs("auto", served=s))
    assert how == "served" and obs.concurrency_max == 41.5   # the decode batch: the achieved concurrency


@pytest.mark.integration
def test_the_pair_check_child_process_measures_nothing_without_two_gpus(tmp_path):
    """The child process really runs here (no GPU, or one): it writes its meta and no pair or all-reduce, and the
    verdict then has nothing between GPUs to price."""
    rep = pc.measure(tmp_path, [12288], timeout_s=120)
    assert rep["returncode"] == 0, rep
    got = pc.load(tmp_path)
    assert got["meta"]["gpus"] < 2 and got["copies"] is None and got["allreduce"] is None
