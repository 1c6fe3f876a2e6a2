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
# Then it packs the four sweeps (python -m helpers.model.stepstudy fp8: steptime.merge_sweeps) into $OUT/$STUDY/ in the layout of
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

# the study: raw/ copies, merged CSVs with `source`, README.md draft, register.yaml, the figures
python3 -m helpers.model.stepstudy fp8 --study "$STUDY" --out "$D" --work "$W" --commit "$commit" \
  --date "$(date -u +%F)"
tar -czf "$OUT/$STUDY.tgz" -C "$OUT" "$STUDY"   # one file: the device returns a limited number of files
echo "done at ${SECONDS} s: $D (packed as $OUT/$STUDY.tgz)"; ls "$D"
