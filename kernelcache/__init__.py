"""kernelcache: JIT-built C++/CUDA kernels you can trust in CI and in production.

The public API is re-exported here. Nothing heavy (tvm_ffi, torch, subprocesses) is imported
at import time: ``import kernelcache`` must stay cheap because the pytest plugin and
production servers import it on every start.

PYTEST_DONT_REWRITE: the ``KERNELCACHE_PATCH`` ``.pth`` hook can import this package before
pytest registers its ``pytest11`` plugin and marks the package for assertion rewriting; this
marker tells pytest the package needs no rewriting, so it does not warn "Module already imported
so cannot be rewritten" (an error under ``-W error``). Only this module carries it: the plugin's
own modules are imported by pytest and rewritten as usual.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "KernelSpec",
    "Settings",
    "load",
    "load_with_result",
    "warm",
    "push",
    "PushResult",
    "explain",
    "stats",
    "cache_dir",
    "reset_process_state",
    "WarmResult",
    "BuildError",
    "CacheMissError",
    "KernelCacheError",
    "LockTimeout",
    "LockViolation",
    "SchemaMismatch",
    "SpecError",
    "ToolchainError",
    "UnknownKernel",
]

# Resolved on first use (PEP 562), so that ``import kernelcache`` (and the drop-in, which imports
# it as its parent package) runs no class-creating module until a name is asked for.
_LAZY = {
    "KernelSpec": ("base.spec", "KernelSpec"),
    "Settings": ("base.settings", "Settings"),
    **{e: ("base.errors", e) for e in ("BuildError", "CacheMissError", "KernelCacheError", "LockTimeout", "LockViolation",
                                  "SchemaMismatch", "SpecError", "ToolchainError", "UnknownKernel")},
    "load": ("lookup.front", "load"),  # recalls a call answered before; else loader.load
    "load_with_result": ("lookup.loader", "load_with_result"),
    "warm": ("lookup.loader", "warm"),
    "explain": ("lookup.diagnose", "explain"),
    "stats": ("base.events", "stats"),
    "reset_process_state": ("base.process_state", "reset_process_state"),
    "WarmResult": ("lookup.loader", "WarmResult"),
    "push": ("lookup.push", "push"),
    "PushResult": ("lookup.push", "PushResult"),
}

if TYPE_CHECKING:  # pragma: no cover
    from .base.errors import (
        BuildError,
        CacheMissError,
        KernelCacheError,
        LockTimeout,
        LockViolation,
        SchemaMismatch,
        SpecError,
        ToolchainError,
        UnknownKernel,
    )
    from .base.events import stats
    from .base.process_state import reset_process_state
    from .base.settings import Settings
    from .base.spec import KernelSpec
    from .lookup.diagnose import explain
    from .lookup.front import load
    from .lookup.loader import WarmResult, load_with_result, warm
    from .lookup.push import PushResult, push


def cache_dir(settings: Settings | None = None) -> Path:
    """The writable cache root of ``settings`` (default: the environment's)."""
    from .base.settings import Settings

    return (settings or Settings.from_env()).cache_dir


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'kernelcache' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{target[0]}", __name__), target[1])
    globals()[name] = value
    return value


def _arm_patches() -> None:
    """KERNELCACHE_PATCH=tvm_ffi,torch (or KERNELCACHE_PATCH_TVM_FFI=1): install each drop-in once
    its target is imported (kernelcache.patch). Two dict lookups when unset: the settings module
    is not imported by ``import kernelcache`` (a warm recalled load never needs it)."""
    from .base.environ import patch_mentioned

    if not patch_mentioned():
        return
    from .base.settings import patch_requested

    chosen = patch_requested()
    if chosen:
        from .patch import arm_from_env

        arm_from_env(chosen)


_arm_patches()
