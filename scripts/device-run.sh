#!/usr/bin/env bash
# Execute the book on a GPU host with no package registry by the README's GPU-host command,
#   make run TARGET=$TARGET WHEELS=.whl RUN_ID=$RUN_ID
# (python3 there has the CUDA torch, so `make` builds .venv over it and installs only what is missing,
# from the wheels in .whl/: scripts/device-wheels.txt lists them and how to download them). Stops, as
# Ctrl-C would (finished chapters stay in the manifest), before the caller's limit; writes
# runs/<RUN_ID>/ and, where $OUT is set, a tarball of it there. Where the copy has no .git, either send
# a copy of the repository's git folder and point GIT_DIR (and GIT_WORK_TREE=$PWD) at it, so the runbook
# reads the commit and checks the tree itself (how runs/h200-20261202f was made), or set BOOK_COMMIT to
# the commit sent (recorded as unverified). Where there is no make, runs what `make run` runs.
# After the chapters it runs the GPU test tier (pytest -m gpu, helpers.book.gputier) at the same commit and
# records it in the run's manifest: publish refuses a run without it. The h200 target takes about 10
# minutes on one H200 (serving chapters about 5), the tier about 2 to 3 more; where one call cannot hold both
# (the device tool's 10-minute limit), run the chapters with GPU_TIER=0, then the tier alone with TIER_ONLY=1
# on the same run folder (the same commit; a fresh machine works too, with runs/<RUN_ID>/ sent along).
# Usage: RUN_ID=h200-YYYYMMDD TARGET=h200 BOOK_COMMIT=<sha> [LIMIT_S=540] [GPU_TIER=0|TIER_ONLY=1] scripts/device-run.sh
# (PARAMS='[CHAPTER.]NAME=VALUE ...': target overrides, as `make run` takes them)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RUN_ID:?set RUN_ID}"
TARGET=${TARGET:-h200}
# NVLink multicast stays off on shared hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
wheels=()
[ ! -d .whl ] || wheels=(WHEELS=.whl)
status=0
if [ "${TIER_ONLY:-0}" = 1 ]; then
  [ -d "runs/$RUN_ID" ] || { echo "TIER_ONLY=1: no runs/$RUN_ID here to record the GPU tier in" >&2; exit 2; }
  command -v make >/dev/null 2>&1 || { echo "TIER_ONLY=1 needs make" >&2; exit 2; }
  timeout -s INT "${LIMIT_S:-540}" make test-gpu RUN="runs/$RUN_ID" ${wheels[@]+"${wheels[@]}"} || status=$?
elif command -v make >/dev/null 2>&1; then
  timeout -s INT "${LIMIT_S:-540}" make run TARGET="$TARGET" RUN_ID="$RUN_ID" GPU_TIER="${GPU_TIER:-1}" \
    ${wheels[@]+"${wheels[@]}"} || status=$?
else
  echo "no make here: running what \`make run\` runs"
  env ${wheels[@]+"${wheels[@]}"} bash scripts/book-env.sh run \
    && timeout -s INT "${LIMIT_S:-540}" .venv/bin/python -m helpers.book.runbook --target "$TARGET" --no-build \
         --run-id "$RUN_ID" $(for p in ${PARAMS:-}; do printf -- '-p %s ' "$p"; done) || status=$?
  [ "${GPU_TIER:-1}" = 0 ] || .venv/bin/python -m helpers.book.gputier "runs/$RUN_ID" || status=$?
fi
if [ -n "${OUT:-}" ] && [ -d "runs/$RUN_ID" ]; then
  tar -czf "$OUT/$RUN_ID.tgz" -C runs "$RUN_ID"
  cp "runs/$RUN_ID/manifest.json" "$OUT/manifest.json"
fi
exit $status
