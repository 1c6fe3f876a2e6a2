#!/usr/bin/env bash
# Build nccl-tests' all_reduce_perf and cuda-samples' p2pBandwidthLatencyTest for sm_90 only.
# Their sources are NOT in this repository: put them under .ext/ (see benchmarks/fidelity.py's
# docstring for the layout); what is ours is this script and shim/ (data checks and command-line
# helpers that run outside the timed regions).
# Usage: benchmarks/fidelity/build.sh [EXT_DIR] [BUILD_DIR]; NCCL_HOME overrides the NCCL found
# through python3's nvidia-nccl-cu13 package. Compile only: COMPILE_ONLY=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
EXT=$(cd "${1:-$here/../../.ext}" && pwd)
BUILD=${2:-/tmp/fidelity-build}
mkdir -p "$BUILD/nccl-tests/verifiable" "$BUILD/nccl-tests/src" "$BUILD/p2p"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ -z "${NCCL_HOME:-}" ]; then
  NCCL_HOME=$(python3 - <<'PY'
import glob, os, sys
for d in sys.path:
    for h in glob.glob(os.path.join(d, "nvidia", "**", "include", "nccl.h"), recursive=True):
        print(os.path.dirname(os.path.dirname(h))); raise SystemExit
raise SystemExit("no nccl.h under python3's nvidia packages: install nvidia-nccl-cu13 or set NCCL_HOME")
PY
)
fi
[ -f "$NCCL_HOME/include/nccl.h" ] || { echo "NCCL_HOME=$NCCL_HOME has no include/nccl.h" >&2; exit 2; }
for f in src/common.cu src/common.h src/all_reduce.cu src/timer.cc src/timer.h src/nccl1_compat.h; do
  [ -f "$EXT/nccl-tests/$f" ] || { echo "missing $EXT/nccl-tests/$f (nccl-tests source)" >&2; exit 2; }
done
P2P_SRC="$EXT/cuda-samples/p2pBandwidthLatencyTest/p2pBandwidthLatencyTest.cu"
[ -f "$P2P_SRC" ] || { echo "missing $P2P_SRC (cuda-samples source)" >&2; exit 2; }
echo "nvcc: $NVCC ($("$NVCC" --version | tail -1)); NCCL: $NCCL_HOME"
cp "$EXT"/nccl-tests/src/* "$BUILD/nccl-tests/src/"
# With -t N (one thread per GPU) every thread shares the main thread's Reporter, whose "am I the main
# thread" flag is set once, so all N threads print each result row and the rows interleave. Make the
# check per thread (is_main_thread is thread_local and set in threadInit); printing only, no timing.
sed -i 's/return isMainThreadFlag;/return isMainThreadFlag \&\& is_main_thread;/' "$BUILD/nccl-tests/src/common.cu"
grep -q 'return isMainThreadFlag && is_main_thread;' "$BUILD/nccl-tests/src/common.cu" \
  || echo "note: nccl-tests' Reporter differs from the version this script patches; -t N output may repeat rows" >&2
cp "$here"/shim/verifiable/* "$BUILD/nccl-tests/verifiable/"
GEN="-gencode=arch=compute_90,code=sm_90"
FLAGS="-O3 -std=c++17 $GEN -I$NCCL_HOME/include"
cd "$BUILD/nccl-tests"
C=${COMPILE_ONLY:+-c}
"$NVCC" $FLAGS -c src/common.cu -o common.o & p1=$!
"$NVCC" $FLAGS -c src/all_reduce.cu -o all_reduce.o & p2=$!
"$NVCC" $FLAGS -c verifiable/verifiable.cu -o verifiable.o & p3=$!
g++ -O3 -std=c++17 -c src/timer.cc -o timer.o & p4=$!
"$NVCC" -O3 -std=c++17 $GEN -I"$here/shim" -c "$P2P_SRC" -o "$BUILD/p2p/p2p.o" & p5=$!
# One process per GPU, the shape of `mpirun -np N all_reduce_perf -g 1`, without an MPI installation: the
# same sources with -DMPI_SUPPORT against mpishim/ (the MPI calls nccl-tests makes, for one host; they run
# outside its timed regions except the barrier that starts each timed block, a spin on shared memory).
MPI="-DMPI_SUPPORT -I$here/mpishim"
"$NVCC" $FLAGS $MPI -c src/common.cu -o common_mpi.o & p6=$!
"$NVCC" $FLAGS $MPI -c src/all_reduce.cu -o all_reduce_mpi.o & p7=$!
g++ -O3 -std=c++17 -I"$here/mpishim" -c "$here/mpishim/mpishim.cc" -o mpishim.o & p8=$!
for p in $p1 $p2 $p3 $p4 $p5 $p6 $p7 $p8; do wait $p; done
if [ -z "${COMPILE_ONLY:-}" ]; then
  LIBDIR="$NCCL_HOME/lib"
  [ -e "$LIBDIR/libnccl.so" ] || ln -sf "$LIBDIR/libnccl.so.2" "$BUILD/nccl-tests/libnccl.so"
  "$NVCC" $GEN common.o all_reduce.o verifiable.o timer.o -o all_reduce_perf \
    -L"$BUILD/nccl-tests" -L"$LIBDIR" -lnccl -lpthread -Xlinker -rpath="$LIBDIR"
  "$NVCC" $GEN common_mpi.o all_reduce_mpi.o verifiable.o timer.o mpishim.o -o all_reduce_perf_mpi \
    -L"$BUILD/nccl-tests" -L"$LIBDIR" -lnccl -lpthread -Xlinker -rpath="$LIBDIR"
  "$NVCC" $GEN "$BUILD/p2p/p2p.o" -o "$BUILD/p2p/p2pBandwidthLatencyTest"
  echo "built $BUILD/nccl-tests/all_reduce_perf, all_reduce_perf_mpi and $BUILD/p2p/p2pBandwidthLatencyTest"
fi
