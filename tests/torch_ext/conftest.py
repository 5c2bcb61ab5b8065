"""Fixtures of the torch drop-in suite: the isolated cache + counting compiler of tests/conftest.py
(torch reads ``$CXX`` too, so both sides count compiles through one wrapper), plus a private
``TORCH_EXTENSIONS_DIR`` per test so plain torch starts cold as well.

Compile budget: a ``torch/extension.h`` translation unit costs ~40 s on the CI machine, so the
per-test extensions include only ``<pybind11/pybind11.h>`` (a few seconds); the heavy parity
extensions are built once per module (``test_parity.py``).
"""
from __future__ import annotations

import pytest

from ..support import KcEnv

pytest.importorskip("torch")


@pytest.fixture
def torch_env(kc_env: KcEnv, monkeypatch: pytest.MonkeyPatch) -> KcEnv:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(kc_env.tmp / "torch_extensions"))
    monkeypatch.delenv("KERNELCACHE_PATCH", raising=False)
    yield kc_env
    from kernelcache import cpp_extension

    cpp_extension.uninstall()
