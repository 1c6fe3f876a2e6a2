"""FP8 (E4M3) weights for the emulated decode step (helpers.model.step): quantization, scaled matrix
products, and the trial that says whether this device runs them.

The recipe is the one serving engines call FP8 W8A8 with dynamic per-token activations (vLLM's and
SGLang's `fp8` channel-wise / compressed-tensors `FP8_DYNAMIC`): every weight of logical shape
(..., K, N), used as `x @ w`, holds E4M3 values and one float32 scale per output column (per expert and
column for the routed experts), from the column's largest magnitude; every activation row is quantized
when it is used, with one float32 scale per row (token). Products run through `torch._scaled_mm`
(rowwise scales: scale_a (M, 1), scale_b (1, N), both float32) and, for the routed experts,
`torch._scaled_grouped_mm` (scale_a (total_M,), scale_b (experts, N)); both take their second operand
column-major, so the values are stored as (..., N, K) contiguous and used transposed. Both need K and N
to be multiples of 16 (`check_shape`). DeepSeek's own FP8 checkpoints use 128 x 128 weight blocks and
1 x 128 activation groups instead; what a step reads differs from this recipe's only by the scales.

Where `torch._scaled_grouped_mm` is missing (on a CPU, or a GPU other than sm90/sm100), the routed
experts run one `torch._scaled_mm` per expert (`grouped_mm_loop`, like helpers.model.step.grouped_mm_loop:
it reads row counts on the host, so it cannot be captured in a CUDA graph).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8).max)      # 448
#: what torch._scaled_mm and _scaled_grouped_mm need K and N to be multiples of
ALIGN = 16
#: bytes of one scale (float32)
SCALE_BYTES = 4
#: smallest row or column magnitude a scale is taken from (an all-zero row gets a finite scale)
_EPS = 1e-12
#: torch kernels one activation quantization launches (quantize_rows; serving engines fuse them into one)
QUANTIZE_KERNELS = 5
#: experts quantized at a time (bounds the float32 temporary of a large expert tensor)
_CHUNK = 16


class Fp8Error(ValueError):
    """A shape or device cannot run the FP8 products."""


@dataclass
class QWeight:
    """An FP8 weight of logical shape (..., K, N): `q` is a transposed view of a contiguous (..., N, K)
    tensor of E4M3 values (column-major in its last two dims), `scale` the float32 scale of each output
    column, shape (..., N): value = q * scale."""

    q: torch.Tensor
    scale: torch.Tensor

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.q.shape)

    @property
    def nbytes(self) -> int:
        return self.q.numel() * self.q.element_size() + self.scale.numel() * self.scale.element_size()

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return (self.q.to(torch.float32) * self.scale.unsqueeze(-2)).to(dtype)

    def storage(self) -> torch.Tensor:
        """The contiguous (..., N, K) tensor `q` views."""
        return self.q.transpose(-2, -1)

    @classmethod
    def from_storage(cls, values_nk: torch.Tensor, scale: torch.Tensor) -> "QWeight":
        return cls(values_nk.contiguous().transpose(-2, -1), scale.contiguous())


def check_shape(name: str, shape: tuple[int, ...]) -> None:
    """K and N (the last two dims) multiples of ALIGN, or Fp8Error naming the weight and the fix."""
    k, n = shape[-2], shape[-1]
    if k % ALIGN or n % ALIGN:
        raise Fp8Error(f"weight {name} {tuple(shape)}: FP8 scaled products need its last two dims (K = {k}, "
                       f"N = {n}) to be multiples of {ALIGN}; use precision bf16, or a model file or TP degree "
                       f"whose per-rank shapes are")


def quantize(w: torch.Tensor, name: str = "weight") -> QWeight:
    """`w` (..., K, N) as E4M3 values with one scale per output column (per expert for 3-d weights),
    quantized a few experts at a time."""
    check_shape(name, tuple(w.shape))
    if w.dim() == 3 and w.shape[0] > _CHUNK:
        parts = [quantize(w[i:i + _CHUNK], name) for i in range(0, w.shape[0], _CHUNK)]
        return QWeight.from_storage(torch.cat([p.storage() for p in parts]), torch.cat([p.scale for p in parts]))
    wf = w.to(torch.float32)
    scale = wf.abs().amax(-2).clamp_min(_EPS) / FP8_MAX                     # (..., N)
    q = (wf / scale.unsqueeze(-2)).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return QWeight.from_storage(q.transpose(-2, -1), scale)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-row (per-token) quantization of `x` (M, K): E4M3 values and float32 scales (M, 1), in
    QUANTIZE_KERNELS kernels (max |x| per row in float32, clamp, scale, divide, cast)."""
    s = torch.linalg.vector_norm(x, float("inf"), dim=-1, keepdim=True, dtype=torch.float32)
    s = s.clamp_min_(_EPS).mul_(1.0 / FP8_MAX)
    return (x / s).to(FP8), s


def gather_rows(xq: torch.Tensor, s: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows `idx` of a quantized activation and of its scales (the values gathered as bytes)."""
    return xq.view(torch.uint8)[idx].view(FP8), s[idx]


def scaled_linear(xq: torch.Tensor, s: torch.Tensor, w: QWeight, out_dtype: torch.dtype) -> torch.Tensor:
    """xq (M, K) E4M3 with row scales s (M, 1) times `w` (K, N): (M, N) in `out_dtype`, by torch._scaled_mm."""
    return torch._scaled_mm(xq, w.q, scale_a=s, scale_b=w.scale.view(1, -1), out_dtype=out_dtype)


def emulated_linear(xq: torch.Tensor, s: torch.Tensor, w: QWeight, out_dtype: torch.dtype) -> torch.Tensor:
    """The same product from the same E4M3 values and scales, computed in float32 (what torch._scaled_mm
    computes, accumulation order aside): for a CPU whose torch._scaled_mm takes per-tensor scales only."""
    return ((xq.to(torch.float32) * s) @ w.dequantize(torch.float32)).to(out_dtype)


@functools.lru_cache(maxsize=None)
def cpu_rowwise() -> str | None:
    """None where this torch's CPU torch._scaled_mm takes row and column scales (torch 2.13 does), else
    its error (torch 2.11's oneDNN path asserts per-tensor scales: measured on the lent H200 machine)."""
    try:
        xq, s = quantize_rows(torch.ones(2, ALIGN))
        scaled_linear(xq, s, quantize(torch.ones(ALIGN, ALIGN)), torch.float32)
    except Exception as e:  # noqa: BLE001 - any failure means: not supported here
        return _error(e)
    return None


def cpu_products() -> str:
    """How FP8 products run on this machine's CPU, in words for the page."""
    err = cpu_rowwise()
    return ("torch._scaled_mm" if err is None else
            f"emulated in float32 from the same E4M3 values and scales (this torch's CPU torch._scaled_mm "
            f"takes per-tensor scales only: {err[:120]})")


def linear(xq: torch.Tensor, s: torch.Tensor, w: QWeight, out_dtype: torch.dtype) -> torch.Tensor:
    """xq (M, K) E4M3 with row scales s (M, 1) times `w` (K, N): (M, N) in `out_dtype`: torch._scaled_mm,
    or on a CPU whose torch._scaled_mm takes no row scales the emulated product (a CPU's FP8 products
    check numerics, never speed: require() refuses FP8 timing there)."""
    if xq.device.type == "cpu" and cpu_rowwise() is not None:
        return emulated_linear(xq, s, w, out_dtype)
    return scaled_linear(xq, s, w, out_dtype)


def grouped_mm(xq: torch.Tensor, s: torch.Tensor, w: QWeight, offs: torch.Tensor) -> torch.Tensor:
    """Rows of xq grouped by expert (offs: cumulative row counts, int32) times that expert's FP8 matrix,
    in one scaled grouped GEMM (torch._scaled_grouped_mm, bf16 out); experts without rows are not read."""
    return torch._scaled_grouped_mm(xq, w.q, s.view(-1), w.scale, offs=offs, out_dtype=torch.bfloat16)


def grouped_mm_loop(xq: torch.Tensor, s: torch.Tensor, w: QWeight, offs: torch.Tensor,
                    out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """The same product as one torch._scaled_mm per expert that has rows (host-side row counts: not
    capturable in a CUDA graph)."""
    out = torch.empty(xq.shape[0], w.shape[-1], dtype=out_dtype, device=xq.device)
    start = 0
    for e, end in enumerate(offs.tolist()):
        if end > start:
            out[start:end] = linear(xq[start:end], s[start:end], QWeight(w.q[e], w.scale[e]), out_dtype)
        start = end
    return out


@dataclass(frozen=True)
class Support:
    """What a trial call found on one device: `dense` and `grouped` are None where the product ran and
    matched a plain product, else the error."""

    device: str
    dense: str | None
    grouped: str | None

    @property
    def ok(self) -> bool:
        return self.dense is None

    @property
    def grouped_ok(self) -> bool:
        return self.dense is None and self.grouped is None

    def as_dict(self) -> dict:
        return {"device": self.device, "dense_error": self.dense, "grouped_error": self.grouped}


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"


def probe(device: str, out_dtype: torch.dtype = torch.bfloat16) -> Support:
    """Tiny trial calls of both products on `device` (a capability number is not enough: the kernels
    depend on how torch was built), each checked against a plain product of the dequantized values."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 32, generator=g)
    w = torch.randn(2, 32, 16, generator=g)
    dense = grouped = None
    try:
        xq, s = quantize_rows(x.to(device, out_dtype))
        qw = quantize(w[0].to(device))
        got = scaled_linear(xq, s, qw, out_dtype).float().cpu()
        want = (xq.float() * s).cpu() @ qw.dequantize().cpu()
        if not torch.allclose(got, want, rtol=2e-2, atol=2e-2):
            dense = f"torch._scaled_mm ran but gave a wrong product (max error {float((got - want).abs().max()):.3g})"
    except Exception as e:  # noqa: BLE001 - any failure means: not supported here
        dense = _error(e)
    if dense is None:
        try:
            qw3 = quantize(w.to(device))
            offs = torch.tensor([1, 3], dtype=torch.int32, device=device)
            got = grouped_mm(xq, s, qw3, offs).float().cpu()
            deq, xs = qw3.dequantize().cpu(), (xq.float() * s).cpu()
            want = torch.cat([xs[:1] @ deq[0], xs[1:] @ deq[1]])
            if not torch.allclose(got, want, rtol=2e-2, atol=2e-2):
                grouped = "torch._scaled_grouped_mm ran but gave a wrong product"
        except Exception as e:  # noqa: BLE001
            grouped = _error(e)
    else:
        grouped = "not tried: torch._scaled_mm failed"
    return Support(str(device), dense, grouped)


def device_name(device: str) -> str:
    if str(device).startswith("cuda"):
        d = torch.device(device)
        cap = torch.cuda.get_device_capability(d)
        return f"{torch.cuda.get_device_name(d)} (sm{cap[0]}{cap[1]})"
    return "this CPU"


def require(device: str) -> Support:
    """probe(), raising Fp8Error naming the device, the error and the fix where torch._scaled_mm fails."""
    sup = probe(device)
    if not sup.ok:
        raise Fp8Error(f"precision fp8: torch {torch.__version__} cannot run scaled FP8 matrix products on "
                       f"{device_name(device)} ({sup.dense}); use precision bf16")
    return sup
