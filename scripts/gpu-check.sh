#!/usr/bin/env bash
# The first thing to run on a GPU machine: every standard test for a short steady window on
# small synthetic data of the standard shapes, then the report. No network needed.
#   scripts/gpu-check.sh [-o OUTDIR] [-d DATAROOT] [other `milarun jobs` options: --devices, --name]
# Python: `uv run` where uv and the lock file are usable; else the `python3` on the PATH
# (MILARUN_PYTHON=...), after installing the wheels in $MILARUN_WHEELS (a folder) into a
# private folder, for machines with their own torch and no network.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=gpu-check-results
DATA=${MILARUN_DATAROOT:-$HOME/.local/share/milarun/gpu-check-data}
JOBS_OPTIONS=()
DOCTOR_OPTIONS=()  # the devices jobs ran on, so doctor checks their cgroups and health
while [ $# -gt 0 ]; do
    case "$1" in
        -o) OUT=$2; shift 2 ;;
        -d) DATA=$2; shift 2 ;;
        --devices) JOBS_OPTIONS+=("$1" "$2"); DOCTOR_OPTIONS+=("$1" "$2"); shift 2 ;;
        --devices=*) JOBS_OPTIONS+=("$1"); DOCTOR_OPTIONS+=("$1"); shift ;;
        *) JOBS_OPTIONS+=("$1"); shift ;;
    esac
done

if [ -n "${MILARUN_WHEELS:-}" ]; then
    site=$(mktemp -d /tmp/milarun-site.XXXXXX)
    "${MILARUN_PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile \
        --target "$site" "$MILARUN_WHEELS"/*.whl || exit 1
    export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    MILARUN=("${MILARUN_PYTHON:-python3}" -m milarun)
elif command -v uv >/dev/null && [ -f uv.lock ]; then
    MILARUN=(uv run milarun)
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    MILARUN=("${MILARUN_PYTHON:-python3}" -m milarun)
fi
WORKERS=$(nproc)
step() { echo "== gpu-check: $* ($(date +%T))"; }

# Small sets, standard shapes: each test reads at least a few of its batches per epoch.
step "synthetic data in $DATA"
make_data() {
    "${MILARUN[@]}" dataset "$@" --synthetic --workers "$WORKERS" -d "$DATA" || exit 1
}
make_data mnist bsds500 coco wiki2
make_data wmt16 ml20m --size 20000
make_data fake_imagenet --size 10000

step "every standard test, about 15 s of steady window each"
"${MILARUN[@]}" jobs gpu-check -o "$OUT" -d "$DATA" "${JOBS_OPTIONS[@]}"
status=$?

if "${MILARUN[@]}" doctor --help >/dev/null 2>&1; then
    step "doctor"
    "${MILARUN[@]}" doctor --profile gpu-check -d "$DATA" "${DOCTOR_OPTIONS[@]}" \
        | tee "$OUT/doctor.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

step "report"
"${MILARUN[@]}" report "$OUT" --html "$OUT/gpu-check.html" | tee "$OUT/gpu-check.txt"
step "done: jobs exit $status; results, report and doctor output in $OUT"
exit "$status"
