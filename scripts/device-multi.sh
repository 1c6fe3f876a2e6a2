#!/usr/bin/env bash
# Everything a multi-GPU host is lent for, in one command (a lent machine is released when idle):
#   1. benchmarks/fidelity.py on every GPU (nccl-tests and cuda-samples sources under .ext/, see its
#      docstring), results to $OUT/fidelity;
#   2. the book's `multi-gpu` target through scripts/device-run.sh, stopped before the caller's limit;
#   3. the GPU-marked tests of the copy and collective helpers, if time is left.
# Usage: BOOK_COMMIT=<sha> RUN_ID=<id> BUDGET_S=580 OUT=<dir> scripts/device-multi.sh
set -uo pipefail
cd "$(dirname "$0")/.."
: "${RUN_ID:?set RUN_ID}" "${OUT:?set OUT}"
BUDGET_S=${BUDGET_S:-580}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ nvidia-smi; nvidia-smi topo -m; nvidia-smi topo -p2p r; } > "$OUT/nvidia-smi.txt" 2>&1
mkdir -p "$OUT/fidelity"
timeout -s INT "${FIDELITY_S:-200}" python3 benchmarks/fidelity.py --out "$OUT/fidelity" \
  > "$OUT/fidelity/fidelity.log" 2>&1
echo "fidelity rc $? at ${SECONDS} s"; tail -40 "$OUT/fidelity/fidelity.log"
LIMIT_S=$((BUDGET_S - SECONDS - 60)) TARGET=multi-gpu bash scripts/device-run.sh > "$OUT/book.log" 2>&1
echo "book rc $? at ${SECONDS} s"; tail -30 "$OUT/book.log"
left=$((BUDGET_S - SECONDS - 10))
if [ "$left" -gt 30 ]; then
  PYTHONPATH=/tmp/site:$PWD/src timeout "$left" python3 -m pytest -q -m gpu -p no:cacheprovider \
    tests/test_copybench.py tests/test_collectives.py > "$OUT/pytest-gpu.log" 2>&1
  echo "gpu tests rc $? at ${SECONDS} s"; tail -5 "$OUT/pytest-gpu.log"
fi
