"""Copy sweeps on CPU tensors, message sizes derived from the model, and bad sizes."""
import numpy as np
import pytest
import torch

from helpers.interconnect import copies as copybench
from helpers.core import recorded
from helpers.interconnect.copies import CopyConfig, SizeError, parse_size


@pytest.mark.parametrize("text,expected", [
    (4096, 4096), ("4096", 4096), ("12KiB", 12 * 1024), ("12 KiB", 12 * 1024), ("256MiB", 256 * 2**20),
    ("1G", 2**30), ("1.5K", 1536), (np.int64(8), 8), (64.0, 64),
])
def test_parse_size_accepts(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad,msg", [
    (0, "not positive"), (-8, "not positive"), ("-1K", "cannot be parsed"), ("12 KB", "cannot be parsed"),
    ("lots", "cannot be parsed"), ("", "cannot be parsed"), (1.5, "whole number"), ("0.3K", "whole number"),
    (None, "not a size"), (True, "not a size"), ("8GiB", "larger than"),
])
def test_parse_size_rejects_with_the_input_named(bad, msg):
    with pytest.raises(SizeError, match=msg) as e:
        parse_size(bad, "max_bytes")
    assert "max_bytes" in str(e.value)


def test_decode_sizes_are_tokens_times_hidden_times_two():
    dec = copybench.decode_message_sizes()
    hidden = recorded.model_config("glm5")["architecture"]["hidden_size"]
    tokens = sorted(int(t) for t in recorded.load("recorded/copy_sweep.csv")["tokens"].dropna().unique())
    assert dec["tokens"].tolist() == tokens and len(tokens) == 4
    assert dec["size_bytes"].tolist() == [t * hidden * 2 for t in tokens]


def test_sweep_sizes_geometric_with_decode_sizes_included():
    s = copybench.sweep_sizes(64, "1MiB", 4, include=[12288, 786432, 2**30])
    assert s[0] == 64 and s[-1] == 2**20 and 12288 in s and 786432 in s and 2**30 not in s
    assert s == sorted(set(s))
    assert all(x % 4 == 0 for x in copybench.sweep_sizes(6, 100, 2, multiple_of=4))
    with pytest.raises(SizeError, match="larger than max_bytes"):
        copybench.sweep_sizes("1MiB", 64)
    with pytest.raises(SizeError, match="factor"):
        copybench.sweep_sizes(64, 128, 1)


def test_iterations_shrink_for_big_messages():
    assert copybench.iterations_for(64, 100, 2**26) == 100
    assert copybench.iterations_for(2**24, 100, 2**26) == 4
    assert copybench.iterations_for(2**28, 100, 2**26) == 3


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="unknown copy path"):
        CopyConfig(sizes=[64], paths=["warp"])
    with pytest.raises(ValueError, match="repeats"):
        CopyConfig(sizes=[64], repeats=0)
    with pytest.raises(SizeError, match="not positive"):
        CopyConfig(sizes=[64, 0])
    with pytest.raises(SizeError, match="empty"):
        CopyConfig(sizes=[])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
@pytest.mark.integration
def test_cpu_sweep_measures_cpu_memcpy_and_says_why_the_rest_is_skipped():
    cfg = CopyConfig(sizes=[64, 12288, 2**20], iters=20, repeats=3, warmup=1)
    sweep, skipped = copybench.run_copy_sweep(cfg, token_of={12288: 1})
    assert set(sweep.path) == {"cpu_memcpy"} and set(sweep.harness) == {"eager"}
    assert len(sweep) == 3 and sweep["label"].eq("cpu memcpy").all()
    assert (sweep.time_us > 0).all()
    assert (sweep.time_us_min <= sweep.time_us).all() and (sweep.time_us <= sweep.time_us_max).all()
    assert (sweep.time_us_p10 <= sweep.time_us_p90).all()
    assert sweep.bandwidth_GBps.to_numpy() == pytest.approx(sweep.size_bytes / (sweep.time_us * 1e3))
    assert sweep.loc[sweep.size_bytes == 12288, "tokens"].iloc[0] == 1
    # a 1 MiB copy takes longer than a 64 B one: the timer sees the work
    assert sweep.set_index("size_bytes").time_us[2**20] > sweep.set_index("size_bytes").time_us[64]
    reasons = dict(zip(zip(skipped.path, skipped.harness), skipped.reason))
    assert "GPU" in reasons[("same_device", "all")] and "GPU" in reasons[("cpu_memcpy", "graph")]
    assert "peer" in set(skipped.path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_asking_for_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(copybench.PathUnavailable, match="no CUDA GPU"):
        copybench.run_copy_sweep(CopyConfig(sizes=[64], device="cuda"))


@pytest.mark.integration
def test_cli_writes_tables(tmp_path):
    assert copybench.main(["--min-bytes", "64", "--max-bytes", "4KiB", "--factor", "8", "--iters", "5",
                           "--repeats", "2", "--warmup", "0", "--paths", "cpu_memcpy,same_device",
                           "--out", str(tmp_path)]) == 0
    import pandas as pd
    t = pd.read_csv(tmp_path / "copy_sweep.csv")
    assert len(t) >= 2 and (t.time_us > 0).all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU: needs an NVIDIA GPU")
def test_gpu_same_device_graph_is_faster_than_eager_for_small_copies():
    cfg = CopyConfig(sizes=[12288], paths=["same_device"], harnesses=["eager", "graph"], iters=100, repeats=3)
    sweep, _ = copybench.run_copy_sweep(cfg)
    t = sweep.set_index("harness").time_us
    assert t["graph"] < t["eager"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="one GPU: needs two GPUs")
def test_two_gpus_peer_and_bounce_move_the_data_and_skip_graph_with_the_reason():
    cfg = CopyConfig(sizes=[12288, 2**24], paths=["peer", "host_bounce"], iters=20, repeats=3)
    sweep, skipped = copybench.run_copy_sweep(cfg)
    got = set(zip(sweep.path, sweep.harness))
    assert {("host_bounce", "eager"), ("host_bounce", "queued")} <= got
    if torch.cuda.can_device_access_peer(0, 1):
        assert {("peer", "eager"), ("peer", "queued")} <= got, skipped.to_string()
        assert "one-device CUDA graph" in dict(zip(zip(skipped.path, skipped.harness), skipped.reason))[("peer", "graph")]
        # cudaMemcpyPeerAsync on a non-blocking stream, no fences: a small queued copy costs a few us,
        # less than torch's fenced, Python-issued one
        p = sweep[sweep.path == "peer"].set_index(["harness", "size_bytes"]).time_us
        assert p[("queued", 12288)] < p[("eager", 12288)]
    reasons = dict(zip(zip(skipped.path, skipped.harness), skipped.reason))
    assert "one-device CUDA graph" in reasons[("host_bounce", "graph")]
    # the bounce crosses two PCIe links in series: a 16 MiB bounce takes longer than a 16 MiB H2D would alone
    t = sweep[(sweep.path == "host_bounce") & (sweep.harness == "queued")].set_index("size_bytes").time_us
    assert t[2**24] > 2**24 / 64e3       # 64 GB/s: above one PCIe 5 x16 direction
    # the data really arrives on GPU 1
    for path, harness in (("host_bounce", "eager"), ("peer", "eager"), ("peer", "queued")):
        issue, _ = copybench._buffers(path, 4096, harness)
        issue()
        torch.cuda.synchronize(0), torch.cuda.synchronize(1)
        assert issue.dst.device.index == 1 and bool((issue.dst == 1).all()), (path, harness)


def test_reverse_is_for_the_peer_path_only():
    with pytest.raises(ValueError, match="reverse=True is for the peer path only"):
        copybench.measure("same_device", 64, "eager", iters=1, repeats=1, warmup=0, reverse=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2
                    or not torch.cuda.can_device_access_peer(1, 0), reason="one GPU or no P2P: needs two GPUs with peer access")
def test_reverse_peer_copy_moves_data_from_gpu1_to_gpu0():
    issue, dev = copybench._buffers("peer", 4096, "queued", reverse=True)
    assert dev == torch.device("cuda", 1) and issue.dst.device == torch.device("cuda", 0)
    issue()
    torch.cuda.synchronize(0), torch.cuda.synchronize(1)
    assert bool(torch.all(issue.dst == 1))
    st = copybench.measure("peer", 2**24, "queued", iters=5, repeats=3, warmup=2, reverse=True)
    assert st["time_us"] > 0


def test_cudalibs_loads_a_library_this_process_mapped_and_says_none_otherwise():
    from helpers.machine import cudalibs

    assert cudalibs.load("libc.so", []) is not None            # mapped into every CPython process on Linux
    assert cudalibs.load("no-such-library-xyz", ["no-such-library-xyz.so.9"]) is None
