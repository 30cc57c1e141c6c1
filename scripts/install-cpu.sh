#!/usr/bin/env bash
# The CPU-only install of docs/install.md: PyTorch's CPU wheels (a fraction of the CUDA
# build's few GB) at the versions uv.lock names, and every other package as uv.lock pins it.
#
#   scripts/install-cpu.sh          then: .venv/bin/milarun jobs quick
#
# It stops with one line, and removes the environment it made, when the CPU index cannot be
# reached or the torch it installed is not the CPU build: it never falls back to PyPI's torch
# (the CUDA build). Every other package is installed without its dependencies (the export
# lists them all): none can pull PyPI's torch in. It marks the environment CPU-only
# (milarun-cpu-only in it): milarun then warns, and `milarun doctor` FAILs, if a later
# `uv run` or `uv sync` (which syncs to uv.lock: the CUDA torch) replaced it.
#
# MILARUN_CPU_VENV: the environment to make (default .venv); MILARUN_CPU_INDEX: PyTorch's CPU
# index or a mirror of it (default https://download.pytorch.org/whl/cpu).
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="$(realpath -m "${MILARUN_CPU_VENV:-.venv}")"
INDEX="${MILARUN_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
MARKER=milarun-cpu-only  # milarun.machine.torchbuild.MARKER
WORK="$(mktemp -d)"
made=""

die() {
    echo "install-cpu: error: $*" >&2
    [ -z "$made" ] || rm -rf "$VENV"
    exit 1
}
trap 'rm -rf "$WORK"' EXIT
command -v uv >/dev/null || die "uv not found: pip install uv"

if [ -e "$VENV" ] && [ ! -e "$VENV/$MARKER" ]; then
    die "$VENV exists and is not a CPU-only environment (the full install?): remove it, or set MILARUN_CPU_VENV to another folder"
fi

# torch and torchvision as uv.lock pins them (with their markers: uv picks the line that fits
# this Python); the CPU index's 2.x.y+cpu matches ==2.x.y
uv export --quiet --locked --no-hashes --no-emit-project --no-dev >"$WORK/all.txt" \
    || die "uv export failed: is uv.lock there and current?"
grep -E '^(torch|torchvision)==' "$WORK/all.txt" >"$WORK/torch.txt" \
    || die "uv.lock names no torch"
uv export --quiet --locked --no-hashes --no-emit-project --no-dev \
    --prune torch --prune torchvision -o "$WORK/rest.txt" >/dev/null

uv venv --quiet --clear "$VENV"  # a CPU-only one made before: made anew
made=yes
PY="$VENV/bin/python"  # every install names its target: never another environment
if ! uv pip install --python "$PY" --quiet --index-url "$INDEX" -r "$WORK/torch.txt"; then
    die "cannot install torch from the CPU index $INDEX (unreachable, or without these versions?); nothing was installed (no fallback to PyPI's CUDA build): check the network, set MILARUN_CPU_INDEX to a mirror, or take the default route (uv sync)"
fi
uv pip install --python "$PY" --quiet --no-deps -r "$WORK/rest.txt" \
    || die "installing uv.lock's other packages failed"
uv pip install --python "$PY" --quiet --no-deps -e . || die "installing milarun failed"

version="$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))')"
case "$version" in
    *+cpu) ;;
    *) die "torch $version is not the CPU build (2.x.y+cpu): $INDEX is not PyTorch's CPU index?" ;;
esac
touch "$VENV/$MARKER"
echo "install-cpu: torch $version (CPU build) in $VENV: run $VENV/bin/milarun, or uv run --no-sync milarun (a plain uv run syncs to uv.lock: the CUDA build)"
