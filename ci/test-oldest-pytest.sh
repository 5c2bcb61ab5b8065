#!/usr/bin/env bash
# Smoke run against the oldest supported pytest (ci/constraints-oldest.txt), warnings as errors
# (pyproject's filterwarnings): the plugin's compatibility checks, its activation and its
# not-enabled hints. A second, small environment (no torch): the main run covers the newest pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${KC_CI_OLD_VENV:-.venv-ci-oldest}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q -c ci/constraints.txt -c ci/constraints-oldest.txt -e . pytest pytest-xdist
"$venv/bin/python" -m pytest --version
export KERNELCACHE_DIR="${KERNELCACHE_DIR:-$PWD/.kc-cache}-oldest"
set +e
# kernelcache_kernels emptied: the shipped kernels are the main run's business, not this smoke's
"$venv/bin/python" -m pytest -p kernelcache -p no:cacheprovider -o kernelcache_kernels= \
  tests/plugin/test_pytest_compat.py tests/plugin/test_activation.py tests/plugin/test_not_enabled_hints.py
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "ci: the oldest-pytest smoke collected no tests" >&2; exit 1; fi
exit "$rc"
