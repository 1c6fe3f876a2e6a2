#!/usr/bin/env bash
# The emulated decode step in bf16 and in FP8, with the shared expert on a second stream and on one, on one
# GPU (the lent nvidia-h200), as a study for data/measured/ (role decode-step-fp8). No registry, no .venv:
# the image's python3 has torch, numpy, pandas, pyyaml and pytest, and PYTHONPATH=src is all the benchmark
# needs. In this order, each step capped so that one failure or overrun loses none of the others:
#   1. the GPU tests of the step (pytest -m gpu tests/test_step.py tests/test_fp8.py), about 20 s;
#   2. benchmarks/bench_step.py --precision fp8: GLM-5 at TP8 shapes, batches 1-64, contexts 384 and 8192,
#      CUDA graphs and eager, each component alone, op by op at 1x384 and 64x384 (about 60-70 s, estimated);
#   3. the same in bf16 (the committed bf16 study's sweep, now with the shared expert overlapped as SGLang
#      runs it; about 55 s: that sweep took 56 s);
#   4. both precisions' whole step with the shared expert on one stream (--shared-overlap off, graphs,
#      no components; about 20 s each).
# Then it merges the four sweeps (helpers.model.steptime.merge_sweeps) into $OUT/$STUDY/ in the layout of
# data/measured/step-h200-20261201/: timings.csv and bytes.csv (a `source` column added), meta.json (each
# sweep's meta), raw/<sweep>/ (what each bench_step.py wrote), bench-<sweep>.log, pytest-gpu.log, env.txt,
# COMMIT, a README.md draft and register.yaml (the data/sources.yaml entry and the data/schema.yaml
# entries the study needs when committed), packs that folder as $OUT/$STUDY.tgz (the device returns a limited
# number of files per command) and prints the figures. About 3 to 4 minutes in all.
# Usage: OUT=<dir> BOOK_COMMIT=<sha> [STUDY=step-fp8-h200-YYYYMMDD] [BUDGET_S=300] scripts/device-step-fp8.sh
# (DEVICE=cpu rehearses it here: the scaled-down model, eager; the one-stream sweeps, graphs only, fail
# there as they should and the rest is merged without them.)
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT}"
STUDY=${STUDY:-step-fp8-h200-$(date -u +%Y%m%d)}
BUDGET_S=${BUDGET_S:-300}
D="$OUT/$STUDY"
W=/tmp/step-fp8
rm -rf "$W"; mkdir -p "$D" "$W"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
commit=${BOOK_COMMIT:-$(git rev-parse HEAD 2>/dev/null || cat COMMIT 2>/dev/null || echo unknown)}
echo "$commit" > "$D/COMMIT"
{ nvidia-smi
  nvidia-smi --query-gpu=name,clocks.current.sm,clocks.max.sm,clocks.current.memory,power.limit --format=csv
  python3 -c 'import torch; p = torch.cuda.get_device_properties(0); print(torch.__version__, torch.version.cuda, p.name, f"sm{p.major}{p.minor}", p.multi_processor_count, p.total_memory)'
  python3 -m pip show cuda-bindings 2>/dev/null | head -2
  python3 -c 'from helpers.model import fp8; print("fp8 trial:", fp8.probe("'"${DEVICE:-cuda}"'"))'
} > "$D/env.txt" 2>&1
tail -2 "$D/env.txt"
left() { echo $((BUDGET_S - SECONDS)); }
cap() {   # seconds for the next step: at most $1, and what is left less $2 for the steps after it
  local c; c=$(( $(left) - $2 )); [ "$c" -gt "$1" ] && c=$1; [ "$c" -lt 10 ] && c=10; echo "$c"; }

DEVICE=${DEVICE:-cuda}
timeout "$(cap 60 200)" python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_step.py tests/test_fp8.py \
  > "$D/pytest-gpu.log" 2>&1
echo "gpu tests rc $? at ${SECONDS} s"; tail -4 "$D/pytest-gpu.log"

bench() {   # name, limit, reserve, bench_step.py arguments...
  local name=$1 lim=$2 res=$3; shift 3
  timeout -s INT "$(cap "$lim" "$res")" python3 benchmarks/bench_step.py --device "$DEVICE" --out "$W/$name" "$@" \
    > "$D/bench-$name.log" 2>&1
  echo "sweep $name rc $? at ${SECONDS} s"; grep -E "^memory|^sweep:|^bench_step|Error" "$D/bench-$name.log" | head -4
}
bench fp8 130 110 --precision fp8 --op-level 1x384,64x384 --sparse none
bench bf16 100 60 --precision bf16 --op-level 1x384,64x384 --sparse none
bench bf16-serial 40 30 --precision bf16 --shared-overlap off --modes graph --no-components --op-level none --sparse none
bench fp8-serial 40 5 --precision fp8 --shared-overlap off --modes graph --no-components --op-level none --sparse none

STUDY="$STUDY" D="$D" W="$W" COMMIT_SHA="$commit" DATE=$(date -u +%F) python3 - <<'PY'
import json, os, shutil
from pathlib import Path

import pandas as pd

from helpers.model import steptime

study, d, w = os.environ["STUDY"], Path(os.environ["D"]), Path(os.environ["W"])
names = ["fp8", "bf16", "bf16-serial", "fp8-serial"]
for n in names:                                   # what each sweep wrote, as it wrote it
    if (w / n).exists():
        shutil.copytree(w / n, d / "raw" / n, dirs_exist_ok=True)
try:
    res = steptime.merge_sweeps({n: w / n for n in names}, d)
except Exception as e:  # noqa: BLE001 - no sweep finished: the logs say why
    print(f"merge: {type(e).__name__}: {e}")
    raise SystemExit(0)
for f in ("timings.csv", "bytes.csv"):
    t = pd.read_csv(d / f)
    t["source"] = study
    t.to_csv(d / f, index=False)
t, meta = res.timings, res.meta
sweeps = meta["sweeps"]
dev = next((m.get("device_name") for m in sweeps.values()), "unknown")
lines = [f"# The emulated decode step in bf16 and in FP8 on one {dev} ({os.environ['DATE']})", "",
         "One tensor-parallel rank's share of GLM-5's decode step at TP8 shapes (helpers.model.step, random",
         "weights), timed by helpers.model.steptime in bf16 and with FP8 weights (E4M3, a float32 scale per",
         "output column, activations quantized per token; helpers.model.fp8), with the shared expert on a",
         "second CUDA stream as SGLang runs it and on one stream.", "",
         f"- **Code:** commit {os.environ['COMMIT_SHA']} (COMMIT), copied to the device as a working tree.",
         "- **Command:** `OUT=$OUT BOOK_COMMIT=<sha> scripts/device-step-fp8.sh` (the sweeps' own command lines "
         "are in it; bench-<sweep>.log holds each one's printout).",
         "- **Machine:** env.txt (nvidia-smi, torch, the FP8 trial's result).", "- **Sweeps:**"]
for n in names:
    m = sweeps.get(n)
    if m is None:
        lines.append(f"  - `{n}`: no timings (bench-{n}.log says why)")
        continue
    c = m["config"]
    lines.append(f"  - `{n}`: {c['dtype']}, shared_overlap {c['shared_overlap']}, modes {c['modes']}, "
                 f"components {c['components']}, experts {m.get('moe_impl')}, {m['plan']['moe_held']} distinct MoE "
                 f"layers held ({m['plan']['needed_bytes'] / 2**30:.0f} GiB), "
                 + (f"sweep {m['sweep_s']:.1f} s, failures {len(m.get('failures', []))}" if m.get("finished")
                    else "INTERRUPTED (its finished points are kept)"))
lines += ["", "Files: `timings.csv` (every sweep's rows; `dtype` and `overlap` tell them apart; microseconds),",
          "`bytes.csv` (bytes one rank reads per component, per precision, derived, with the experts the routing",
          "touched, measured), `meta.json` (each sweep's meta.json under `sweeps`), `raw/<sweep>/` (as written),",
          "`pytest-gpu.log`, `env.txt`. A `source` column was added to the two CSVs; nothing else was changed."]
(d / "README.md").write_text("\n".join(lines) + "\n")
import yaml
reg = steptime.register_entries(study, dev, os.environ["DATE"], os.environ["COMMIT_SHA"],
                                f"OUT=$OUT BOOK_COMMIT={os.environ['COMMIT_SHA']} scripts/device-step-fp8.sh")
reg = ("# add the first entry to data/sources.yaml and the others to data/schema.yaml, then copy this folder\n"
       f"# (less register.yaml) to data/measured/{study}/\n" + yaml.safe_dump(reg, sort_keys=False, width=110))
(d / "register.yaml").write_text(reg)
# the figures
s = t[(t.what == "step") & (t.attention == "dense") & (t["mode"] == "graph")].copy()
s["ms"] = s.median_us / 1e3
s["variant"] = s["dtype"] + s["overlap"].map({True: " 2 streams", False: " 1 stream"})
print("whole step, CUDA graphs, ms (median):")
print(s.pivot_table(index=["context", "batch"], columns="variant", values="ms").round(2).to_string())
comp = t[(t["mode"] == "graph") & (t.context == 384) & t.batch.isin([1, 64]) & t.what.isin(
    ["attention", "indexer", "moe", "shared/dense MLP", "norms and small ops", "lm_head"])]
if len(comp):
    print("each component alone at context 384, us:")
    print(comp.pivot_table(index=["batch", "what"], columns="dtype", values="median_us").round(1).to_string())
b = res.bytes
if len(b):
    g = b[(b.attention == "dense") & (b.context == 384) & b.batch.isin([1, 64])]
    print("GiB read per step at context 384 (emulated; checkpoint formats):")
    print((g.groupby(["dtype", "batch"])[["bytes_emulated", "bytes_checkpoint"]].sum() / 2**30).round(2).to_string())
print("missing sweeps:", meta["missing"])
PY
tar -czf "$OUT/$STUDY.tgz" -C "$OUT" "$STUDY"   # one file: the device returns a limited number of files
echo "done at ${SECONDS} s: $D (packed as $OUT/$STUDY.tgz)"; ls "$D"
