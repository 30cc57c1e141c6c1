#!/usr/bin/env bash
# vLLM's own environment, for `llm-serve --engine vllm` and the `vllm-offline` test (issue 48).
# vLLM pins its own torch (and CUDA wheels far larger than milarun's), so it never enters
# milarun's lock: it lives in its own venv, made by this one command, which milarun finds at
# $MILARUN_VLLM_ENV (default: .venv-vllm in the checkout). Needs uv and the network (or a
# wheel mirror: UV_INDEX_URL / UV_FIND_LINKS); a GPU machine with NVIDIA's driver to run it.
#   scripts/vllm-env.sh [VERSION]        # default: the version below; "latest": unpinned
# The environment's own record (versions of vllm, torch, transformers) is written to
# $MILARUN_VLLM_ENV/milarun-vllm.txt; a result of a vLLM test records vLLM's version.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-0.11.0}
ENV=${MILARUN_VLLM_ENV:-$PWD/.venv-vllm}
SPEC="vllm==$VERSION"
[ "$VERSION" = latest ] && SPEC=vllm
uv venv --python 3.12 "$ENV"
uv pip install --python "$ENV/bin/python" "$SPEC" httpx
"$ENV/bin/python" - "$ENV" <<'PY' | tee "$ENV/milarun-vllm.txt"
import importlib.metadata as m, sys
print(f"environment: {sys.argv[1]}")
for name in ("vllm", "torch", "transformers"):
    print(f"{name} {m.version(name)}")
PY
echo "milarun finds it at MILARUN_VLLM_ENV=$ENV (the default when it is .venv-vllm here)"
