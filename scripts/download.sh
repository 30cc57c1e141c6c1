#!/usr/bin/env bash
# Fetch (or, with --synthetic, generate offline) every dataset the suites use.
#   scripts/download.sh [--synthetic] [--size N] [--workers N] [-d DATAROOT]
# The data folder defaults to $MILARUN_DATAROOT, then ~/.local/share/milarun/data.
# Without --size each dataset gets its full size; fake ImageNet is always generated, as the
# legacy suite did: 100,000 + 5,000 + 5,000 JPEGs of 512x512 (about 17.6 GB, some minutes).
# An interrupted run is completed by running the same command again.
set -euo pipefail
cd "$(dirname "$0")/.."
DATASETS=(mnist fake_imagenet bsds500 coco wiki2 ml20m wmt16)
exec uv run milarun dataset "${DATASETS[@]}" "$@"
