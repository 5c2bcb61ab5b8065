"""Fixtures of the drop-in suite: the shared isolated cache + counting compiler (``kc_env`` of
tests/conftest.py), plus an isolated tvm-ffi cache, so both sides of every comparison start cold
and count compiles through the same wrapper (tvm-ffi reads ``$CXX`` too)."""
from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def dropin_env(kc_env: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    tvm_cache = kc_env.tmp / "tvm-ffi-cache"
    monkeypatch.setenv("TVM_FFI_CACHE_DIR", str(tvm_cache))
    for name in ("KERNELCACHE_PATCH_TVM_FFI", "KERNELCACHE_PATCH", "TVM_FFI_CUDA_ARCH_LIST"):
        monkeypatch.delenv(name, raising=False)
    yield kc_env
    from kernelcache import patch

    patch.uninstall("tvm_ffi")


def tvm_env(kc_env: Any, **extra: str) -> dict[str, str]:
    """Environment of a subprocess: the isolated caches of this test."""
    return kc_env.env(TVM_FFI_CACHE_DIR=str(kc_env.tmp / "tvm-ffi-cache"), **extra)
