#!/usr/bin/env bash
# The first thing to run on a GPU machine: `milarun doctor --active full` (GEMM per precision,
# memory bandwidth, PCIe, a memory test, clocks, NCCL and P2P of every GPU, against the
# datasheet and each other; its record in OUTDIR/doctor-active.<stamp>.json), then every
# standard test for a short steady window on small synthetic data of the standard shapes, then
# the modern suite (LLM, BERT, ResNet-50, ViT, diffusion, FSDP scaling, GEMM; data made on the
# GPU) in OUTDIR-modern, then the reports. No network needed.
#   scripts/gpu-check.sh [-o OUTDIR] [-d DATAROOT] [--no-modern | --modern-only]
#                        [--no-active | --active-only]
#                        [--modern-profile modern|modern-24gb] [other `milarun jobs` options:
#                        --devices, --name]
# --modern-profile: modern (default) is sized for GPUs of 80 GB and more, modern-24gb for
# 24 GB ones (a size that does not fit is an `oom` failure naming the profile that does).
# --name selects standard tests only; the modern suite runs whole, on the same --devices.
# An offline host lacking the modern suite's libraries (transformers, timm, diffusers and
# their own dependencies) puts their wheels in $MILARUN_WHEELS too.
# Python: `uv run` where uv and the lock file are usable; else the `python3` on the PATH
# (MILARUN_PYTHON=...), after installing the wheels in $MILARUN_WHEELS (a folder) into a
# private folder, for machines with their own torch and no network.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=gpu-check-results
DATA=${MILARUN_DATAROOT:-$HOME/.local/share/milarun/gpu-check-data}
JOBS_OPTIONS=()
DOCTOR_OPTIONS=()  # the devices jobs ran on, so doctor checks their cgroups and health
STANDARD=1
MODERN=1
ACTIVE=1
MODERN_PROFILE=modern
while [ $# -gt 0 ]; do
    case "$1" in
        -o) OUT=$2; shift 2 ;;
        --no-modern) MODERN=0; shift ;;
        --modern-only) STANDARD=0; shift ;;
        --no-active) ACTIVE=0; shift ;;
        --active-only) STANDARD=0; MODERN=0; shift ;;
        --modern-profile) MODERN_PROFILE=$2; shift 2 ;;
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
    MILARUN_PY=("${MILARUN_PYTHON:-python3}")
elif command -v uv >/dev/null && [ -f uv.lock ]; then
    MILARUN_PY=(uv run python)
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    MILARUN_PY=("${MILARUN_PYTHON:-python3}")
fi
MILARUN=("${MILARUN_PY[@]}" -m milarun)
WORKERS=$(nproc)
step() { echo "== gpu-check: $* ($(date +%T))"; }

status=0
if [ "$ACTIVE" = 1 ]; then
    # Before any benchmark: a faulty GPU, link or memory is named first, on an idle machine.
    step "doctor --active full: every device measured (record in $OUT)"
    mkdir -p "$OUT"
    "${MILARUN[@]}" doctor --active full --json "$OUT/doctor-active.$(date -u +%Y%m%d-%H%M%S).json" \
        "${DOCTOR_OPTIONS[@]}" | tee "$OUT/doctor-active.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$STANDARD" = 1 ]; then
    # Small sets, standard shapes: each test reads at least a few of its batches per epoch.
    step "synthetic data in $DATA"
    make_data() {
        "${MILARUN[@]}" dataset "$@" --synthetic --workers "$WORKERS" -d "$DATA" || exit 1
    }
    make_data mnist bsds500 coco wiki2
    make_data wmt16 ml20m --size 20000
    make_data fake_imagenet --size 10000

    step "every standard test, about 15 s of steady window each"
    "${MILARUN[@]}" jobs gpu-check -o "$OUT" -d "$DATA" "${JOBS_OPTIONS[@]}" || status=1
fi

# The modern suite at its own sizes, one steady window each (--min-slices 22 instead of 40):
# its own folder, since a report covers one suite's weights.
MODERN_OUT="${OUT%/}-modern"
if [ "$MODERN" = 1 ]; then
    step "the modern suite ($MODERN_PROFILE: bf16 LLM, BERT, ResNet-50, ViT, diffusion, FSDP," \
        "GEMM) in $MODERN_OUT"
    missing=$("${MILARUN_PY[@]}" -c '
import importlib.util
print(" ".join(m for m in ("transformers", "timm", "diffusers") if not importlib.util.find_spec(m)))
' 2>/dev/null)
    if [ -n "$missing" ]; then
        echo "gpu-check: the modern suite needs $missing: install them, or put their wheels" \
            "(and their dependencies) in MILARUN_WHEELS" >&2
        status=1
    else
        "${MILARUN[@]}" jobs "$MODERN_PROFILE" --tags modern -o "$MODERN_OUT" -d "$DATA" \
            "${DOCTOR_OPTIONS[@]}" -- --min-slices 22 || status=1
    fi
fi

if [ "$STANDARD" = 1 ] && "${MILARUN[@]}" doctor --help >/dev/null 2>&1; then
    step "doctor"
    "${MILARUN[@]}" doctor --profile gpu-check -d "$DATA" "${DOCTOR_OPTIONS[@]}" \
        | tee "$OUT/doctor.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

[ "$STANDARD" = 1 ] || [ "$MODERN" = 1 ] || { step "done: exit $status; $OUT"; exit "$status"; }
step "report"
if [ "$STANDARD" = 1 ]; then
    "${MILARUN[@]}" report "$OUT" --html "$OUT/gpu-check.html" | tee "$OUT/gpu-check.txt"
fi
if [ "$MODERN" = 1 ] && [ -d "$MODERN_OUT" ]; then
    "${MILARUN[@]}" report "$MODERN_OUT" --html "$MODERN_OUT/modern.html" \
        | tee "$MODERN_OUT/modern.txt"
fi
step "done: exit $status; results, reports and doctor output in $OUT and $MODERN_OUT"
exit "$status"
