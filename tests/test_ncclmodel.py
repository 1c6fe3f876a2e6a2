"""NCCL's cost model (helpers.interconnect.ncclmodel) against its source constants worked by hand.

The hand cases read the raw rows of data/reference/nccl_tuning.csv with the csv module and apply the
formula of tuning.cc written out here, not the module's code path."""
import csv
import math

import pytest

from helpers.core import recorded
from helpers.interconnect import ncclmodel as m

KIB = 1024
DECODE_1 = 12 * KIB     # 1 token x hidden 6144 x 2 bytes
DECODE_64 = 768 * KIB   # 64 tokens


def raw(constant, version="2.30.7", **where):
    """One value of the committed CSV, read without the module (and without pandas)."""
    with open(recorded.data_dir() / "reference/nccl_tuning.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["constant"] == constant and r["nccl_version"] == version
                and all(r[k] == v for k, v in where.items())]
    assert len(rows) == 1, (constant, where, len(rows))
    return float(rows[0]["value"])


def test_ring_latency_is_base_plus_fourteen_pci_hops():
    # 8 ranks: nsteps = 2 x (8 - 1) = 14. LL: 6.6 + 14 x 1.0 = 20.6 us; Simple: 8.4 + 14 x 5.7 = 88.2 us.
    for proto, expected in (("LL", 20.6), ("Simple", 88.2)):
        by_hand = raw("base_latency", algo="ring", proto=proto) + 14 * raw("hw_latency", algo="ring", proto=proto, link="pci")
        assert by_hand == pytest.approx(expected)
        row = m.predictions(DECODE_1, 8, link_GBps=48.0).query("algo == 'ring' and proto == @proto")
        assert row["latency_us"].iloc[0] == pytest.approx(by_hand)


def test_gen5_link_decode_allreduce_by_hand():
    # Link NCCL reads for Gen5 x16: 16 lanes x 240 (100 Mbit/s per lane at 32 GT/s) / 80 = 48 GB/s.
    link = 16 * raw("pci_speed", key="link_speed=32.0 GT/s PCIe") / raw("pci_bw_divisor")
    assert link == 48.0
    # Ring search (sm100 speeds 90, 80, 70, 60, 50, 45, 40, 30, 24, ...): the first speed <= 48 is 45, one
    # channel (2 x 45 > 48); stepping down 40, 30, 24 (24 / 45 > 0.49), two channels of 24 fill the 48 GB/s
    # link, which ends the search; 24 < 25 so no duplication. Graph: 2 x 24 GB/s.
    assert m.ring_graph(link).n_channels == 2 and m.ring_graph(link).bw_intra_GBps == 24.0
    bus = 2 * 24.0
    # ring LL: bus bw min(282, 0.5 x 48) = 24; algorithm bw 24 x 8 / 14 = 13.714 GB/s;
    # 12 KiB: 20.6 + 12288 / (1000 x 13.714) = 20.6 + 0.896 = 21.496 us.
    ll_bus = min(raw("ll_max_bw", key="gpu=blackwell;nodes=1"), raw("ring_ll_bw_factor") * bus)
    lat = raw("base_latency", algo="ring", proto="LL") + 14 * raw("hw_latency", algo="ring", proto="LL", link="pci")
    t = lat + DECODE_1 / (raw("time_bytes_per_us_per_GBps") * ll_bus * 8 / 14)
    assert t == pytest.approx(21.496, abs=1e-3)
    assert m.allreduce_us(DECODE_1, 8, "ring", "LL", link_GBps=link) == pytest.approx(t)
    # ring Simple at 768 KiB: 88.2 + 786432 / (1000 x 48 x 8 / 14) = 88.2 + 28.672 = 116.872 us.
    lat_s = raw("base_latency", algo="ring", proto="Simple") + 14 * raw("hw_latency", algo="ring", proto="Simple", link="pci")
    t_s = lat_s + DECODE_64 / (1000 * bus * 8 / 14)
    assert t_s == pytest.approx(116.872, abs=1e-3)
    assert m.allreduce_us(DECODE_64, 8, "ring", "Simple", link_GBps=link) == pytest.approx(t_s)


def test_unknown_speed_on_blackwell_falls_back_to_the_placeholder_graph():
    # Unknown speed: 16 lanes x 60 / 80 = 12 GB/s. The lowest sm100 ring speed is 18 > 12: no ring fits, so
    # NCCL uses one channel at 0.1 GB/s. Ring Simple at 12 KiB: 88.2 + 12288 / (1000 x 0.1 x 8 / 14)
    # = 88.2 + 215.04 = 303.24 us; ring LL: 20.6 + 12288 / (1000 x 0.05 x 8 / 14) = 20.6 + 430.08 = 450.68 us,
    # so the tuner picks Simple even for one token.
    link = raw("pci_width_fallback") * raw("pci_speed_fallback") / raw("pci_bw_divisor")
    assert link == 12.0
    speeds = [raw("search_speed_intra", key=f"arch=sm100;index={i}") for i in range(12)]
    assert min(speeds) > link
    g = m.ring_graph(link)
    assert g.search_failed and g.n_channels == 1 and g.bw_intra_GBps == raw("search_failure_bw_intra")
    assert m.allreduce_us(DECODE_1, 8, "ring", "Simple") == pytest.approx(88.2 + 12288 / (1000 * 0.1 * 8 / 14))
    assert m.allreduce_us(DECODE_1, 8, "ring", "LL") == pytest.approx(20.6 + 12288 / (1000 * 0.05 * 8 / 14))
    pick = m.tuner_pick(DECODE_1, 8)
    assert (pick.algo, pick.proto) == ("ring", "Simple")
    # Hopper's search goes down to 3 GB/s, so the same link gives a real ring there.
    h = m.ring_graph(link, gpu="hopper")
    assert not h.search_failed and h.bus_bw_GBps == 12.0


def test_ring_graph_follows_the_cpu_vendor():
    # Intel root complex: a step costs 6/5 of its bandwidth. 48 GB/s: 45 x 1.2 = 54 > 48; 40 x 1.2 = 48 fits
    # one channel; 24 x 1.2 x 2 = 57.6 does not fit two; 20 x 1.2 x 2 = 48 fits two but 40 is not more than
    # 40. Then 40 >= 25 is duplicated into 2 x 20.
    g = m.ring_graph(48.0, cpu_vendor="intel")
    assert (g.n_channels, g.bw_intra_GBps) == (2, 20.0)
    assert m.ring_graph(24.0).bus_bw_GBps == 24.0


def test_time_grows_with_size_for_every_pair_and_for_the_pick():
    sizes = [0, 64, 1 * KIB, DECODE_1, 64 * KIB, DECODE_64, 4 * KIB * KIB, 64 * KIB * KIB]
    for link in (48.0, 24.0, 12.0):
        df = m.predictions(sizes, 8, link_GBps=link)
        for (_, _), g in df.groupby(["algo", "proto"]):
            assert g["time_us"].is_monotonic_increasing
        picked = df[df["tuner_pick"]]
        assert len(picked) == len(sizes)
        assert picked["time_us"].is_monotonic_increasing


def test_tuner_picks_ll_small_and_simple_large():
    small = m.tuner_pick(DECODE_1, 8, link_GBps=48.0)
    large = m.tuner_pick(64 * KIB * KIB, 8, link_GBps=48.0)
    assert (small.algo, small.proto) == ("ring", "LL")
    assert (large.algo, large.proto) == ("ring", "Simple")
    # the crossover, from the formulas: 20.6 + x / 13714.3 = 88.2 + x / 27428.6  ->  x = 67.6 x 27428.6 = 1.854 MB
    assert m.tuner_pick(1_800_000, 8, link_GBps=48.0).proto == "LL"
    assert m.tuner_pick(1_900_000, 8, link_GBps=48.0).proto == "Simple"


def test_band_ends_and_reasons():
    b = m.band(DECODE_1, 8)
    assert b.low_us <= b.mid_us <= b.high_us
    assert b.low_us == pytest.approx(m.allreduce_us(DECODE_1, 8, link_GBps=48.0))
    # high end, formula: one 12 GB/s channel, ring LL: 20.6 + 12288 / (1000 x 6 x 8 / 14) = 24.184 us
    assert b.high_us == pytest.approx(20.6 + 12288 / (1000 * 6 * 8 / 14))
    assert b.high_search_failed and b.high_fallback == "formula"
    p = m.band(DECODE_1, 8, fallback="placeholder")
    assert p.high_us == pytest.approx(303.24) and p.high_pick == "ring/Simple"
    b64 = m.band(DECODE_64, 8)
    assert b64.low_us < b64.mid_us < b64.high_us


def test_versions_agree_on_this_path():
    # 2.28.9, 2.29.7 and 2.30.7 carry the same PCI latencies, LL cap and factors; their bands must agree.
    ref = m.band(DECODE_64, 8, version="2.30.7")
    for v in ("2.28.9", "2.29.7"):
        b = m.band(DECODE_64, 8, version=v)
        assert (b.low_us, b.mid_us, b.high_us) == pytest.approx((ref.low_us, ref.mid_us, ref.high_us))


def test_vm_scenarios_table_is_labelled():
    df = m.vm_scenarios([DECODE_1, DECODE_64], 8)
    assert {"scenario", "message_bytes", "time_us", "latency_us", "link_GBps", "tuner_pick", "why"} <= set(df.columns)
    assert set(df["scenario"]) == {r.name for r in m.link_readings()}
    assert (df.groupby(["scenario", "message_bytes"])["tuner_pick"].sum() == 1).all()
    assert not (df["proto"] == "LL128").any()


@pytest.mark.parametrize("call, match", [
    (lambda: m.allreduce_us(DECODE_1, 1), r"nranks=1"),
    (lambda: m.allreduce_us(-1, 8), r"message_bytes=-1"),
    (lambda: m.allreduce_us(1.5, 8), r"message_bytes=1.5"),
    (lambda: m.allreduce_us(DECODE_1, 8, proto="LL64"), r"proto='LL64'"),
    (lambda: m.allreduce_us(DECODE_1, 8, proto="LL128"), r"proto='LL128'.*PATH_NVB"),
    (lambda: m.allreduce_us(DECODE_1, 8, algo="nvls"), r"algo='nvls'"),
    (lambda: m.allreduce_us(DECODE_1, 8, link="nvlink"), r"link='nvlink'"),
    (lambda: m.allreduce_us(DECODE_1, 8, link_GBps=0.0), r"link_GBps=0.0"),
    (lambda: m.allreduce_us(DECODE_1, 8, link_GBps=math.nan), r"link_GBps=nan"),
    (lambda: m.allreduce_us(DECODE_1, 8, version="2.27.3"), r"version='2.27.3'"),
    (lambda: m.allreduce_us(DECODE_1, 8, gpu="ampere"), r"gpu='ampere'"),
    (lambda: m.band(DECODE_1, 8, fallback="guess"), r"fallback='guess'"),
    (lambda: m.pcie_link_GBps(20.0), r"gt_per_s=20.0"),
    (lambda: m.predictions([], 8), r"message_bytes=\[\]"),
])
def test_bad_input_is_refused_by_name(call, match):
    with pytest.raises(m.NcclModelError, match=match):
        call()


def test_tree_is_never_picked_on_this_path():
    # Tree's latency (6.8 + 14 x 1.0 = 20.8 us LL) is above the ring's (20.6) and its bandwidth below
    # (LL: / 3.8 and x 0.5), so from 1 B to 1 GB the pick is always a ring, at every link reading.
    sizes = sorted({int(10 ** (k / 20)) for k in range(0, 181)})
    for link in (48.0, 24.0, 12.0):
        picked = m.predictions(sizes, 8, link_GBps=link).query("tuner_pick")
        assert set(picked["algo"]) == {"ring"}, link
