"""The settings a ``tvm_ffi.cpp`` drop-in call runs with: the drop-ins' call-time rule
(:mod:`kernelcache.dropin.call_settings`) with tvm-ffi's own arch variable over the base."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..dropin.call_settings import Installed, resolve as _resolve

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings

ARCH_VAR = "TVM_FFI_CUDA_ARCH_LIST"
__all__ = ["ARCH_VAR", "Installed", "resolve"]


def resolve(settings: Any) -> "Settings":
    """The settings one call runs with: explicit, else installed/env, plus ``TVM_FFI_CUDA_ARCH_LIST``."""
    return _resolve(settings, ARCH_VAR)
