"""The owner-read P2P check (issue 35 item 6): a false clique grant leaves the owner reading its own fill."""
import numpy as np
import pytest

from helpers.interconnect import peercheck


def test_pattern_never_equals_the_fill_and_is_deterministic():
    p = peercheck.pattern(4096)
    assert (p != peercheck.FILL).all() and len(np.unique(p)) == 4096
    assert (p == peercheck.pattern(4096)).all()


def test_judge_tells_apart_ok_private_copy_partial_and_corrupt():
    p = peercheck.pattern(1000)
    assert peercheck.judge(p, p.copy()) == ("ok", 1000)
    assert peercheck.judge(p, np.zeros_like(p)) == ("private copy", 0)  # nccl#2335: the owner saw zeros
    half = p.copy()
    half[500:] = 0
    assert peercheck.judge(p, half) == ("partial", 500)
    assert peercheck.judge(p, -p) == ("corrupt", 0)


def test_judge_names_a_shape_mismatch():
    with pytest.raises(ValueError, match="read back"):
        peercheck.judge(peercheck.pattern(8), peercheck.pattern(7))


def test_bad_element_count_is_named():
    with pytest.raises(ValueError, match="elements must be >= 1"):
        peercheck.pattern(0)


def test_fewer_than_two_gpus_skips_with_the_reason():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        pytest.skip("this machine has two GPUs: the gpu-marked test covers it")
    rows = peercheck.all_pairs(elements=16)
    assert len(rows) == 1 and rows[0].verdict == "skipped"
    assert rows[0].reason and ("GPU" in rows[0].reason or "CUDA" in rows[0].reason), rows[0]


@pytest.mark.gpu
def test_two_gpus_owner_reads_the_writers_pattern():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU: no CUDA device")
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU: the check needs two")
    for r in peercheck.all_pairs(elements=1 << 16):
        assert r.verdict == "ok", r
        assert r.matched == r.elements == 1 << 16
