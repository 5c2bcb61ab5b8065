#!/usr/bin/env bash
# The test command (README): the whole suite under the kernelcache pytest plugin, which warms
# the shipped kernels once (the CUDA one compiled and linked for sm_90 without a GPU), after the
# import-linter contracts.
set -euo pipefail
cd "$(dirname "$0")/.."
export KERNELCACHE_CUDA_ARCH="${KERNELCACHE_CUDA_ARCH:-9.0}"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export KERNELCACHE_DIR="${KERNELCACHE_DIR:-$PWD/.kc-cache}"
# the layering contracts (pyproject.toml [tool.importlinter]) before any test
lint-imports --no-cache
# the type checker over the whole package (pyproject.toml [tool.mypy]): 0 errors
python -m mypy
set +e
python -m pytest -p kernelcache -n 2 tests "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "ci: pytest collected no tests" >&2; exit 1; fi
exit "$rc"
