"""Which settings a drop-in call runs with: "what the caller's environment says at the moment of
the call", as the foreign JITs themselves read their inputs.

``tvm_ffi.cpp`` (and FlashInfer, torch) read their inputs when each build runs, and kernel
libraries rely on it: SGLang's ``load_jit`` sets ``TVM_FFI_CUDA_ARCH_LIST`` inside a context
manager around each call, long after ``tvm_ffi.cpp`` was imported. So in every mode (import
swap, ``install()``, the environment variable, the runner, the pytest option) a call resolves,
at call time:

* ``settings=`` passed to the call: used as given (it wins over everything below);
* otherwise the base: the settings ``install(settings)`` / the pytest session gave (wrapped in
  :class:`Installed`), else ``Settings.from_env()`` read now;
* over that base, the foreign JIT's own arch variable when it has one (``arch_var``; e.g.
  ``TVM_FFI_CUDA_ARCH_LIST``) over ``KERNELCACHE_CUDA_ARCH`` and the detected GPUs. ``CXX``,
  ``CC``, ``CUDA_HOME`` and ``MAX_JOBS`` are read by the toolchain when the build is planned,
  i.e. at call time too.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings


class Installed:
    """Settings an ``install()`` gave: a base for each call, not the call's final settings."""

    __slots__ = ("settings",)

    def __init__(self, settings: "Settings") -> None:
        self.settings = settings


def resolve(settings: Any, arch_var: str | None = None) -> "Settings":
    """The settings one call runs with (see the module docstring for the rule)."""
    if settings is not None and not isinstance(settings, Installed):
        return settings  # explicit settings= wins
    if isinstance(settings, Installed):
        base = settings.settings
    else:
        from ..base.settings import Settings

        base = Settings.from_env()
    arch = (os.environ.get(arch_var) or "").strip() if arch_var else ""
    if arch and arch != base.cuda_arch:
        base = base.replace(cuda_arch=arch)
    return base
