#!/usr/bin/env bash
# Make (or reuse) the book's Python environment $VENV and install the package with the given extras.
# `make` calls this; it also runs by hand where there is no make:
#
#   PY=python3 VENV=.venv ENV_KIND=auto WHEELS= scripts/book-env.sh EXTRAS
#
# EXTRAS: run (execute chapters), site (build the site), test, or several joined by commas.
# Which environment (helpers.book.environment says why, and writes it to $VENV/book-env.json):
#   host          PY has a CUDA torch and an NVIDIA driver answers: a venv over PY's own packages
#                 (torch, NCCL, sglang stay PY's; torch is held at PY's version), only what is missing
#                 is installed;
#   isolated-gpu  a driver answers, PY has no CUDA torch: a fresh venv, torch from the registry;
#   isolated-cpu  no driver: a fresh venv with torch pinned to the CPU build (constraints/cpu.txt).
# ENV_KIND=host or ENV_KIND=isolated overrides the choice. WHEELS=DIR installs from that folder of
# wheels alone (pip --no-index): no registry is asked.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
VENV=${VENV:-.venv}
ENV_KIND=${ENV_KIND:-auto}
WHEELS=${WHEELS:-}
extras=${1:?usage: scripts/book-env.sh EXTRAS (run, site, test or several joined by commas)}

command -v "$PY" >/dev/null 2>&1 || { echo "error: PY=$PY is not a Python on PATH; name one with PY=/path/to/python" >&2; exit 2; }
src=()
if [ -n "$WHEELS" ]; then
  ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "error: WHEELS=$WHEELS holds no wheels (*.whl); see README, GPU hosts" >&2; exit 2; }
  src=(--no-index --find-links "$WHEELS")
fi

choice=$(PYTHONPATH=src "$PY" -m helpers.book.environment choose --want "$ENV_KIND" --name "PY=$PY") || exit 2
eval "$choice"
recorded=""
if [ -f "$VENV/book-env.json" ]; then
  recorded=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("kind", ""))' "$VENV/book-env.json")
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "environment $VENV: $BOOK_ENV_KIND: $BOOK_ENV_REASON"
  if [ "$BOOK_ENV_KIND" = host ]; then
    # --system-site-packages shows PY's installation; the .pth also shows PY's own site-packages where PY
    # is itself a venv (a venv made from a venv sees only the base installation otherwise).
    "$PY" -m venv --system-site-packages --without-pip "$VENV"
    purelib=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    mkdir -p "$purelib"
    PYTHONPATH=src "$PY" -m helpers.book.environment site-dirs > "$purelib/_book_host.pth"
    # torch stays the host's: pip may not replace it (a version outside pyproject's range is refused).
    [ -z "$BOOK_ENV_TORCH" ] || printf 'torch==%s\n' "$BOOK_ENV_TORCH" > "$VENV/host-constraints.txt"
  else
    "$PY" -m venv "$VENV"
  fi
  printf '%s\n' "$BOOK_ENV_JSON" > "$VENV/book-env.json"
  recorded=$BOOK_ENV_KIND
elif [ -z "$recorded" ]; then
  # A venv made before environment records: keep it, say so, and install as its kind would.
  recorded=existing
  "$PY" -c 'import json,sys; json.dump({"kind": "existing", "reason": sys.argv[2] + " existed before `make` recorded environments and is kept as it is (made now, it would be " + sys.argv[3] + ")", "python": sys.argv[4], "made_by": "an earlier make"}, open(sys.argv[1], "w"))' \
    "$VENV/book-env.json" "$VENV" "$BOOK_ENV_KIND" "$PY"
elif [ "$recorded" != "$BOOK_ENV_KIND" ] && { [ "$ENV_KIND" != auto ] || [ "$recorded" != existing ]; }; then
  case $recorded in host) keep="ENV_KIND=host" ;; existing) keep="ENV_KIND unset" ;; *) keep="ENV_KIND=isolated" ;; esac
  echo "error: $VENV is an environment of kind \`$recorded\`, but the choice now is \`$BOOK_ENV_KIND\`: $BOOK_ENV_REASON." >&2
  echo "       Remove it (make clean-env, or rm -rf $VENV) to make a \`$BOOK_ENV_KIND\` one, or keep it with $keep." >&2
  exit 2
fi

pyv="$VENV/bin/python"
"$pyv" -m pip --version >/dev/null 2>&1 || "$pyv" -m ensurepip --default-pip >/dev/null \
  || { echo "error: no pip for $VENV (PY=$PY has none, and ensurepip is missing)" >&2; exit 2; }
cons=()
case $recorded in
  host) [ ! -f "$VENV/host-constraints.txt" ] || cons=(-c "$VENV/host-constraints.txt") ;;
  isolated-cpu) cons=(-c constraints/cpu.txt) ;;
  existing) [ "$BOOK_ENV_KIND" != isolated-cpu ] || cons=(-c constraints/cpu.txt) ;;
esac
echo "installing .[$extras] into $VENV ($recorded${WHEELS:+, from $WHEELS only})"
"$pyv" -m pip install --quiet --disable-pip-version-check ${src[@]+"${src[@]}"} ${cons[@]+"${cons[@]}"} -e ".[$extras]"
