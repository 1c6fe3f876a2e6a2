#!/usr/bin/env bash
# The fused decode step (helpers.model.fused: the small ops as an engine fuses them, compiled by torch.compile
# on CUDA) in bf16 and FP8, beside the unfused reference, on one GPU (the lent nvidia-h200), as a study for
# data/measured/ (role decode-step-fused). No registry, no .venv: the image's python3 has torch, triton,
# numpy, pandas, pyyaml and pytest, and PYTHONPATH=src is all the benchmark needs. In this order, each step
# capped so that one failure or overrun loses none of the others (the sweeps first: they are the study):
#   1. benchmarks/bench_step.py --fusion fused --precision bf16: GLM-5 at TP8 shapes, the chapter's sweep
#      (batches 1-64, contexts 384 and 8192, CUDA graphs and eager, each component alone, op by op at 1x384
#      and 64x384, DSA sparse at 1x8192 and 64x8192); compilation (about 30 s on the H200) is timed apart;
#      at most 160 s;
#   2. the same in FP8, at most 160 s;
#   3. both precisions unfused at batches 1 and 64, context 384 (graphs and eager, components), for the
#      chapter's fused-against-unfused comparison, at most 40 s each;
#   4. the GPU tests of the fused step (pytest -m gpu tests/test_fused.py tests/test_step.py tests/test_fp8.py: the fused step
#      compiled on the GPU against the unfused one, the Triton router kernel, graphs against eager), what
#      the budget leaves and never less than 90 s (the QUICK run's 60 s cap ended them before they printed).
# Then it merges the sweeps (helpers.model.steptime.merge_sweeps) into $OUT/$STUDY/ (timings.csv and
# bytes.csv with a `source` column, meta.json, raw/<sweep>/, bench-<sweep>.log, pytest-gpu.log, env.txt,
# COMMIT, README.md and register.yaml: the data/sources.yaml and data/schema.yaml entries), packs it as
# $OUT/$STUDY.tgz and prints the figures: step ms, kernels per step, compile seconds.
# Usage (on the lent nvidia-h200, in the copy of a clean commit's tree; the run tool sets $OUT):
#   OUT=$OUT BOOK_COMMIT=<that commit's full sha, written out: the device's copy may have no .git> \
#     scripts/device-step-fused.sh
# optional: STUDY=step-fused-h200-YYYYMMDD (default: today's date, UTC), BUDGET_S=470 (seconds for the four
# sweeps and the tests together; the merge and packing add about 10 s). Expected: about 6 to 8 minutes of
# device time, never more than BUDGET_S + 30 s; run it with timeout_s 600. To commit the study: copy
# $OUT/$STUDY/ (less register.yaml) to data/measured/$STUDY/, append register.yaml's first entry to
# data/sources.yaml and the others to data/schema.yaml; the book then takes its bf16 fused sweep as the
# decode-step measurement (helpers.model.measured.fusion_study: the last registered full study).
# QUICK=1 runs batches 1 and 64 at context 384 only, graphs, no op-level or sparse points (about 2 minutes;
# a QUICK study is shown by the chapter's fusion section but not taken as the step measurement).
# (DEVICE=cpu rehearses it here: the scaled-down model, eager, uncompiled.)
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT}"
STUDY=${STUDY:-step-fused-h200-$(date -u +%Y%m%d)}
BUDGET_S=${BUDGET_S:-470}
D="$OUT/$STUDY"
W=/tmp/step-fused
rm -rf "$W"; mkdir -p "$D" "$W"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
commit=${BOOK_COMMIT:-$(git rev-parse HEAD 2>/dev/null || cat COMMIT 2>/dev/null || echo unknown)}
echo "$commit" > "$D/COMMIT"
{ nvidia-smi
  nvidia-smi --query-gpu=name,clocks.current.sm,clocks.max.sm,clocks.current.memory,power.limit --format=csv
  python3 -c 'import torch; p = torch.cuda.get_device_properties(0); print(torch.__version__, torch.version.cuda, p.name, f"sm{p.major}{p.minor}", p.multi_processor_count, p.total_memory)'
  python3 -c 'import triton; print("triton", triton.__version__)'
  python3 -m pip show cuda-bindings 2>/dev/null | head -2
  python3 -c 'from helpers.model import fp8; print("fp8 trial:", fp8.probe("'"${DEVICE:-cuda}"'"))'
} > "$D/env.txt" 2>&1
tail -2 "$D/env.txt"
left() { echo $((BUDGET_S - SECONDS)); }
cap() {   # seconds for the next step: at most $1, and what is left less $2 for the steps after it
  local c; c=$(( $(left) - $2 )); [ "$c" -gt "$1" ] && c=$1; [ "$c" -lt 10 ] && c=10; echo "$c"; }

DEVICE=${DEVICE:-cuda}
bench() {   # name, limit, reserve, bench_step.py arguments...
  local name=$1 lim=$2 res=$3; shift 3
  timeout -s INT "$(cap "$lim" "$res")" python3 benchmarks/bench_step.py --device "$DEVICE" --out "$W/$name" "$@" \
    > "$D/bench-$name.log" 2>&1
  echo "sweep $name rc $? at ${SECONDS} s"; grep -E "^memory|^sweep:|^bench_step|Error" "$D/bench-$name.log" | head -4
}
if [ "$DEVICE" = cpu ]; then     # a rehearsal: bench_step.py's CPU defaults (glm5-mini, eager)
  FULL=(--op-level none --sparse none); REF=(--op-level none --sparse none)
elif [ "${QUICK:-0}" = 1 ]; then
  FULL=(--batches 1,64 --contexts 384 --modes graph --op-level none --sparse none)
  REF=(--batches 1,64 --contexts 384 --modes graph --op-level none --sparse none --no-components)
else
  FULL=(--op-level 1x384,64x384)
  REF=(--batches 1,64 --contexts 384 --op-level none --sparse none)
fi
bench fused-bf16 160 210 --fusion fused --precision bf16 "${FULL[@]}"
bench fused-fp8 160 170 --fusion fused --precision fp8 "${FULL[@]}"
bench unfused-bf16 40 130 --fusion unfused --precision bf16 "${REF[@]}"
bench unfused-fp8 40 90 --fusion unfused --precision fp8 "${REF[@]}"
t=$(cap 150 0); [ "$t" -lt 90 ] && t=90
timeout "$t" python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_fused.py tests/test_step.py tests/test_fp8.py \
  > "$D/pytest-gpu.log" 2>&1
echo "gpu tests rc $? at ${SECONDS} s (cap ${t} s)"; tail -4 "$D/pytest-gpu.log"

STUDY="$STUDY" D="$D" W="$W" COMMIT_SHA="$commit" DATE=$(date -u +%F) python3 - <<'PY'
import json, os, shutil
from pathlib import Path

import pandas as pd

from helpers.model import steptime

study, d, w = os.environ["STUDY"], Path(os.environ["D"]), Path(os.environ["W"])
names = ["fused-bf16", "fused-fp8", "unfused-bf16", "unfused-fp8"]
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
lines = [f"# The fused decode step in bf16 and in FP8 on one {dev} ({os.environ['DATE']})", "",
         "One tensor-parallel rank's share of GLM-5's decode step at TP8 shapes (helpers.model.step, random",
         "weights), timed by helpers.model.steptime with its small ops fused as an engine fuses them",
         "(helpers.model.fused, compiled by torch.compile) and, at batches 1 and 64, unfused, in bf16 and with",
         "FP8 weights (helpers.model.fp8); the shared expert on a second CUDA stream as SGLang runs it.", "",
         f"- **Code:** commit {os.environ['COMMIT_SHA']} (COMMIT), copied to the device as a working tree.",
         "- **Command:** `OUT=$OUT BOOK_COMMIT=<sha> scripts/device-step-fused.sh` (the sweeps' own command lines "
         "are in it; bench-<sweep>.log holds each one's printout).",
         "- **Machine:** env.txt (nvidia-smi, torch, the FP8 trial's result).", "- **Sweeps:**"]
for n in names:
    m = sweeps.get(n)
    if m is None:
        lines.append(f"  - `{n}`: no timings (bench-{n}.log says why)")
        continue
    c = m["config"]
    lines.append(f"  - `{n}`: {c['dtype']}, {c.get('fusion')}, compile {m.get('compile_s', 0):.1f} s in "
                 f"{m.get('compiles', 0)} compilations, shared_overlap {c['shared_overlap']}, modes {c['modes']}, "
                 f"components {c['components']}, experts {m.get('moe_impl')}, {m['plan']['moe_held']} distinct MoE "
                 f"layers held ({m['plan']['needed_bytes'] / 2**30:.0f} GiB), "
                 + (f"sweep {m['sweep_s']:.1f} s, failures {len(m.get('failures', []))}" if m.get("finished")
                    else "INTERRUPTED (its finished points are kept)"))
lines += ["", "Files: `timings.csv` (every sweep's rows; `dtype` and `fusion` tell them apart; microseconds;",
          "`kernels`: kernel nodes of the captured CUDA graph),",
          "`bytes.csv` (bytes one rank reads per component, per precision, derived, with the experts the routing",
          "touched, measured), `meta.json` (each sweep's meta.json under `sweeps`), `raw/<sweep>/` (as written),",
          "`pytest-gpu.log`, `env.txt`. A `source` column was added to the two CSVs; nothing else was changed."]
(d / "README.md").write_text("\n".join(lines) + "\n")
import yaml
reg = steptime.register_entries(study, dev, os.environ["DATE"], os.environ["COMMIT_SHA"],
                                f"OUT=$OUT BOOK_COMMIT={os.environ['COMMIT_SHA']} scripts/device-step-fused.sh",
                                role="decode-step-fused")
reg = ("# add the first entry to data/sources.yaml and the others to data/schema.yaml, then copy this folder\n"
       f"# (less register.yaml) to data/measured/{study}/\n" + yaml.safe_dump(reg, sort_keys=False, width=110))
(d / "register.yaml").write_text(reg)
# the figures
s = t[(t.what == "step") & (t.attention == "dense") & (t["mode"] == "graph")].copy()
s["ms"] = s.median_us / 1e3
s["variant"] = s["dtype"] + " " + s["fusion"]
print("whole step, CUDA graphs, ms (median):")
print(s.pivot_table(index=["context", "batch"], columns="variant", values="ms").round(2).to_string())
print("kernels per step (CUDA graph kernel nodes):")
print(s.pivot_table(index=["context", "batch"], columns="variant", values="kernels").to_string())
print("compile s (fused ops, first step of each shape apart):",
      {n: round(m.get("compile_s", 0), 1) for n, m in sweeps.items()})
comp = t[(t["mode"] == "graph") & (t.context == 384) & t.batch.isin([1, 64]) & t.what.isin(
    ["attention", "indexer", "moe", "shared/dense MLP", "norms and small ops", "lm_head"])]
if len(comp):
    print("each component alone at context 384, us:")
    print(comp.pivot_table(index=["batch", "what"], columns=["dtype", "fusion"], values="median_us").round(1).to_string())
b = res.bytes
if len(b):
    g = b[(b.attention == "dense") & (b.context == 384) & b.batch.isin([1, 64])]
    print("GiB read per step at context 384 (emulated; checkpoint formats):")
    print((g.groupby(["dtype", "batch"])[["bytes_emulated", "bytes_checkpoint"]].sum() / 2**30).round(2).to_string())
print("missing sweeps:", meta["missing"])
PY
tar -czf "$OUT/$STUDY.tgz" -C "$OUT" "$STUDY"   # one file: the device returns a limited number of files
echo "done at ${SECONDS} s: $D (packed as $OUT/$STUDY.tgz)"; ls "$D"
