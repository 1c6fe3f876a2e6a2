"""The sweep behind helpers.model.moe_triton.config: each product the decode step gives the Triton kernel, at
GLM-5's TP8 per-rank shapes, timed under each tile configuration (column tile, pipeline stages, warps, split
of K), beside the configuration `config` picks. Per product and batch it prints the fastest configurations,
the one `config` chose and the weight bytes' rate; `--out FILE` writes every point as CSV.

    PYTHONPATH=src python3 benchmarks/tune_moe.py [--batches 1,64] [--layers 6] [--out tune.csv]

Time per point: a CUDA graph of `--layers` products with distinct weights (none sits in L2), replayed 20
times, as benchmarks/bench_moe.py times a layer. Needs a CUDA GPU with Triton (the lent H200).
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_moe import decode_rows, expert_weights, timed_graph  # noqa: E402
from helpers.model import fp8, moe_triton  # noqa: E402


def _products(E: int, H: int, I: int, k: int, b: int, L: int, dev: str):
    """(name, precision, weight bytes read, fn(layer)) for each product of one decode step's MoE layer and
    the dense few-row products, at batch b."""
    xs, offs, active, h1, xq, xsc, hq, hsc = decode_rows(E, H, I, k, b, dev)
    w13, w2, q13, q2 = expert_weights(E, H, I, L, dev)
    out = [("experts gate_up", "bf16", active * H * 2 * I * 2, lambda l: moe_triton.moe_gemm(xs, w13[l], offs, split=True)),
           ("experts down", "bf16", active * I * H * 2, lambda l: moe_triton.moe_gemm(h1, w2[l], offs)),
           ("experts gate_up", "fp8", active * H * 2 * I, lambda l: moe_triton.moe_gemm_fp8(xq, xsc, q13[l], offs, split=True)),
           ("experts down", "fp8", active * I * H, lambda l: moe_triton.moe_gemm_fp8(hq, hsc, q2[l], offs))]
    if b <= moe_triton.DENSE_FP8_ROWS:
        wp = [torch.randn(H, 32, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(L)]
        xb = torch.randn(b, H, device=dev, dtype=torch.bfloat16)
        out.append(("indexer weights_proj", "bf16", H * 32 * 2, lambda l: moe_triton.linear(xb, wp[l], split=True)))
        for name, (K, N) in {"q_a+kv_a+wk": (H, 2048 + 512 + 64 + 128), "o_proj": (8192, H), "q_b": (2048, 2048),
                             "shared gate_up": (H, 2 * I), "shared down": (I, H)}.items():
            qd = [fp8.quantize(torch.randn(K, N, device=dev, dtype=torch.bfloat16) * 0.02, name) for _ in range(L)]
            xd, xds = fp8.quantize_rows(torch.randn(b, K, device=dev, dtype=torch.bfloat16))
            split = name == "shared gate_up"
            out.append((name, "fp8", K * N, lambda l, qd=qd, xd=xd, xds=xds, split=split:
                        moe_triton.linear_fp8(xd, xds, qd[l], split=split)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    dev, E, H, I, k = "cuda", 256, 6144, 256, 8
    torch.manual_seed(0)
    chosen_config = moe_triton.config
    rows = []
    for b in [int(x) for x in a.batches.split(",")]:
        for name, prec, nbytes, fn in _products(E, H, I, k, b, a.layers, dev):
            picked = {}

            def spy(*args, **kw):
                picked["cfg"] = chosen_config(*args, **kw)
                return picked["cfg"]
            moe_triton.config = spy
            fn(0)
            base = picked["cfg"]
            widths = (16, 32, 64, 128) if (prec == "fp8" and "experts" not in name) else (32, 64, 128)
            points = [None] + list(itertools.product(widths, (1, 2, 4), (4, 8), (None,))) \
                + [(base[0], st, 4, 1) for st in (1, 2, 4)]
            for p in points:
                if p is None:
                    cfg = base
                else:
                    bn, st, wa, sp = p
                    cfg = (bn, base[1], base[2] if sp is None else sp, wa, st)
                    if cfg == base:
                        continue
                # a product whose consumer takes it whole is never split (config's split_ok)
                moe_triton.config = lambda *args, cfg=cfg, **kw: (cfg if kw.get("split_ok", True)
                                                                  else (cfg[0], cfg[1], 1, cfg[3], cfg[4]))
                try:
                    ms = timed_graph(lambda: [fn(l) for l in range(a.layers)]) / a.layers
                except Exception as e:  # noqa: BLE001 - a tile that does not compile is reported, not fatal
                    print(f"{name} {prec} b{b} {cfg}: {type(e).__name__}: {str(e)[:120]}")
                    continue
                rows.append(dict(product=name, precision=prec, batch=b, block_n=cfg[0], block_k=cfg[1],
                                 split=cfg[2], warps=cfg[3], stages=cfg[4], chosen=p is None,
                                 us=round(ms * 1e3, 2), GBps=round(nbytes / ms / 1e6, 1)))
            moe_triton.config = chosen_config
            mine = [r for r in rows if r["product"] == name and r["precision"] == prec and r["batch"] == b]
            best = sorted(mine, key=lambda r: r["us"])[:3]
            ch = next(r for r in mine if r["chosen"])
            print(f"{name:22s} {prec} b{b:<3d} chosen {ch['us']:7.2f} us {ch['GBps']:7.1f} GB/s "
                  f"(n{ch['block_n']} s{ch['stages']} w{ch['warps']} k{ch['split']}) | best: "
                  + "; ".join(f"{r['us']:.2f} us n{r['block_n']} s{r['stages']} w{r['warps']} k{r['split']}"
                              for r in best), flush=True)
    if a.out:
        import pandas as pd
        pd.DataFrame(rows).to_csv(a.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
