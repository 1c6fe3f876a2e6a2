#!/usr/bin/env bash
# The parity benchmark (benchmarks/bench_parity.py, issue 46) on a machine without network: the book's client against
# AIPerf 0.13.0, inference-perf 0.7.0 and GuideLLM 0.8.1, each installed from wheels carried in .partools/TOOL/
# (scripts/parity-wheels.sh fills it) into a target folder of its own (the tools pin versions that conflict), run
# through a wrapper that puts that folder, then .partools/common's, first on the path of the machine's python3.
# The tokenizer the tools need for their prompts is the one chapter 03's tiny model trains (helpers.serving.tiny_model._tokenizer: tokenizers and transformers, no network).
#
#   OUT=/some/dir scripts/parity-remote.sh [extra bench_parity.py options]
#
# Writes under $OUT: parity.log (the table), parity.csv (every point's medians and ratios), versions.txt (python,
# the packages the tools use from the machine, CPU and load), setup.log, raw.tar.gz (the tools' own outputs).
# The whole run is bounded: PARITY_LIMIT_S (default 480 s) for everything, the benchmark starting no point that
# would end past it (--time-limit-s), `timeout` stopping it 20 s later whatever happens. Variables for a try on
# another machine: PY (python3), PARTOOLS (.partools), TARGETS (/tmp/partools), TRACE_PATH (a folder put after each
# tool's own on its path). PARITY_ARGS: more bench_parity.py options, split at spaces, before those on the command line
# (--points, --resume: a run split over bounded calls).
#
# The full run in two device calls of at most 560 s each (issue 46; run from the repository root with .partools
# carried; the device sets OUT). The 2026-12-06 run's parity.log recorded each point's wall time with all three tools
# and the book (seconds, the longest of its repeats; per tool: book / inference-perf / guidellm / aiperf):
#   c=1 79 (10.8/20.4/21.2/25.9), c=4 47 (2.7/12.4/13.2/18.0), c=16 40 (0.7/11.6/11.4/16.3),
#   r=8 52 (4.2/14.6/12.6/19.7), r=24 42 (1.6/11.5/11.6/17.1)   -> 260 s a repeat, 780 s for 3: not one call.
# The book with a tool's start pattern adds one book run where the spread rule applies (on 2026-12-06: c=4 against
# inference-perf, c=16 against inference-perf and guidellm): some 3 s at c=4 (2.7 s + a 0.1 s spread) and 2 x 1.2 s
# at c=16 (0.7 s + up to 0.5 s). Setup before the benchmark took some 15 s (PARITY_LIMIT_S 530 left it 515 s).
# Split by point, 3 repeats each, so that every point's repeats come from one call and one machine state:
#   call 1: c=1 and r=8:          3 x (79 + 52)                 = 393 s + setup 15 s
#   call 2: c=4, c=16 and r=24:   3 x (47 + 3 + 40 + 2.5 + 42)  = 404 s + setup 15 s
# each under PARITY_LIMIT_S=500 (the benchmark gets ~485 s; `timeout` ends it by 525 s, the device call's 560 s after):
#
#   1) PARITY_LIMIT_S=500 PARITY_ARGS="--points c1,r8" scripts/parity-remote.sh
#   (here: cp FILES_AT_OF_CALL_1/parity.csv .partools/parity-part1.csv, so that it travels with .partools)
#   2) PARITY_LIMIT_S=500 PARITY_ARGS="--points c4,c16,r24 --resume .partools/parity-part1.csv" scripts/parity-remote.sh
#
# Call 2's parity.csv then holds both calls' rows and its parity.log the whole table (`bench_parity.py --report
# CSV` prints it again from the CSV alone). Should a call stop short (its log says "not run"), a third call with
# PARITY_ARGS="--resume .partools/parity-part2.csv" (call 2's CSV copied there) runs only the rows still missing.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
: "${OUT:?set OUT to the folder the results go to}"
PY=${PY:-python3}
PARTOOLS=${PARTOOLS:-.partools}
TARGETS=${TARGETS:-/tmp/partools}
LIMIT=${PARITY_LIMIT_S:-480}
read -r -a extra <<<"${PARITY_ARGS:-}"
mkdir -p "$OUT" "$TARGETS/bin"
exec 3>&1
exec >"$OUT/setup.log" 2>&1

# common/: the versions two tools share, after each tool's own folder on its path
rm -rf "${TARGETS:?}/common"
if ls "$PARTOOLS/common"/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$TARGETS/common" \
        "$PARTOOLS/common"/*.whl || echo "the common wheels did not install" | tee /dev/fd/3
fi
declare -A ENTRY=([aiperf]="aiperf.cli:app" [infperf]="inference_perf:main_cli" [guidellm]="guidellm.__main__:cli")
declare -A EXE=([aiperf]=aiperf [infperf]=inference-perf [guidellm]=guidellm)
args=()
for t in aiperf infperf guidellm; do
    if ! ls "$PARTOOLS/$t"/*.whl >/dev/null 2>&1; then
        echo "$t: no wheels in $PARTOOLS/$t, left out" | tee /dev/fd/3
        continue
    fi
    rm -rf "${TARGETS:?}/$t"
    if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$TARGETS/$t" \
            "$PARTOOLS/$t"/*.whl; then
        echo "$t: its wheels did not install, left out" | tee /dev/fd/3
        continue
    fi
    mod=${ENTRY[$t]%%:*}
    fn=${ENTRY[$t]##*:}
    w="$TARGETS/bin/${EXE[$t]}"
    cat >"$w" <<EOF
#!/bin/sh
PYTHONPATH='$TARGETS/$t:$TARGETS/common'${TRACE_PATH:+:$TRACE_PATH} exec '$PY' -c 'import sys; from $mod import $fn; sys.argv[0] = "${EXE[$t]}"; sys.exit($fn())' "\$@"
EOF
    chmod +x "$w"
    if ! "$w" --help >/dev/null 2>"$OUT/help-$t.err"; then
        echo "$t: '${EXE[$t]} --help' failed, left out: $(tail -n 3 "$OUT/help-$t.err")" | tee /dev/fd/3
        continue
    fi
    rm -f "$OUT/help-$t.err"
    args+=("--${EXE[$t]}" "$w")
done
echo "installed and checked in $(( $(date +%s) - start )) s: ${args[*]:-none}" | tee /dev/fd/3

tok="$TARGETS/tokenizer"
if [ ! -f "$tok/tokenizer.json" ]; then
    HF_HUB_OFFLINE=1 PYTHONPATH=src "$PY" -c "
import sys
from helpers.serving.tiny_model import _tokenizer
_tokenizer(512).save_pretrained(sys.argv[1])" "$tok" || { echo "the tokenizer could not be built" | tee /dev/fd/3; exit 1; }
fi

{
    "$PY" -VV
    nproc
    uptime
    "$PY" -m pip list 2>/dev/null | grep -i -E '^(aiohttp|anyio|httpx|httpcore|h11|numpy|pandas|pyarrow|pydantic|pyzmq|rich|tokenizers|transformers|huggingface.hub|typer|click|uvloop|tqdm|psutil|msgpack|pillow|prometheus.client|aiofiles|protobuf|torch|scipy|jinja2|yarl|multidict) '
} >"$OUT/versions.txt" 2>&1

[ ${#args[@]} -gt 0 ] || { echo "no tool to compare with" | tee /dev/fd/3; exit 1; }
left=$(( LIMIT - ($(date +%s) - start) ))
echo "benchmark: $left s left of $LIMIT; options ${extra[*]:-none} $*" | tee /dev/fd/3
exec >&3 2>&1
PYTHONUNBUFFERED=1 PYTHONPATH=src timeout -k 5 $(( left + 20 )) "$PY" benchmarks/bench_parity.py "${args[@]}" \
    --tokenizer "$tok" --keep-going --time-limit-s "$left" --tool-timeout-s 120 --work "$TARGETS/work" \
    --out "$OUT/parity.csv" "${extra[@]}" "$@" 2>&1 | tee "$OUT/parity.log"
rc=${PIPESTATUS[0]}
tar -czf "$OUT/raw.tar.gz" -C "$TARGETS" work 2>/dev/null
echo "exit $rc after $(( $(date +%s) - start )) s"
exit "$rc"
