#!/usr/bin/env bash
# Execute the book on a GPU host that has python3 with torch, NCCL and nvidia-ml-py but no package
# registry (set BOOK_COMMIT to the commit sent, since the copy there has no .git): the missing
# pure-Python pieces (papermill, ipykernel, transformers' serving extras) travel
# as wheels in .whl/ (see README, "GPU hosts"). Writes runs/<RUN_ID>/ and, where $OUT is set, a
# tarball of it there. Usage: RUN_ID=h200-YYYYMMDD TARGET=h200 scripts/device-run.sh
# (BOOK_ARGS: more runbook arguments, e.g. "-p 06_vm_p2p.hostpath_from=DIR")
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RUN_ID:?set RUN_ID}"
TARGET=${TARGET:-h200}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
# NVLink multicast stays off on shared hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
status=0
# Stop (as Ctrl-C would: finished chapters are kept in the manifest) before the caller's own limit.
timeout -s INT "${LIMIT_S:-500}" python3 -m helpers.book.runbook --target "$TARGET" --no-build \
  --run-id "$RUN_ID" ${BOOK_ARGS:-} || status=$?
if [ -n "${OUT:-}" ]; then
  tar -czf "$OUT/$RUN_ID.tgz" -C runs "$RUN_ID"
  cp "runs/$RUN_ID/manifest.json" "$OUT/manifest.json"
fi
exit $status
