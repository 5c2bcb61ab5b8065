"""Which settings a drop-in call runs with: the rule is "what the caller's environment says at
the moment of the call, as in tvm-ffi".

``tvm_ffi.cpp`` reads its inputs when each build runs, and kernel libraries rely on it: SGLang's
``load_jit`` sets ``TVM_FFI_CUDA_ARCH_LIST`` inside a context manager around each call, long
after ``tvm_ffi.cpp`` was imported. So in every mode (import swap, ``install()``, the
environment variable, the runner, the pytest option) a call resolves, at call time:

* ``settings=`` passed to the call: used as given (it wins over everything below);
* otherwise the base: the settings ``install(settings)`` / the pytest session gave, else
  ``Settings.from_env()`` read now;
* over that base, what tvm-ffi itself reads at call time: ``TVM_FFI_CUDA_ARCH_LIST`` (the target
  arch, over ``KERNELCACHE_CUDA_ARCH`` and the detected GPUs). ``CXX``, ``CC``, ``CUDA_HOME`` /
  ``CUDA_PATH`` and ``MAX_JOBS`` are read by the toolchain when the build is planned, i.e. at
  call time too.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..settings import Settings

ARCH_VAR = "TVM_FFI_CUDA_ARCH_LIST"


class Installed:
    """Settings an ``install()`` gave: a base for each call, not the call's final settings."""

    __slots__ = ("settings",)

    def __init__(self, settings: "Settings") -> None:
        self.settings = settings


def resolve(settings: Any) -> "Settings":
    """The settings one call runs with (see the module docstring for the rule)."""
    if settings is not None and not isinstance(settings, Installed):
        return settings  # explicit settings= wins
    if isinstance(settings, Installed):
        base = settings.settings
    else:
        from ..settings import Settings

        base = Settings.from_env()
    arch = (os.environ.get(ARCH_VAR) or "").strip()
    if arch and arch != base.cuda_arch:
        base = base.replace(cuda_arch=arch)
    return base
