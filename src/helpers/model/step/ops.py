"""The pieces the DecodeStep's programs are made of: one op (Op), RMSNorm and rotary embedding, the experts'
grouped GEMM (and its per-expert fallback), and the fused x-projection weight (q_a + kv_a with the indexer's
wk and weights_proj) an engine reads as one product."""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable

import torch

from .. import fp8

#: id of a layer's qkv_a values -> (a weak reference to them, x_projection's result); dropped with them
_X_PROJ: dict[int, tuple] = {}


def _plain(w) -> torch.Tensor:
    return w.q if isinstance(w, fp8.QWeight) else w


def x_projection(W: dict) -> tuple:
    """The products that read a layer's normalized input x as one weight, as an engine fuses them: q_a + kv_a
    (qkv_a), the indexer's wk and, where it is held in the same format, its weights_proj (bf16: all three;
    fp8: the first two, weights_proj stays bf16). Returns (fused weight, widths of its parts). The layer's
    own entries become views into the fused weight (no second copy is held), so the unfused path reads the
    same memory; done once per layer and remembered."""
    hit = _X_PROJ.get(id(_plain(W["qkv_a"])))
    if hit is not None and hit[0]() is _plain(W["qkv_a"]):
        return hit[1]
    names = ["qkv_a"] + [n for n in ("idx_wk", "idx_weights_proj") if n in W
                         and isinstance(W[n], fp8.QWeight) == isinstance(W["qkv_a"], fp8.QWeight)]
    widths = tuple(int(W[n].shape[-1]) for n in names)
    if len(names) == 1:
        out = (W["qkv_a"], widths)
    elif isinstance(W["qkv_a"], fp8.QWeight):
        store = torch.cat([W[n].storage() for n in names], 0)
        scale = torch.cat([W[n].scale for n in names], -1)
        fused = fp8.QWeight.from_storage(store, scale)
        start = 0
        for n, w in zip(names, widths):
            W[n] = fp8.QWeight.from_storage(store[start:start + w], scale[start:start + w])
            start += w
        out = (fused, widths)
    else:
        fused = torch.cat([W[n] for n in names], -1)
        start = 0
        for n, w in zip(names, widths):
            W[n] = fused[:, start:start + w]
            start += w
        out = (fused, widths)
    key = _plain(W["qkv_a"])
    _X_PROJ[id(key)] = (weakref.ref(key), out)
    weakref.finalize(key, _X_PROJ.pop, id(key), None)
    return out


@dataclass
class Op:
    name: str
    component: str
    fn: Callable[[], None]
    stream: str = "main"      # "alt": on the second stream where the step overlaps the shared expert
    kind: str = "op"          # "fork" / "join": the stream events of the overlap (no kernels)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved rotary embedding on the last dim; cos/sin broadcast to x[..., ::2]."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


#: "auto": the Triton fused-MoE kernel (helpers.model.moe_triton) on a CUDA device with Triton, else one
#: grouped GEMM (torch._grouped_mm, or torch._scaled_grouped_mm for FP8 experts) where the device has it,
#: else one product per expert ("loop")
MOE_IMPLS = ("auto", "triton", "grouped_mm", "loop")


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Rows of x grouped by expert (offs: cumulative row counts, int32) times that expert's matrix, in
    one grouped GEMM (torch._grouped_mm); experts without rows are not read."""
    return torch._grouped_mm(x, w, offs=offs)


def grouped_mm_loop(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """The same product as one matmul per expert that has rows (reads the row counts on the host, so it
    cannot be captured in a CUDA graph): the fallback where torch._grouped_mm is not available."""
    out = x.new_empty(x.shape[0], w.shape[-1])
    start = 0
    for e, end in enumerate(offs.tolist()):
        if end > start:
            out[start:end] = x[start:end] @ w[e]
        start = end
    return out


#: what each activation quantized for an FP8 product is called in op names
QUANTIZED = {"x": "input", "qc": "q_a", "o": "attention output", "x2": "MLP input", "da": "dense activation",
              "sa": "shared activation", "ga": "expert activation"}
