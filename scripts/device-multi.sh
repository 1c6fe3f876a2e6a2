#!/usr/bin/env bash
# Everything a multi-GPU host is lent for (a lent machine is released when idle). STEPS picks which:
#   fidelity  benchmarks/fidelity.py on every GPU (nccl-tests and cuda-samples sources under .ext/, see
#             its docstring), results to $OUT/fidelity (on two H200s: about 260 s);
#   gap       benchmarks/allreduce_gap.py, results to $OUT/gap (about 110 s; builds the tools if needed);
#   book      the book's `multi-gpu` target through scripts/device-run.sh, stopped before the caller's
#             limit (on two H200s: about 240 s);
#   tests     the GPU-marked tests of the copy and collective helpers, if time is left (about 30 s).
# One device command may run 600 s at most, so split the steps over two commands, e.g.
#   STEPS="fidelity gap" ... then STEPS="book tests" ...
# Usage: STEPS="..." BOOK_COMMIT=<sha> RUN_ID=<id> BUDGET_S=580 OUT=<dir> scripts/device-multi.sh
#        (GAP_ARGS: extra arguments for allreduce_gap.py, e.g. "--iters 20")
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT}"
STEPS=${STEPS:-fidelity book tests}
BUDGET_S=${BUDGET_S:-580}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"   # the benchmark scripts import the helpers package
{ nvidia-smi; nvidia-smi topo -m; nvidia-smi topo -p2p r; } > "$OUT/nvidia-smi.txt" 2>&1
has() { case " $STEPS " in *" $1 "*) return 0;; *) return 1;; esac; }
if has fidelity; then
  mkdir -p /tmp/fidelity
  timeout -s INT "${FIDELITY_S:-400}" python3 benchmarks/fidelity.py --out /tmp/fidelity \
    > /tmp/fidelity/fidelity.log 2>&1
  echo "fidelity rc $? at ${SECONDS} s"; grep "^ours\|^fidelity:" /tmp/fidelity/fidelity.log
  tar -czf "$OUT/fidelity.tgz" -C /tmp fidelity   # $OUT returns a few files only: one archive
fi
if has gap; then
  [ -x /tmp/fidelity-build/nccl-tests/all_reduce_perf_mpi ] \
    || bash benchmarks/fidelity/build.sh .ext /tmp/fidelity-build > /tmp/gap-build.log 2>&1
  mkdir -p /tmp/gap
  timeout -s INT "${GAP_S:-200}" python3 benchmarks/allreduce_gap.py --build /tmp/fidelity-build --out /tmp/gap ${GAP_ARGS:-} \
    > /tmp/gap/allreduce_gap.log 2>&1
  echo "gap rc $? at ${SECONDS} s"; tail -18 /tmp/gap/allreduce_gap.log
  rm -rf /tmp/gap/points; tar -czf "$OUT/gap.tgz" -C /tmp gap
fi
if has book; then
  : "${RUN_ID:?set RUN_ID}"
  LIMIT_S=$((BUDGET_S - SECONDS - 60)) TARGET=multi-gpu bash scripts/device-run.sh > "$OUT/book.log" 2>&1
  echo "book rc $? at ${SECONDS} s"; tail -14 "$OUT/book.log"
fi
left=$((BUDGET_S - SECONDS - 10))
if has tests && [ "$left" -gt 30 ]; then
  py=.venv/bin/python; [ -x "$py" ] || py=python3   # the book step's environment, where it ran
  PYTHONPATH=$PWD/src timeout "$left" "$py" -m pytest -q -m gpu -p no:cacheprovider \
    tests/test_copybench.py tests/test_collectives.py > "$OUT/pytest-gpu.log" 2>&1
  echo "gpu tests rc $? at ${SECONDS} s"; tail -5 "$OUT/pytest-gpu.log"
fi
