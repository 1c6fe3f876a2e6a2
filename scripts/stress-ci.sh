#!/usr/bin/env bash
# The suite on a busy machine (issue 48): CI's own steps (.ci/run: make browser, make book, make test) on a fresh
# clone of this repository's HEAD while HOGS CPU-bound processes (default: as many as the machine has cores) run
# beside it the whole time. Prints CI's own step times, the failures pytest reported (or none), the load average
# before and after, and exits with CI's exit status. The hogs end with the script, also on Ctrl-C or an error.
#
#   scripts/stress-ci.sh                 # HEAD, one hog per core, in a fresh clone under $TMPDIR
#   HOGS=0 scripts/stress-ci.sh          # the same on a quiet machine (the reference figures)
#   KEEP=1 scripts/stress-ci.sh          # keep the clone (its path is printed) to read the logs
#
# Each run writes its whole log beside the clone (<clone>.log); `make test` alone takes 9-10 minutes on a quiet
# 2-core machine, so a run beside two hogs takes about twice that.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
head=$(git rev-parse --short HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] || echo "note: the tree has uncommitted changes; the clone is of HEAD ($head) only"
hogs=${HOGS:-$(nproc)}
work=$(mktemp -d "${TMPDIR:-/tmp}/stress-ci-XXXXXX")
clone="$work/clone"
log="$work/ci.log"
pids=()
stop() {
    for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$clone"
}
trap stop EXIT INT TERM
git clone --quiet "$src" "$clone"
git -C "$clone" checkout --quiet "$head"
echo "stress-ci: HEAD $head in $clone, $hogs CPU-bound process(es) beside it; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq 1 "$hogs"); do
    python3 -c "while True: pass" &
    pids+=($!)
done
t0=$(date +%s)
rc=0
(cd "$clone" && .ci/run) >"$log" 2>&1 || rc=$?
echo "stress-ci: .ci/run exit $rc after $(( $(date +%s) - t0 )) s; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
grep -E '^ci: |^cpu: |^(FAILED|ERROR) |^[0-9]+ (passed|failed)|^=+ .*(passed|failed).* =+$|executed in' "$log" || true
failed=$(grep -cE '^(FAILED|ERROR) ' "$log" || true)
echo "stress-ci: $failed test(s) failed or errored; the whole log: $log"
exit "$rc"
