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
# Then it packs the sweeps (python -m helpers.model.stepstudy fused: steptime.merge_sweeps) into $OUT/$STUDY/ (timings.csv and
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

# the study: raw/ copies, merged CSVs with `source`, README.md draft, register.yaml, the figures
python3 -m helpers.model.stepstudy fused --study "$STUDY" --out "$D" --work "$W" --commit "$commit" \
  --date "$(date -u +%F)"
tar -czf "$OUT/$STUDY.tgz" -C "$OUT" "$STUDY"   # one file: the device returns a limited number of files
echo "done at ${SECONDS} s: $D (packed as $OUT/$STUDY.tgz)"; ls "$D"
