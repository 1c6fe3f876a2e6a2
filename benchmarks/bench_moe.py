"""The routed experts' two grouped products at GLM-5's TP8 per-rank shapes, by each implementation the decode
step can use (helpers.model.moe_triton's Triton kernel, torch._grouped_mm / torch._scaled_grouped_mm), bf16
and FP8, at decode batches: time per MoE layer (CUDA graph of `--layers` layers with distinct weights, so no
layer's weights sit in L2), the weight bytes the layer must read (the experts that got rows) and the rate,
and each result's largest difference from torch's own product. Also small dense FP8 products (Triton
against torch._scaled_mm and bf16). Prints a table; `--out FILE` writes it as CSV.

    PYTHONPATH=src python3 benchmarks/bench_moe.py [--batches 1,8,64] [--layers 6] [--out moe.csv]

Needs a CUDA GPU with Triton (the lent H200).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from helpers.model import fp8, moe_triton  # noqa: E402
from helpers.model import fused as fz  # noqa: E402


def timed_graph(fn, repeats: int = 20) -> float:
    """ms per call of fn, replayed from a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(repeats):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / repeats


def _added(g: torch.Tensor) -> torch.Tensor:
    """A split-K product's partial sums added (the decode step adds them inside the expert activation)."""
    return g.sum(0).bfloat16() if g.dim() == 3 else g


def expert_weights(E: int, H: int, I: int, L: int, dev: str):
    """`L` layers' routed-expert weights at these shapes, bf16 (w13 gate/up, w2 down) and as FP8 QWeights,
    distinct per layer so that no layer's weights sit in L2."""
    w13 = [torch.randn(E, H, 2 * I, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(L)]
    w2 = [torch.randn(E, I, H, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(L)]
    return w13, w2, [fp8.quantize(w, "w13") for w in w13], [fp8.quantize(w, "w2") for w in w2]


def decode_rows(E: int, H: int, I: int, k: int, b: int, dev: str) -> tuple:
    """One decode step's rows into a MoE layer at batch b, routed to k random experts each and grouped by
    expert (fused.permute): (xs, offs, active, h1, xq, xsc, hq, hsc): xs for gate/up with its row offsets
    `offs` and how many experts got rows (`active`), h1 for down, and the FP8 forms of both."""
    ids = torch.stack([torch.randperm(E, device=dev)[:k] for _ in range(b)])
    rw = torch.rand(b, k, device=dev, dtype=torch.bfloat16)
    x = torch.randn(b, H, device=dev, dtype=torch.bfloat16)
    xs, _, _, offs, _ = fz.permute(ids, rw, x, E)
    h1 = torch.randn(xs.shape[0], I, device=dev, dtype=torch.bfloat16)
    (xq, xsc), (hq, hsc) = fp8.quantize_rows(xs), fp8.quantize_rows(h1)
    return xs, offs, int((torch.diff(offs, prepend=offs.new_zeros(1)) > 0).sum()), h1, xq, xsc, hq, hsc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=6144)
    ap.add_argument("--inter", type=int, default=256, help="per-rank expert width (2048 / TP8)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    dev = "cuda"
    torch.manual_seed(0)
    E, H, I, k, L = a.experts, a.hidden, a.inter, a.top_k, a.layers
    w13, w2, q13, q2 = expert_weights(E, H, I, L, dev)
    rows = []
    for b in [int(x) for x in a.batches.split(",")]:
        xs, offs, active, h1, xq, xsc, hq, hsc = decode_rows(E, H, I, k, b, dev)
        bytes_bf16 = active * (H * 2 * I + I * H) * 2
        bytes_fp8 = active * (H * 2 * I + I * H) + active * (2 * I + H) * 4
        impls = {
            ("bf16", "grouped_mm"): lambda l: (torch._grouped_mm(xs, w13[l], offs=offs), torch._grouped_mm(h1, w2[l], offs=offs)),
            ("bf16", "triton"): lambda l: (_added(moe_triton.moe_gemm(xs, w13[l], offs, split=True)),
                                           moe_triton.moe_gemm(h1, w2[l], offs)),
            ("fp8", "grouped_mm"): lambda l: (fp8.grouped_mm(xq, xsc, q13[l], offs), fp8.grouped_mm(hq, hsc, q2[l], offs)),
            ("fp8", "triton"): lambda l: (_added(moe_triton.moe_gemm_fp8(xq, xsc, q13[l], offs, split=True)),
                                          moe_triton.moe_gemm_fp8(hq, hsc, q2[l], offs)),
        }
        ref = {}
        for (prec, impl), fn in impls.items():
            try:
                out = fn(0)
                torch.cuda.synchronize()
                if impl == "grouped_mm":
                    ref[prec] = out
                err = max(float((o.float() - r.float()).abs().max() / r.float().abs().max().clamp_min(1e-6))
                          for o, r in zip(out, ref.get(prec, out)))
                ms = timed_graph(lambda: [fn(l) for l in range(L)]) / L
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"batch {b} {prec} {impl}: {type(e).__name__}: {str(e)[:300]}")
                continue
            nbytes = bytes_bf16 if prec == "bf16" else bytes_fp8
            rows.append(dict(op="moe layer", batch=b, precision=prec, impl=impl, active_experts=active,
                             ms=round(ms, 4), weight_MB=round(nbytes / 1e6, 1), GBps=round(nbytes / ms / 1e6, 1),
                             rel_err=f"{err:.2e}"))
            print(rows[-1], flush=True)
        # dense products at this batch: the shapes an FP8 step runs at decode (per-rank TP8)
        for name, (K, N) in {"q_a+kv_a+wk": (H, 2048 + 512 + 64 + 128), "o_proj": (8192 // 8 * 8, H),
                             "shared gate_up": (H, 2 * I), "shared down": (I, H), "q_b": (2048, 8 * 256)}.items():
            wd = [torch.randn(K, N, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(L)]
            qd = [fp8.quantize(w, name) for w in wd]
            xd = torch.randn(b, K, device=dev, dtype=torch.bfloat16)
            xdq, xds = fp8.quantize_rows(xd)
            for impl, fn in {"bf16 matmul": lambda l: xd @ wd[l],
                             "fp8 scaled_mm": lambda l: fp8.scaled_linear(xdq, xds, qd[l], torch.bfloat16),
                             "fp8 triton": lambda l: moe_triton.linear_fp8(xdq, xds, qd[l])}.items():
                try:
                    ms = timed_graph(lambda: [fn(l) for l in range(L)]) / L
                except Exception as e:  # noqa: BLE001
                    print(f"batch {b} {name} {impl}: {type(e).__name__}: {str(e)[:300]}")
                    continue
                nbytes = K * N * (2 if impl.startswith("bf16") else 1)
                rows.append(dict(op=name, batch=b, precision=impl.split()[0], impl=impl, active_experts=0,
                                 ms=round(ms, 4), weight_MB=round(nbytes / 1e6, 2),
                                 GBps=round(nbytes / ms / 1e6, 1), rel_err=""))
                print(rows[-1], flush=True)
    if a.out:
        import pandas as pd
        pd.DataFrame(rows).to_csv(a.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
