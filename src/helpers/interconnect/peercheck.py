"""Step 3 of the four-step P2P check: GPU A writes a pattern into GPU B's buffer, then B reads it locally.

A GPUDirect clique grant inside a VM can pass the driver's check (`nvidia-smi topo -p2p r`) and a bandwidth
test while the writer's stores land in a private copy the owning GPU never sees: the owner then reads back
its own fill (zeros), NCCL hangs or sums wrong (NVIDIA/nccl#2335). Only the owner's local read tells a real
grant from a false one. `judge` is the pure decision (tested on the CPU); `peer_write_readback` runs it on
two GPUs with torch (a peer copy issued by the writer, then a read on the owner) and skips, with the reason,
where fewer than two GPUs are visible.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

FILL = 0  # what the owner's buffer holds before the write: a private-copy write leaves it unchanged

VERDICTS = {
    "ok": "the owner read back the writer's pattern: peer writes reach the owner's memory",
    "private copy": "the owner read back its own fill: the write landed elsewhere (a false clique grant, nccl#2335)",
    "partial": "the owner read back part of the pattern: peer writes are unreliable",
    "corrupt": "the owner read back values that are neither the pattern nor its fill",
    "skipped": "not run",
}


@dataclass(frozen=True)
class PeerCheck:
    writer: int | None
    owner: int | None
    peer_access: bool | None  # what the driver grants (torch.cuda.can_device_access_peer), not proof
    elements: int
    matched: int
    verdict: str
    reason: str

    def row(self) -> dict:
        return asdict(self)


def pattern(n: int, seed: int = 35) -> np.ndarray:
    """A pattern no buffer holds by accident: distinct, non-zero int32 values."""
    if n < 1:
        raise ValueError(f"peer check: elements must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    return rng.permutation(n).astype(np.int32) + 1  # 1..n, never the fill


def judge(expected: np.ndarray, read_back: np.ndarray) -> tuple[str, int]:
    """Verdict and count of matching elements for what the owner read against what the writer wrote."""
    expected, read_back = np.asarray(expected), np.asarray(read_back)
    if expected.shape != read_back.shape:
        raise ValueError(f"peer check: read back {read_back.shape} elements, wrote {expected.shape}")
    matched = int((expected == read_back).sum())
    if matched == expected.size:
        return "ok", matched
    if bool((read_back == FILL).all()):
        return "private copy", matched
    if matched > 0:
        return "partial", matched
    return "corrupt", matched


def skipped(reason: str, elements: int = 0) -> PeerCheck:
    return PeerCheck(None, None, None, elements, 0, "skipped", reason)


def peer_write_readback(writer: int = 0, owner: int = 1, elements: int = 1 << 20) -> PeerCheck:
    """GPU `writer` copies a pattern into a buffer on GPU `owner`; the owner compares it with its own copy."""
    try:
        import torch
    except ImportError:
        return skipped("torch is not installed", elements)
    if not torch.cuda.is_available():
        return skipped("no CUDA device is visible", elements)
    count = torch.cuda.device_count()
    if count < 2:
        return skipped(f"{count} GPU visible: a peer write needs two", elements)
    if writer == owner or not (0 <= writer < count and 0 <= owner < count):
        raise ValueError(f"peer check: writer {writer} and owner {owner} must be two of GPUs 0..{count - 1}")
    expected = pattern(elements)
    access = bool(torch.cuda.can_device_access_peer(writer, owner))
    src = torch.from_numpy(expected).to(f"cuda:{writer}")
    dst = torch.full((elements,), FILL, dtype=torch.int32, device=f"cuda:{owner}")
    with torch.cuda.device(writer):
        dst.copy_(src, non_blocking=True)  # issued on the writer's stream
        torch.cuda.synchronize(writer)
    with torch.cuda.device(owner):
        torch.cuda.synchronize(owner)
        local = torch.from_numpy(expected).to(f"cuda:{owner}")
        same = int((dst == local).sum().item())  # the owner's own read of its own memory
        read_back = dst.cpu().numpy()
    verdict, matched = judge(expected, read_back)
    if matched != same:
        verdict, matched = "corrupt", min(matched, same)
    how = "granted" if access else "not granted: torch staged the copy through host memory, so this row tests no P2P path"
    reason = f"{VERDICTS[verdict]}; driver peer access {how}"
    return PeerCheck(writer, owner, access, elements, matched, verdict, reason)


def all_pairs(elements: int = 1 << 20) -> list[PeerCheck]:
    """The check for every ordered pair of visible GPUs (one skipped row where fewer than two)."""
    try:
        import torch
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        count = 0
    if count < 2:
        return [peer_write_readback(elements=elements)]
    return [peer_write_readback(a, b, elements) for a in range(count) for b in range(count) if a != b]
