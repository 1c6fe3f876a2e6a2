"""helpers.interconnect.fidelity: parsing nccl-tests' and p2pBandwidthLatencyTest's printed output (in the formats
their sources print), the comparison rows and the verdict per tolerance."""
import copy
import math

import pandas as pd
import pytest

from helpers.core import plotting
from helpers.chapters import vm_p2p as ch
from helpers.interconnect import collectives, copies as copybench, fidelity, studies
from helpers.interconnect.fidelity import ToolOutputError
from helpers.interconnect.method import Method


def _nccl_line(size, t_oop, t_ip, wrong=0):
    # nccl-tests' Reporter: "%12li  %12li  %8s  %6s  %6i" then twice "  %7s  %6.2f  %6.2f  %5li"
    alg_o, alg_i = size / t_oop / 1e3, size / t_ip / 1e3
    return ("%12li  %12li  %8s  %6s  %6i" % (size, size // 4, "float", "sum", -1)
            + "  %7s  %6.2f  %6.2f  %5li" % ("%7.2f" % t_oop, alg_o, 0.0, wrong)
            + "  %7s  %6.2f  %6.2f  %5li" % ("%7.2f" % t_ip, alg_i, 0.0, wrong))


NCCL_OUT = "\n".join([
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
    "validation: 1 graph: 0",
    "#",
    "NCCL version 2.27.7+cuda13.0",
    "#                                                              out-of-place                       in-place",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    _nccl_line(8, 4.10, 0.52),
    _nccl_line(1024, 4.20, 0.50),
    _nccl_line(268435456, 160.0, 0.55),
    "# Out of bounds values : 0 OK",
    "# Avg bus bandwidth    : 0 ",
])

P2P_OUT = """[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]
Device: 0, NVIDIA H200, pciBusID: 1b, pciDeviceID: 0, pciDomainID:0
P2P Connectivity Matrix
     D\\D     0
     0\t     1
Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)
   D\\D     0 
     0 2000.50 
Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)
   D\\D     0 
     0 2010.00 
Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)
   D\\D     0 
     0 2100.00 
Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)
   D\\D     0 
     0 2100.00 
P2P=Disabled Latency Matrix (us)
   GPU     0 
     0   2.50 

   CPU     0 
     0   1.75 
P2P=Enabled Latency (P2P Writes) Matrix (us)
   GPU     0 
     0   2.40 

   CPU     0 
     0   1.70 

NOTE: The CUDA Samples are not meant for performance measurements. Results may vary when GPU Boost is enabled.
"""


def test_parse_nccl_tests_reads_both_placements():
    t = fidelity.parse_nccl_tests(NCCL_OUT)
    assert list(t.size_bytes) == [8, 1024, 268435456]
    assert t.oop_time_us.tolist() == [4.10, 4.20, 160.0] and t.ip_time_us.tolist() == [0.52, 0.50, 0.55]
    assert (t.oop_wrong == 0).all() and fidelity.nccl_tests_version(NCCL_OUT) == "2.27.7+cuda13.0"


def test_parse_nccl_tests_without_rows_names_the_tool():
    with pytest.raises(ToolOutputError, match="nccl-tests output has no result rows"):
        fidelity.parse_nccl_tests("host: Test NCCL failure common.cu:900 'unhandled cuda error'\n")


def test_parse_p2p_diagonals():
    m = fidelity.parse_p2p(P2P_OUT)
    assert m["bw_uni_p2p_off"] == [[2000.50]] and m["bw_bi_p2p_on"] == [[2100.0]]
    assert m["lat_p2p_off_gpu"] == [[2.50]] and m["lat_p2p_off_cpu"] == [[1.75]]
    assert m["lat_p2p_on_gpu"] == [[2.40]]


def test_parse_p2p_missing_section_is_an_error():
    with pytest.raises(ToolOutputError, match="bw_uni_p2p_off"):
        fidelity.parse_p2p("Cuda failure p2p.cu:610: 'no CUDA-capable device is detected'\n")


def test_row_ratio_and_tolerance():
    r = fidelity.row("q", "tool", "s", 8, "us", 10.0, 10.9, "ours", True, 0.10, "GPU")
    assert r["ratio"] == pytest.approx(1.09) and r["within_tolerance"] is True
    r = fidelity.row("q", "tool", "s", 8, "us", 10.0, 11.2, "ours", True, 0.10, "GPU")
    assert r["within_tolerance"] is False
    r = fidelity.row("q", "tool", "s", 8, "us", 10.0, 30.0, "ours", False, None, "GPU")
    assert r["within_tolerance"] is None and math.isnan(r["tolerance"])


HOST = Method(timer="host", rotate_bytes=2**28)


def _ours(times: dict, method=HOST):
    rows = [{"op": "all_reduce", "backend": "nccl", "variant": "default", "world_size": 1, "dtype": "float32",
             "count": s // 4, "size_bytes": s, "iters": 20, "repeats": 1, "warmup": 5, "times_us": [t],
             **method.as_row(), "device": "GPU"} for s, t in times.items()]
    return collectives.tidy([collectives.RunResult("default", "nccl", 1, "ok", 0, 1.0, "", rows=rows, method=method)])


def test_compare_and_verdict_fail_when_one_size_is_off():
    nt = fidelity.parse_nccl_tests(NCCL_OUT)
    oop = HOST.but(placement="out-of-place")
    ours = pd.concat([_ours({8: 0.53, 1024: 0.51, 268435456: 0.80}),
                      _ours({8: 4.2, 1024: 4.3, 268435456: 161.0}, method=oop)])
    rows = (fidelity.compare_all_reduce(nt, ours, "-g 1", HOST, True, "GPU")
            + fidelity.compare_all_reduce(nt, ours, "-g 1", oop, True, "GPU"))
    t = pd.DataFrame(rows, columns=fidelity.COLUMNS)
    assert set(t.method) == {HOST.label, oop.label} and set(t.ours_method) == {HOST.description, oop.description}
    assert len(t) == 6 and set(t.tool_setting) == {"-g 1, in-place", "-g 1, out-of-place"}
    v = fidelity.verdict(t).set_index("tool_setting")
    assert not v.loc["-g 1, in-place", "holds"] and v.loc["-g 1, in-place", "within"] == 2
    assert v.loc["-g 1, in-place", "worst_ratio"] == pytest.approx(0.80 / 0.55)
    assert v.loc["-g 1, out-of-place", "holds"]
    assert v.loc["-g 1, in-place", "within_from_bytes"] != v.loc["-g 1, in-place", "within_from_bytes"]  # NaN
    assert v.loc["-g 1, out-of-place", "within_from_bytes"] == 8
    fig = ch.fidelity_ratio_figure(t, fidelity.TOLERANCES["all_reduce_time"])
    assert len(fig.axes) == 2 and fig.axes[0].get_lines()


def test_the_registered_comparisons_load_with_their_methods(tmp_path):
    t = studies.fidelity_tables()
    assert set(fidelity.COLUMNS) <= set(t.columns) and len(fidelity.verdict(t))
    assert set(t.setup) == {"1x NVIDIA H200", "2x NVIDIA H200"}
    ar = t[t.quantity == "all_reduce time per call"]
    assert ar.method.notna().all() and t[t.copy_harness.notna()].method.isna().all()
    fig = ch.fidelity_ratio_figure(t[t.setup == "2x NVIDIA H200"], fidelity.TOLERANCES["all_reduce_time"])
    assert fig.axes[1].get_legend_handles_labels()[1]
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ToolOutputError, match="lacks columns"):
        studies.read_fidelity(tmp_path / "bad.csv", "bad")


def test_verdict_ignores_rows_of_another_method_and_reads_a_saved_csv(tmp_path):
    good = fidelity.row("bw", "p2p", "diag", 160_000_000, "GB/s", 2000.0, 1990.0, "queued", True, 0.05, "GPU")
    other = fidelity.row("bw", "p2p", "diag", 160_000_000, "GB/s", 2000.0, 1000.0, "eager", False, 0.05, "GPU")
    pd.DataFrame([good, other], columns=fidelity.COLUMNS).to_csv(tmp_path / "f.csv", index=False)
    v = fidelity.verdict(pd.read_csv(tmp_path / "f.csv"))
    assert len(v) == 1 and bool(v.iloc[0].holds) and v.iloc[0].rows == 1


P2P_OUT_2 = """Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)
   D\\D     0      1 
     0 3940.00  40.10 
     1  40.20 3941.00 
Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)
   D\\D     0      1 
     0 3950.00 390.00 
     1 391.00 3952.00 
P2P=Disabled Latency Matrix (us)
   GPU     0      1 
     0   2.50  14.00 
     1  14.10   2.40 

   CPU     0      1 
     0   1.75   4.10 
     1   4.00   1.70 
P2P=Enabled Latency (P2P Writes) Matrix (us)
   GPU     0      1 
     0   2.40   0.90 
     1   0.91   2.30 

   CPU     0      1 
     0   1.70   1.60 
     1   1.60   1.70 
"""


def test_copy_rows_two_gpus_compare_peer_as_the_same_method_and_the_bounce_as_another():
    m = fidelity.parse_p2p(P2P_OUT_2)
    big, small = fidelity.P2P_LARGE_BYTES, fidelity.P2P_SMALL_BYTES
    cp = pd.DataFrame([
        {"path": "same_device", "harness": "queued", "size_bytes": big, "time_us": 1.0, "p2ptest_GBps": 3900.0},
        {"path": "same_device", "harness": "queued", "size_bytes": small, "time_us": 2.6, "p2ptest_GBps": 0.0},
        {"path": "peer", "harness": "queued", "size_bytes": big, "time_us": 1.0, "p2ptest_GBps": 380.0},
        {"path": "peer", "harness": "eager", "size_bytes": big, "time_us": 1.0, "p2ptest_GBps": 300.0},
        {"path": "peer", "harness": "queued", "size_bytes": small, "time_us": 1.2, "p2ptest_GBps": 0.0},
        {"path": "host_bounce", "harness": "queued", "size_bytes": big, "time_us": 1.0, "p2ptest_GBps": 27.0},
    ])
    t = pd.DataFrame(fidelity.copy_rows(m, cp, "2x GPU"), columns=fidelity.COLUMNS)
    peer = t[t.quantity == "GPU 0 -> GPU 1 peer copy bandwidth"].set_index("ours_method")
    q = peer.loc[fidelity.COPY_HARNESS_LABELS["queued"]]
    assert q.tool_value == 390.0 and q.ratio == pytest.approx(380 / 390) and q.within_tolerance
    # the tool's first peer copy (GPU 0 -> GPU 1, no warm-up) is shown but not counted: ours is warmed up
    assert not q.same_method and "timed first" in q.tool_setting
    e = peer.loc[fidelity.COPY_HARNESS_LABELS["eager"]]
    assert not e.same_method and not e.within_tolerance             # 300 vs 390: outside 5 %
    bounce = t[t.quantity.str.contains("through host memory bandwidth")].iloc[0]
    assert bounce.tool_value == 40.10 and not bounce.same_method      # the driver's staging is another method
    lat = t[t.quantity == "GPU 0 -> GPU 1 peer copy, 16 B, GPU time per copy"].iloc[0]
    assert lat.tool_value == 0.90 and math.isnan(lat.tolerance)
    diag = t[t.quantity == "same-device copy bandwidth, read+write counted"].iloc[0]
    assert diag.tool_value == 3940.0
    v = fidelity.verdict(t)
    assert set(v.quantity) == {"same-device copy bandwidth, read+write counted"}
    # the tool's two directions of one symmetric link, against each other; ours against the other direction
    own = t[t.quantity.str.contains("against its own other direction")].iloc[0]
    assert own.ours_value == 390.0 and own.tool_value == m["bw_uni_p2p_on"][1][0] and not own.same_method
    other = t[t.tool_setting.str.contains("the other direction")].iloc[0]
    assert other.tool_value == m["bw_uni_p2p_on"][1][0] and other.ours_value == 380.0 and not other.same_method
    # one GPU: only the diagonal is compared
    one = fidelity.copy_rows(fidelity.parse_p2p(P2P_OUT), cp, "1x GPU")
    assert {r["quantity"] for r in one} <= {"same-device copy bandwidth, read+write counted",
                                            "same-device copy, 16 B, GPU time per copy"}


def test_copy_rows_name_how_a_peer_copy_was_issued_where_the_run_recorded_it():
    m = fidelity.parse_p2p(P2P_OUT_2)
    big = fidelity.P2P_LARGE_BYTES
    cp = pd.DataFrame([
        {"path": "peer", "harness": h, "size_bytes": big, "time_us": 1.0, "p2ptest_GBps": 380.0,
         "issued_by": copybench.issued_by("peer", h)} for h in ("eager", "queued")])
    t = pd.DataFrame(fidelity.copy_rows(m, cp, "2x GPU"), columns=fidelity.COLUMNS)
    methods = set(t.ours_method)
    assert fidelity.COPY_HARNESS_LABELS["queued"] + "; cudaMemcpyPeerAsync" in methods
    assert fidelity.COPY_HARNESS_LABELS["eager"] + "; torch copy_" in methods


def test_copy_rows_set_each_peer_direction_against_the_tools_same_direction():
    m = fidelity.parse_p2p(P2P_OUT_2)
    big, small = fidelity.P2P_LARGE_BYTES, fidelity.P2P_SMALL_BYTES
    back_bw = m["bw_uni_p2p_on"][1][0]
    cp = pd.DataFrame([
        {"path": "peer", "harness": "queued", "size_bytes": big, "time_us": 1.0, "p2ptest_GBps": 380.0,
         "src_gpu": 0, "dst_gpu": 1},
        {"path": "peer", "harness": "queued", "size_bytes": big, "time_us": 1.0, "p2ptest_GBps": back_bw * 1.2,
         "src_gpu": 1, "dst_gpu": 0},
        {"path": "peer", "harness": "queued", "size_bytes": small, "time_us": 1.5, "p2ptest_GBps": 0.0,
         "src_gpu": 1, "dst_gpu": 0},
    ])
    t = pd.DataFrame(fidelity.copy_rows(m, cp, "2x GPU"), columns=fidelity.COLUMNS)
    fwd = t[(t.quantity == "GPU 0 -> GPU 1 peer copy bandwidth") & t.tool_setting.str.contains("timed first")]
    assert len(fwd) == 1 and fwd.iloc[0].ours_value == 380.0          # the reverse row is not mixed in
    back = t[t.quantity == "GPU 1 -> GPU 0 peer copy bandwidth"].iloc[0]
    assert back.tool_value == back_bw and back.ratio == pytest.approx(1.2) and bool(back.same_method)
    assert not back.within_tolerance                                  # 20 % off: the verdict must show it
    lat = t[t.quantity == "GPU 1 -> GPU 0 peer copy, 16 B, GPU time per copy"].iloc[0]
    assert lat.tool_value == m["lat_p2p_on_gpu"][1][0] and lat.ours_value == 1.5 and "GPU 1 -> GPU 0" in lat.tool_setting
    assert not fidelity.verdict(t).set_index("quantity").loc["GPU 1 -> GPU 0 peer copy bandwidth"].holds


def test_p2p_repeats_are_compared_by_their_median_and_each_against_it():
    m = fidelity.parse_p2p(P2P_OUT_2)
    slow = copy.deepcopy(m)
    slow["bw_uni_p2p_on"][0][1] = m["bw_uni_p2p_on"][0][1] * 0.8      # one run with a low GPU 0 -> GPU 1 figure
    runs = [m, copy.deepcopy(m), slow]
    med = fidelity.median_p2p(runs)
    assert med["bw_uni_p2p_on"][0][1] == m["bw_uni_p2p_on"][0][1]     # the median ignores the outlier
    rows = pd.DataFrame(fidelity.p2p_self_rows(runs, "2x GPU"), columns=fidelity.COLUMNS)
    assert len(rows) == 9 and set(rows.quantity) == {"copy bandwidth, p2pBandwidthLatencyTest against its own runs"}
    bad = rows[~rows.within_tolerance.astype(bool)]
    assert len(bad) == 1 and "run 3 of 3" in bad.iloc[0].ours_method and "GPU 0 -> GPU 1" in bad.iloc[0].tool_setting
    assert bad.iloc[0].ratio == pytest.approx(0.8)
    # one GPU: only the diagonal
    one = fidelity.p2p_self_rows([fidelity.parse_p2p(P2P_OUT)] * 2, "1x GPU")
    assert {r["tool_setting"] for r in one} == {"unidirectional, P2P=Disabled, diagonal"}


def test_reversed_p2p_runs_are_reindexed_and_each_direction_is_compared_where_it_was_timed_second():
    fwd = fidelity.parse_p2p(P2P_OUT_2)
    fwd["bw_uni_p2p_on"] = [[3950.0, 360.0], [390.0, 3952.0]]   # usual order: 0 -> 1 timed first, and slow
    rev_listed = copy.deepcopy(fwd)
    # listed 1,0: its [0][1] is physical 1 -> 0 (timed first there, slow), its [1][0] physical 0 -> 1
    rev_listed["bw_uni_p2p_on"] = [[3951.0, 362.0], [391.0, 3949.0]]
    back = fidelity.unreverse_p2p(rev_listed, 2)
    assert back["bw_uni_p2p_on"] == [[3949.0, 391.0], [362.0, 3951.0]]
    assert back["lat_p2p_on_gpu"][0][1] == rev_listed["lat_p2p_on_gpu"][1][0]
    big = fidelity.P2P_LARGE_BYTES
    cp = pd.DataFrame([
        {"path": "peer", "harness": "queued", "size_bytes": big, "time_us": 1.0, "p2ptest_GBps": 389.0,
         "src_gpu": 0, "dst_gpu": 1, "issued_by": "cudaMemcpyPeerAsync"},
        {"path": "peer", "harness": "queued", "size_bytes": big, "time_us": 1.0, "p2ptest_GBps": 388.0,
         "src_gpu": 1, "dst_gpu": 0, "issued_by": "cudaMemcpyPeerAsync"},
        {"path": "peer", "harness": "eager", "size_bytes": big, "time_us": 1.0, "p2ptest_GBps": 100.0,
         "src_gpu": 0, "dst_gpu": 1, "issued_by": "torch copy_"},
    ])
    t = pd.DataFrame(fidelity.p2p_order_rows(fwd, back, cp, "2x GPU"), columns=fidelity.COLUMNS)
    own = t[t.quantity.str.contains("timed after the other direction")].set_index("quantity")
    o01 = own.loc["GPU 0 -> GPU 1 peer copy bandwidth, p2pBandwidthLatencyTest timed after the other direction "
                  "against timed before it"]
    assert (o01.tool_value, o01.ours_value) == (360.0, 391.0) and not o01.within_tolerance   # its turn matters
    o10 = own.loc["GPU 1 -> GPU 0 peer copy bandwidth, p2pBandwidthLatencyTest timed after the other direction "
                  "against timed before it"]
    assert (o10.tool_value, o10.ours_value) == (362.0, 390.0)
    ours = t[~t.quantity.str.contains("timed after the other direction")].set_index("quantity")
    a = ours.loc["GPU 0 -> GPU 1 peer copy bandwidth"]
    assert a.tool_value == 391.0 and a.ours_value == 389.0 and bool(a.within_tolerance) and bool(a.same_method)
    assert "GPUs listed in reverse" in a.tool_setting and "cudaMemcpyPeerAsync" in a.ours_method
    assert len(ours) == 1       # GPU 1 -> GPU 0 is compared by copy_rows (second in the usual order); no eager
    b = pd.DataFrame(fidelity.copy_rows(fwd, cp, "2x GPU"), columns=fidelity.COLUMNS)
    b = b[(b.quantity == "GPU 1 -> GPU 0 peer copy bandwidth") & b.same_method].iloc[0]
    assert b.tool_value == 390.0 and b.ours_value == 388.0
    with pytest.raises(fidelity.ToolOutputError, match="expected 3 x 3"):
        fidelity.unreverse_p2p(rev_listed, 3)


def test_gap_summary_sets_each_method_against_the_one_process_per_gpu_tool():
    m = Method(harness="graph", timer="host", start="aligned")
    tool = {"who": "nccl-tests", "tool_shape": "-np 2 -g 1", **{c: None for c in Method().as_row()},
            "method": "nccl-tests -np 2 -g 1"}
    ours = {"who": "ours", "tool_shape": None, **m.as_row()}
    rows = []
    for size in (8, 1024, 2**20):
        for who, setting, t, skew in [(tool, "default", 6.0, None), (ours, "default", 9.0, 0.2),
                                      (tool, "GRAPH_MIXING_SUPPORT=0", 8.0, None),
                                      (ours, "GRAPH_MIXING_SUPPORT=0", 6.0, 1.0)]:
            rows.append({"iters": 20, **who, "nccl_setting": setting, "size_bytes": size,
                         "time_us": t * (10 if size == 2**20 else 1), "time_us_p10": t, "time_us_p90": t,
                         "start_skew_us": skew})
    s = fidelity.gap_summary(pd.DataFrame(rows)).set_index(["method", "nccl_setting"])
    mine = s.loc[(m.label, "default")]
    assert mine.gap_us == pytest.approx(3.0) and mine.ratio == pytest.approx(1.5) and mine.start_skew_us == 0.2
    assert mine.start_lead_us == m.start_lead_us and mine.who == "ours"     # the method's fields come along
    # compared under the same NCCL setting: the tool's own mixing-off time is the reference there
    assert s.loc[(m.label, "GRAPH_MIXING_SUPPORT=0")].ratio == pytest.approx(0.75)
    assert s.loc[("nccl-tests -np 2 -g 1", "default")].gap_us == 0.0
    with pytest.raises(ToolOutputError, match="lacks columns"):
        fidelity.gap_summary(pd.DataFrame({"iters": [20]}))


def test_the_registered_gap_studies_load_with_their_methods():
    for role in studies.GAP_ROLES:
        g = studies.gap(role)
        assert set(fidelity.GAP_COLUMNS) <= set(g.columns) and set(g.who) == {"ours", "nccl-tests"}
        assert g[g.who == "ours"].rotate_bytes.eq(2**20).all()
    idle = fidelity.gap_summary(studies.gap("allreduce-gap-idle"))
    leads = set(idle[(idle.who == "ours") & (idle.start == "aligned") & (idle.api == "torch")
                     & (idle.stream == "side")].start_lead_us)
    assert leads == {200, 2000, 20000}


@pytest.mark.integration
def test_compare_rebuilds_the_committed_two_gpu_table_from_its_raw_files(tmp_path):
    """benchmarks/fidelity.py --compare on a copy of the registered study gives the committed comparison:
    the same rows in the same order, the same numbers, and the methods the recorded strings map to."""
    import shutil
    import subprocess
    import sys

    from helpers import repo_root
    from helpers.core import recorded

    st = [s for s in recorded.measured_studies("fidelity") if s.id == "fidelity-h200x2-20261129e"][0]
    d = tmp_path / st.id
    shutil.copytree(st.path, d)
    p = subprocess.run([sys.executable, str(repo_root() / "benchmarks" / "fidelity.py"), "--compare", str(d)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    old, new = studies.read_fidelity(st.path / "fidelity.csv", st.id), studies.read_fidelity(d / "fidelity.csv", st.id)
    key = ["quantity", "tool_setting", "size_bytes", "method", "copy_harness", "same_method", "setup"]
    pd.testing.assert_frame_equal(old[key], new[key])
    for c in ("tool_value", "ours_value", "ratio"):
        assert old[c].equals(new[c]), c
    assert (new.dropna(subset=["method"]).ours_method
            == [Method.from_row(r).description for _, r in new.dropna(subset=["method"]).iterrows()]).all()


# ------------------------------------------------------------------ eight ranks, one process per GPU (--focus procs)
def _bench():
    import importlib.util

    from helpers import repo_root

    spec = importlib.util.spec_from_file_location("fidelity_bench", repo_root() / "benchmarks" / "fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_focused_run_launches_one_process_per_gpu_on_any_number_of_gpus():
    b = _bench()
    assert b.launch_shapes(8) == ["-g 8", "-t 8 -g 1", "-np 8 -g 1"]
    assert b.launch_shapes(8, b.FOCUS["procs"]["shapes"]) == ["-np 8 -g 1"]
    assert b.launch_shapes(1, b.FOCUS["procs"]["shapes"]) == ["-g 1"]
    assert b._tool_name("P2P_DISABLE=1", True, "-np 8 -g 1") == "nccl_tests_all_reduce_procs_graph_P2P_DISABLE_1"
    runs = b.our_runs(8, ["default", "P2P_DISABLE=1"], focus=True)
    assert [v for v, _ in runs] == ["default"] * 3 + ["P2P_DISABLE=1"] * 3
    from helpers.interconnect.suite import VARIANT_METHOD
    assert {m.label for _, m in runs} == {b.aligned(b.TORCH_GRAPH).label, b.aligned(b.NCCL_GRAPH).label,
                                          VARIANT_METHOD.label}
    assert len(b.our_runs(2, ["default", "P2P_DISABLE=1"])) == 10 + 4     # the full comparison is unchanged


def test_eight_rank_comparison_holds_or_fails_at_every_size_per_variant(tmp_path):
    """Synthetic tool output of nccl-tests -np 8 -g 1 -G 1 (three runs per variant) and our points: the
    comparison is built from the files, per variant, and the verdict fails where one size is 15 % off."""
    import json

    from helpers.interconnect.suite import VARIANT_METHOD

    b = _bench()
    sizes = [8 * 2**k for k in range(0, 26, 5)]            # 8 B .. 8 MiB, six sizes
    tool_t = {"default": lambda s: 20 + s / 100e3, "P2P_DISABLE=1": lambda s: 40 + s / 10e3}
    head = NCCL_OUT.split("\n")[:6]
    for v, f in tool_t.items():
        for k, jitter in enumerate((1.0, 1.02, 0.99)):
            text = "\n".join(head + [_nccl_line(s, f(s) * jitter * 1.01, f(s) * jitter) for s in sizes])
            (tmp_path / f"{b._tool_name(v, True, '-np 8 -g 1')}{'' if k == 0 else f'.r{k + 1}'}.txt").write_text(text)
    results = []
    for v, f in tool_t.items():
        for m in (b.aligned(b.TORCH_GRAPH), b.aligned(b.NCCL_GRAPH), VARIANT_METHOD):
            off = {sizes[2]: 1.15} if (v, m) == ("P2P_DISABLE=1", b.aligned(b.NCCL_GRAPH)) else {}
            rows = [{"op": "all_reduce", "backend": "nccl", "variant": v, "world_size": 8, "dtype": "float32",
                     "count": s // 4, "size_bytes": s, "iters": 20, "repeats": 1, "warmup": 5,
                     "times_us": [f(s) * 1.03 * off.get(s, 1.0)], **m.as_row(), "device": "GPU"} for s in sizes]
            results.append(collectives.RunResult(v, "nccl", 8, "ok", 0, 1.0, "", rows=rows, method=m))
    collectives.tidy(results, device_label="8x GPU").to_csv(tmp_path / "ours_collectives.csv", index=False)
    (tmp_path / "meta.json").write_text(json.dumps({"gpus": 8, "variants": list(tool_t), "shapes": ["-np 8 -g 1"],
                                                    "device": "8x GPU", "focus": "procs"}))
    t = b.compare(tmp_path)
    assert (tmp_path / "fidelity.csv").exists() and set(t.setup) == {"8x GPU"}
    v = fidelity.verdict(t)
    ours = v[v.quantity == "all_reduce time per call"].set_index(["tool_setting", "method"])
    at, an = b.aligned(b.TORCH_GRAPH).label, b.aligned(b.NCCL_GRAPH).label
    assert ours.loc[("-np 8 -g 1 -G 1, in-place", at), "holds"] and ours.loc[("-np 8 -g 1 -G 1, in-place", an), "holds"]
    assert ours.loc[("-np 8 -g 1 -G 1, P2P_DISABLE=1, in-place", at), "holds"]
    bad = ours.loc[("-np 8 -g 1 -G 1, P2P_DISABLE=1, in-place", an)]
    assert not bad.holds and (bad.within, bad.rows) == (5, 6) and bad.worst_ratio == pytest.approx(1.03 * 1.15, rel=0.02)
    # the study's own method is compared at every size but not counted (one buffer; the tool rotates)
    study = t[t.method == VARIANT_METHOD.label]
    assert len(study) == 2 * len(sizes) and not study.same_method.any()
    assert VARIANT_METHOD.label not in set(v.method.dropna())
    # the tool against its own runs, per variant: each of its 3 runs against their median
    own = v[v.quantity.str.contains("against its own runs")]
    assert set(own.tool_setting) == {"-np 8 -g 1 -G 1, in-place", "-np 8 -g 1 -G 1, P2P_DISABLE=1, in-place"}
    assert len(own) == 6 and own.holds.all()
