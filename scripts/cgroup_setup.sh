#!/usr/bin/env bash
# Create the student cgroups for this machine (run as root): one group per device with its
# own CPU range and RAM/N. Extra arguments go to `milarun cgroups setup`, e.g. --devices cpu:2.
set -euo pipefail
cd "$(dirname "$0")/.."
# cgroup-tools only for v1 hierarchies; cgroup v2 is written directly
if grep -q " - cgroup " /proc/self/mountinfo && ! command -v cgcreate >/dev/null 2>&1; then
    echo "cgroup-tools is not installed: apt-get install cgroup-tools" >&2
    exit 1
fi
exec uv run milarun cgroups setup "$@"
