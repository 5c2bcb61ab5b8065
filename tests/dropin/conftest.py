"""Fixtures of the drop-in suite: the shared isolated cache + counting compiler (tests/conftest.py),
plus an isolated tvm-ffi cache, so both sides of every comparison start cold and count compiles
through the same wrapper (tvm-ffi reads ``$CXX`` too)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/conftest.py helpers

from conftest import KcEnv  # noqa: E402


@pytest.fixture
def dropin_env(kc_env: KcEnv, monkeypatch: pytest.MonkeyPatch) -> KcEnv:
    tvm_cache = kc_env.tmp / "tvm-ffi-cache"
    monkeypatch.setenv("TVM_FFI_CACHE_DIR", str(tvm_cache))
    monkeypatch.delenv("KERNELCACHE_PATCH_TVM_FFI", raising=False)
    yield kc_env
    from kernelcache import tvm_ffi as dropin

    dropin.uninstall()


def tvm_env(kc_env: KcEnv, **extra: str) -> dict[str, str]:
    """Environment of a subprocess: the isolated caches of this test."""
    return kc_env.env(TVM_FFI_CACHE_DIR=str(kc_env.tmp / "tvm-ffi-cache"), **extra)
