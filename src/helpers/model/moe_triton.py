"""The routed experts' grouped products as one Triton kernel each, the way a serving engine's fused-MoE
kernel runs them at decode (SGLang's and vLLM's `fused_moe` Triton kernel: one program per expert and
column tile, each reading only its own expert's weight tile and multiplying it by that expert's rows).

    y = moe_gemm(x, w, offs)             # bf16: x (T, K) rows grouped by expert, w (E, K, N)
    y = moe_gemm_fp8(xq, xs, w, offs)    # FP8 W8A8: xq (T, K) E4M3, row scales xs (T, 1),
                                         #   w an fp8.QWeight (E, K, N), column scales (E, N)
    y = linear(x, w) / linear_fp8(xq, xs, w)   # a dense product of a few rows: one group holding them all

`offs` are the cumulative row counts per expert (int32, as `torch._grouped_mm` takes them): expert e owns
rows offs[e-1]:offs[e]. The grid is fixed by the shapes alone (experts x column tiles), so the kernel is
captured in a CUDA graph whatever the routing; a program whose expert got no rows returns at once, so an
expert without tokens is never read. Rows are taken BLOCK_M at a time (16, the smallest `tl.dot` tile);
the column tile, and where needed a split of K, are chosen from how many experts can have rows, so that
batch 1 (8 experts active) still keeps every SM streaming weights (`config`). Accumulation is float32; FP8 products multiply the row and
column scales into the float32 sum, as `torch._scaled_grouped_mm` does.

Why not `torch._grouped_mm`: measured on one H200 at GLM-5's TP8 shapes (data/measured/
step-fused-h200-20261201), its experts ran at 2.3x the engine's composite at batch 64 in bf16 and 3.1x in
FP8; its CUTLASS tiles are sized for large row counts, and decode gives each expert one to a few rows.

Triton is imported only when a kernel is first used: a machine without it (the CPU CI machine) keeps
`torch._grouped_mm` or the per-expert loop (helpers.model.step.ops.MOE_IMPLS); `available()` says which.
"""
from __future__ import annotations

import functools

import torch

#: rows a program multiplies at a time (tl.dot's smallest M)
BLOCK_M = 16
#: dense FP8 products of at most this many rows take `linear_fp8` in the fused step (decode's few rows;
#: torch._scaled_mm's cuBLASLt kernels are tuned for many)
DENSE_FP8_ROWS = 16
#: programs wanted in flight: about two per SM of an H200 (132 SMs), so that weight streaming saturates
TARGET_PROGRAMS = 264


@functools.lru_cache(maxsize=None)
def available(device: str) -> bool:
    """Whether the Triton kernels run on `device`: a CUDA device and an importable Triton."""
    if not str(device).startswith("cuda"):
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def config(rows: int, experts: int, n: int, k: int, fp8: bool,
           split_ok: bool = True) -> tuple[int, int, int, int, int]:
    """(BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages) for `rows` grouped rows over `experts` experts of
    an (K, N) weight. The column tile is the widest power of two (32 to 128) that gives the experts that can
    have rows about TARGET_PROGRAMS programs; where even 32 columns give too few (batch 1's gate/up product:
    8 experts x 512 columns), K is split over up to 8 programs whose float32 partial sums the consumer adds
    (`moe_gemm` returns them stacked); without `split_ok` (a consumer that takes the product whole) K is not
    split, and the pipeline depth follows the K loop the program then runs."""
    active = max(1, min(experts, rows))
    block_k = 128 if not fp8 else 256
    block_k = min(block_k, max(32, 1 << (max(k, 32) - 1).bit_length()))
    # 32 columns at the narrowest: measured on the H200 (benchmarks/tune_moe.py), FP8 dense products of 16
    # columns ran 5 to 25 % slower than of 32 (o_proj, the fused q_a + kv_a, the shared expert's down)
    narrowest = 32
    block_n = 128
    while block_n > narrowest and active * -(-n // block_n) < TARGET_PROGRAMS:
        block_n //= 2
    split = 1
    while (split_ok and split < 8 and active * -(-n // block_n) * split * 2 <= TARGET_PROGRAMS
           and k // (split * 2) >= 2 * block_k):
        split *= 2
    # a program whose K loop runs once or twice gains nothing from a deep pipeline, and four stages of shared
    # memory leave one program per SM: measured on the H200 (benchmarks/tune_moe.py), the experts' down
    # product (K 256 per rank) ran 1.3x to 1.6x faster with two stages (FP8 at batch 64: 147 -> 104 µs)
    stages = 2 if -(-k // split) <= 2 * block_k else 4
    return block_n, block_k, split, 4, stages


_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit
        def kernel(x, w, out, offs, xs, ws, N, K, K_PER,
                   sxm, sxk, swe, swk, swn, sos, som, son, swse, swsn,
                   FP8: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
            e = tl.program_id(0)
            pn = tl.program_id(1)
            pk = tl.program_id(2)
            end = tl.load(offs + e)
            start = tl.load(offs + tl.maximum(e - 1, 0), mask=e > 0, other=0)
            if end > start:
                rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
                rk = tl.arange(0, BLOCK_K)
                n_ok = rn < N
                wbase = w + e.to(tl.int64) * swe
                obase = out + pk.to(tl.int64) * sos
                k_lo = pk * K_PER
                k_hi = tl.minimum(k_lo + K_PER, K)
                if FP8:
                    col_scale = tl.load(ws + e.to(tl.int64) * swse + rn * swsn, mask=n_ok, other=0.0)
                for m0 in range(start, end, BLOCK_M):
                    rm = m0 + tl.arange(0, BLOCK_M)
                    m_ok = rm < end
                    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                    for k0 in range(k_lo, k_hi, BLOCK_K):
                        kk = k0 + rk
                        k_ok = kk < k_hi
                        a = tl.load(x + rm[:, None].to(tl.int64) * sxm + kk[None, :] * sxk,
                                    mask=m_ok[:, None] & k_ok[None, :], other=0.0)
                        b = tl.load(wbase + kk[:, None].to(tl.int64) * swk + rn[None, :] * swn,
                                    mask=k_ok[:, None] & n_ok[None, :], other=0.0)
                        acc = tl.dot(a, b, acc)
                    if FP8:
                        row_scale = tl.load(xs + rm, mask=m_ok, other=0.0)
                        acc = acc * row_scale[:, None] * col_scale[None, :]
                    tl.store(obase + rm[:, None].to(tl.int64) * som + rn[None, :] * son,
                             acc.to(out.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])
        _KERNEL = kernel
    return _KERNEL


def _launch(x, w, offs, xs, ws, fp8: bool, out_dtype: torch.dtype, allow_split: bool) -> torch.Tensor:
    e, k, n = w.shape
    rows = x.shape[0]
    if x.shape[1] != k or offs.numel() != e:
        raise ValueError(f"moe_gemm: rows {tuple(x.shape)} against weights {tuple(w.shape)} with {offs.numel()} "
                         f"row offsets: expected (T, {k}) rows and {e} offsets")
    block_n, block_k, split, warps, stages = config(rows, e, n, k, fp8, split_ok=allow_split)
    k_per = -(-k // split)
    k_per = -(-k_per // block_k) * block_k
    split = -(-k // k_per)
    if split > 1:
        out = torch.empty(split, rows, n, dtype=torch.float32, device=x.device)
    else:
        out = torch.empty(1, rows, n, dtype=out_dtype, device=x.device)
    grid = (e, -(-n // block_n), split)
    if xs is None:
        xs_t, ws_t, swse, swsn = x, x, 0, 0
    else:
        xs_t, ws_t, swse, swsn = xs, ws, ws.stride(0), ws.stride(1)
    _kernel()[grid](x, w, out, offs, xs_t, ws_t, n, k, k_per,
                    x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2),
                    out.stride(0), out.stride(1), out.stride(2), swse, swsn,
                    FP8=fp8, BLOCK_M=BLOCK_M, BLOCK_N=block_n, BLOCK_K=block_k,
                    num_warps=warps, num_stages=stages)
    return out if split > 1 else out[0]


def moe_gemm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, split: bool = False) -> torch.Tensor:
    """Rows of x (T, K) grouped by expert (offs: cumulative row counts, int32) times that expert's (K, N)
    matrix of w (E, K, N): (T, N) in x's dtype; the same product as torch._grouped_mm(x, w, offs=offs).
    With `split`, where `config` splits K, the float32 partial sums (S, T, N) instead: their sum over the
    first dim is the product (the consumer adds them: helpers.model.fused.gated_act does)."""
    return _launch(x, w, offs, None, None, False, x.dtype, split)


def moe_gemm_fp8(xq: torch.Tensor, xs: torch.Tensor, w, offs: torch.Tensor,
                 out_dtype: torch.dtype = torch.bfloat16, split: bool = False) -> torch.Tensor:
    """FP8 rows xq (T, K) with row scales xs (T, 1) grouped by expert times that expert's FP8 weight
    (an fp8.QWeight of logical shape (E, K, N), column scales (E, N)): (T, N) in `out_dtype`; the same
    product as fp8.grouped_mm (torch._scaled_grouped_mm). `split` as for moe_gemm."""
    return _launch(xq, w.q, offs, xs.reshape(-1), w.scale, True, out_dtype, split)


def linear(x: torch.Tensor, w: torch.Tensor, split: bool = False) -> torch.Tensor:
    """A dense bf16 product (one 'expert' holding every row): x (M, K) times w (K, N), one kernel. For the
    FP8 step's one bf16 product of decode's few rows, the indexer's weights_proj (32 columns: cuBLAS runs it
    as two kernels). `split` as for moe_gemm (the consumer adds the partial sums: fused.indexer_scores)."""
    return _launch(x, w.unsqueeze(0), _one_group(x.shape[0], x.device), None, None, False, x.dtype, split)


def linear_fp8(xq: torch.Tensor, xs: torch.Tensor, w, out_dtype: torch.dtype = torch.bfloat16,
               split: bool = False) -> torch.Tensor:
    """A dense FP8 product (one 'expert' holding every row): xq (M, K) E4M3, row scales xs (M, 1), w an
    fp8.QWeight (K, N). For decode's few rows, where cuBLASLt's FP8 GEMM is tuned for many. `split` as for
    moe_gemm (the shared expert's gate/up product: 512 columns per rank are too few programs unsplit)."""
    return _launch(xq, w.q.unsqueeze(0), _one_group(xq.shape[0], xq.device), xs.reshape(-1), w.scale.unsqueeze(0),
                   True, out_dtype, split)


#: (device, rows) -> the row offsets of one group holding every row, made once (the first, eager step
#: makes it; a CUDA graph captured later reads it and launches no kernel to fill it)
_ONE_GROUP: dict[tuple[str, int], torch.Tensor] = {}


def _one_group(rows: int, device) -> torch.Tensor:
    key = (str(device), rows)
    if key not in _ONE_GROUP:
        _ONE_GROUP[key] = torch.full((1,), rows, dtype=torch.int32, device=device)
    return _ONE_GROUP[key]
