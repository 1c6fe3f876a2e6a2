#!/usr/bin/env bash
# Everything a multi-GPU host is lent for (a lent machine is released when idle). STEPS picks which, and
# they run in this order whatever order STEPS lists them in:
#   dryrun    one GPU is enough (about 90 s): the VM topology file for this machine's GPUs, NCCL on one rank
#             reading it (NCCL_DEBUG=INFO; NCCL_TOPO_DUMP_FILE: the topology NCCL ended with), and the host-path
#             study's main arms on one rank up to 1 MiB; results to $OUT/dryrun;
#   fidelity  benchmarks/fidelity.py on every GPU (nccl-tests and cuda-samples sources under $EXT, default
#             .ext/, see its docstring), results to $OUT/fidelity.tgz (on two H200s: about 260 s);
#   fidelity-procs  benchmarks/fidelity.py --focus procs on every GPU: nccl-tests -np N -g 1 -G 1 against
#             our aligned graph harness and the study's method, default and P2P_DISABLE=1, no copies (needs
#             .ext/ too); $OUT/fidelity-procs.tgz (eight H200s: about 240 s, estimated; capped by FIDELITY_S);
#   gap       benchmarks/allreduce_gap.py, results to $OUT/gap (about 110 s; builds the tools if needed);
#   hostpath  the host-path study (python -m helpers.interconnect.hostpath) over HOSTPATH_WS (8,4,2) and
#             HOSTPATH_ARMS (all), resuming the carried study folder HOSTPATH_FROM if set, stopped by its own
#             budget (what is left of BUDGET_S less HOSTPATH_RESERVE_S: 15 s, or what `step` needs when it
#             follows) so that a later call resumes it; $OUT/hostpath.tgz (eight H200s, all arms at 8 ranks:
#             about 200 s; 4 and 2 ranks, main arms: about 160 s; estimated by --plan);
#   step      the emulated decode step at TP<GPUs> (benchmarks/bench_step.py under torchrun, batches 1 and 64,
#             context 384, CUDA graphs), once per arm in STEP_ARMS (default: default, host,
#             host+cuda_memcpy+vm_topology, the environments of helpers.interconnect.hostpath.ARMS), each
#             capped by STEP_ARM_S (90 s) and by its share of what is left; $OUT/step.tgz. Needs
#             helpers.model.steptime and benchmarks/bench_step.py: without them the step says so;
#   book      the book's BOOK_TARGET (multi-gpu) through scripts/device-run.sh, stopped before the caller's
#             limit (on two H200s: about 240 s); with BOOK_TARGET=vm-emulation the chapter resumes the
#             host-path study made by this call or carried in HOSTPATH_FROM;
#   tests     the GPU-marked tests of the copy and collective helpers, if time is left (about 30 s).
# One device command may run 600 s at most, so split the steps over two or three commands, e.g.
#   STEPS="fidelity gap" ... then STEPS="book tests" ...                     (two GPUs)
#   STEPS="fidelity-procs hostpath" HOSTPATH_WS=8, then STEPS="hostpath step" HOSTPATH_WS=8,4,2
#   HOSTPATH_FROM=<carried>, then STEPS="book tests" BOOK_TARGET=vm-emulation HOSTPATH_FROM=<carried>  (eight)
# (<carried>: the hostpath.tgz of the call before, unpacked into an ignored folder and named in `carry`)
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
slug() { printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_'; }
EXT=${EXT:-.ext}   # the nccl-tests and cuda-samples sources (never committed; carry the folder)
ext_ok() { [ -f "$EXT/nccl-tests/src/common.cu" ] && [ -f "$EXT/cuda-samples/p2pBandwidthLatencyTest/p2pBandwidthLatencyTest.cu" ] \
  || { echo "$1: NOT RUN - needs the nccl-tests and cuda-samples sources under $EXT/ (carry it; see benchmarks/fidelity.py)"; return 1; }; }
if has dryrun; then
  d="$OUT/dryrun"; mkdir -p "$d" /tmp/dryrun
  python3 -m helpers.interconnect.hostpath --write-topology "$d/vm-topology.xml" --world-size 1 > "$d/dryrun.log" 2>&1
  echo "topology rc $? at ${SECONDS} s"; cat "$d/dryrun.log"
  # NCCL on one rank with that file, through the worker the study uses, timed as the study times
  method=$(python3 -c 'from helpers.interconnect.suite import VARIANT_METHOD as m; print(" ".join(m.cli_args()))')
  NCCL_TOPO_FILE="$d/vm-topology.xml" NCCL_TOPO_DUMP_FILE="$d/topo-dump.xml" NCCL_P2P_DISABLE=1 \
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH timeout 90 python3 -m torch.distributed.run --standalone \
    --nproc-per-node 1 -m helpers.interconnect.worker --backend nccl --ops all_reduce --sizes 12288 --warmup 1 \
    --iters 2 --repeats 1 --out /tmp/dryrun/points.jsonl $method > "$d/nccl.log" 2>&1
  echo "nccl with the VM topology rc $? at ${SECONDS} s"
  grep -iE "TOPO_FILE|TOPO_DUMP|topolog|xml|CPU/|PCI/|GPU/|Pattern|nChannels|Channel 00|WARN" "$d/nccl.log" | head -40
  b=$((${DRYRUN_S:-110} - SECONDS)); [ "$b" -lt 20 ] && b=20
  python3 -m helpers.interconnect.hostpath --out /tmp/dryrun/hostpath --world-sizes 1 --arms main --max-bytes 1MiB \
    --timeout-s 60 --budget-s "$b" >> "$d/dryrun.log" 2>&1
  echo "hostpath on one rank rc $? at ${SECONDS} s"; grep "^hostpath" "$d/dryrun.log"
  cp /tmp/dryrun/hostpath/hostpath_runs.csv /tmp/dryrun/hostpath/hostpath_sweep.csv "$d/" 2>/dev/null
fi
if has fidelity && ext_ok fidelity; then
  mkdir -p /tmp/fidelity
  timeout -s INT "${FIDELITY_S:-400}" python3 benchmarks/fidelity.py --ext "$EXT" --out /tmp/fidelity \
    > /tmp/fidelity/fidelity.log 2>&1
  echo "fidelity rc $? at ${SECONDS} s"; grep "^ours\|^fidelity:" /tmp/fidelity/fidelity.log
  tar -czf "$OUT/fidelity.tgz" -C /tmp fidelity   # $OUT returns a few files only: one archive
fi
if has fidelity-procs && ext_ok fidelity-procs; then
  rm -rf /tmp/fidelity-procs; mkdir -p /tmp/fidelity-procs
  timeout -s INT "${FIDELITY_S:-300}" python3 benchmarks/fidelity.py --focus procs --ext "$EXT" --out /tmp/fidelity-procs \
    > /tmp/fidelity-procs/fidelity.log 2>&1
  echo "fidelity-procs rc $? at ${SECONDS} s"; grep "^ours\|^fidelity:\|P2P_DISABLE\|^ *all_reduce" /tmp/fidelity-procs/fidelity.log | tail -30
  { nvidia-smi; nvidia-smi topo -m; } > /tmp/fidelity-procs/nvidia-smi.txt 2>&1
  tar -czf "$OUT/fidelity-procs.tgz" -C /tmp fidelity-procs
fi
if has gap; then
  [ -x /tmp/fidelity-build/nccl-tests/all_reduce_perf_mpi ] \
    || bash benchmarks/fidelity/build.sh "$EXT" /tmp/fidelity-build > /tmp/gap-build.log 2>&1
  mkdir -p /tmp/gap
  timeout -s INT "${GAP_S:-200}" python3 benchmarks/allreduce_gap.py --build /tmp/fidelity-build --out /tmp/gap ${GAP_ARGS:-} \
    > /tmp/gap/allreduce_gap.log 2>&1
  echo "gap rc $? at ${SECONDS} s"; tail -18 /tmp/gap/allreduce_gap.log
  rm -rf /tmp/gap/points; tar -czf "$OUT/gap.tgz" -C /tmp gap
fi
if has hostpath; then
  reserve=15; has step && reserve=$((3 * ${STEP_ARM_S:-90} + 15))   # what the decode step after it needs
  left=$((BUDGET_S - SECONDS - ${HOSTPATH_RESERVE_S:-$reserve})); [ "$left" -lt 30 ] && left=30
  python3 -m helpers.interconnect.hostpath --out /tmp/hostpath --world-sizes "${HOSTPATH_WS:-8,4,2}" \
    --arms "${HOSTPATH_ARMS:-all}" --budget-s "$left" ${HOSTPATH_FROM:+--resume-from "$HOSTPATH_FROM"} \
    > /tmp/hostpath.log 2>&1
  echo "hostpath rc $? at ${SECONDS} s"; grep "^hostpath" /tmp/hostpath.log | tail -24
  mkdir -p /tmp/hostpath; cp /tmp/hostpath.log /tmp/hostpath/; tar -czf "$OUT/hostpath.tgz" -C /tmp hostpath
fi
if has step; then
  if [ ! -f benchmarks/bench_step.py ] || [ ! -f src/helpers/model/steptime.py ]; then
    echo "step: NOT RUN - needs the decode-step emulator (helpers.model.step, helpers.model.steptime and"
    echo "      benchmarks/bench_step.py), which this tree lacks"
  else
    n=${STEP_GPUS:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
    rm -rf /tmp/step; mkdir -p /tmp/step
    arms=(${STEP_ARMS:-default host host+cuda_memcpy+vm_topology}); k=${#arms[@]}
    for arm in "${arms[@]}"; do
      cap=$(( (BUDGET_S - SECONDS - 10) / k )); [ "$cap" -gt "${STEP_ARM_S:-90}" ] && cap=${STEP_ARM_S:-90}; k=$((k - 1))
      sd="/tmp/step/$(slug "$arm")"; mkdir -p "$sd"
      if ! arm_env=$(python3 -m helpers.interconnect.hostpath --env "$arm" --world-size "$n" --out /tmp/step 2>"$sd/env.log"); then
        echo "step $arm: NOT RUN - its environment could not be made: $(tail -1 "$sd/env.log")"; continue
      fi
      echo "$arm: ${arm_env:-NCCL defaults}" > "$sd/arm.txt"
      env $arm_env timeout -s INT "$cap" python3 -m torch.distributed.run --standalone \
        --nproc-per-node "$n" benchmarks/bench_step.py --batches 1,64 --contexts "${STEP_CONTEXTS:-384}" \
        --modes graph --op-level none --sparse none --out "$sd" > "$sd/bench.log" 2>&1
      echo "step $arm (TP$n) rc $? at ${SECONDS} s"; grep -A4 "^sweep:" "$sd/bench.log"
    done
    tar -czf "$OUT/step.tgz" -C /tmp step
  fi
fi
if has book; then
  : "${RUN_ID:?set RUN_ID}"
  hp_from=""   # the study the chapter resumes: this call's, else the carried one
  if [ -d /tmp/hostpath/points ]; then hp_from=/tmp/hostpath; elif [ -n "${HOSTPATH_FROM:-}" ]; then hp_from=$(cd "$HOSTPATH_FROM" && pwd); fi
  LIMIT_S=$((BUDGET_S - SECONDS - 60)) TARGET=${BOOK_TARGET:-multi-gpu} \
    PARAMS="${PARAMS:-}${hp_from:+ 06_vm_p2p.hostpath_from=$hp_from}" bash scripts/device-run.sh > "$OUT/book.log" 2>&1
  echo "book rc $? at ${SECONDS} s"; tail -14 "$OUT/book.log"
fi
left=$((BUDGET_S - SECONDS - 10))
if has tests && [ "$left" -gt 30 ]; then
  py=.venv/bin/python; [ -x "$py" ] || py=python3   # the book step's environment, where it ran
  PYTHONPATH=$PWD/src timeout "$left" "$py" -m pytest -q -m gpu -p no:cacheprovider \
    tests/test_copybench.py tests/test_collectives.py > "$OUT/pytest-gpu.log" 2>&1
  echo "gpu tests rc $? at ${SECONDS} s"; tail -5 "$OUT/pytest-gpu.log"
fi
