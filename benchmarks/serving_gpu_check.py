"""Time a live baseline sweep on a GPU without papermill: build a random-weight MoE model on the GPU,
serve it with `transformers serve --device cuda --continuous-batching`, sweep concurrency, print one line
per point (wall time, output tok/s) and write the rows to a JSON-lines file.

    python benchmarks/serving_gpu_check.py --out rows.jsonl --concurrencies 1 2 4 8 16 32 64
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from helpers.serving import client as cl, live, tiny_model, transformers_serve as ts
from helpers.serving.server import Server


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON-lines file for the rows")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--moe-intermediate", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--workload", default="256/256")
    ap.add_argument("--concurrencies", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--per-concurrency", type=int, default=5)
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    spec_m = live.tiny_spec(a.hidden, a.layers, a.experts, a.moe_intermediate, a.heads, a.device)
    model_dir = live.build_tiny(spec_m, device=a.device)
    print(f"model: {tiny_model.param_count(spec_m) / 1e6:.1f} M parameters, built in {time.monotonic() - t0:.1f} s",
          flush=True)
    tok = live.tokenizer_for(model_dir)
    spec = ts.spec(ts.TransformersServeConfig(model=str(model_dir), device=a.device, continuous_batching=True))
    wl = cl.Workload.parse(a.workload)
    with Server(spec, Path(a.out).with_suffix(".server.log"), startup_timeout_s=300) as srv:
        print(f"server healthy after {srv.startup_s:.1f} s", flush=True)
        for c in a.concurrencies:
            t = time.monotonic()
            row = cl.run_point(spec.base_url, str(model_dir), wl, c, cl.requests_for(c, a.per_concurrency), tokenizer=tok)
            row["wall_s"] = time.monotonic() - t
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"c={c:3d} wall={row['wall_s']:6.1f}s out={row['output_throughput']:8.1f} tok/s "
                  f"ttft_p50={row['median_ttft_ms']:7.1f}ms tpot_p50={row['median_tpot_ms']:6.2f}ms "
                  f"failed={row['failed']} {row['errors'][:120]}", flush=True)
    print(f"total {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
