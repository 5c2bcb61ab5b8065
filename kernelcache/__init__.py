"""kernelcache: JIT-built C++/CUDA kernels you can trust in CI and in production.

The public API is re-exported here. Nothing heavy (tvm_ffi, torch, subprocesses) is imported
at import time: ``import kernelcache`` must stay cheap because the pytest plugin and
production servers import it on every start.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    BuildError,
    CacheMissError,
    KernelCacheError,
    LockTimeout,
    SchemaMismatch,
    SpecError,
    ToolchainError,
)
from .spec import KernelSpec

__version__ = "0.1.0"

__all__ = [
    "KernelSpec",
    "load",
    "warm",
    "explain",
    "stats",
    "cache_dir",
    "WarmResult",
    "BuildError",
    "CacheMissError",
    "KernelCacheError",
    "LockTimeout",
    "SchemaMismatch",
    "SpecError",
    "ToolchainError",
]

_LAZY = {
    "load": ("loader", "load"),
    "warm": ("loader", "warm"),
    "explain": ("loader", "explain"),
    "stats": ("events", "stats"),
    "cache_dir": ("config", "cache_dir"),
    "WarmResult": ("loader", "WarmResult"),
}

if TYPE_CHECKING:  # pragma: no cover
    from .events import stats
    from .loader import WarmResult, explain, load, warm
    from .config import cache_dir


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'kernelcache' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{target[0]}", __name__), target[1])
    globals()[name] = value
    return value
