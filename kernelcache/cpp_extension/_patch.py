"""Zero-code-change mode: route ``torch.utils.cpp_extension.load/load_inline`` through kernelcache.

``install()`` replaces the two attributes on ``torch.utils.cpp_extension`` for this process;
``uninstall()`` restores torch's functions. Code that did ``from torch.utils.cpp_extension
import load`` *before* ``install()`` keeps torch's function: install early (the runner
``python -m kernelcache.cpp_extension`` and the patch switches install before user code runs).
"""
from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any, Callable

from . import _api

if TYPE_CHECKING:  # pragma: no cover
    from ..settings import Settings

NAMES = ("load", "load_inline")
_lock = threading.Lock()
_installed: list["Settings | None"] = []  # one element while installed


def _replacement(name: str, settings: "Settings | None") -> Callable[..., Any]:
    target = getattr(_api, name)

    @functools.wraps(target)
    def routed(*args: Any, **kwargs: Any) -> Any:
        if settings is not None:
            kwargs.setdefault("settings", settings)
        return target(*args, **kwargs)

    routed.__kernelcache_dropin__ = True  # type: ignore[attr-defined]
    return routed


def is_installed() -> bool:
    return bool(_installed)


def install(settings: "Settings | None" = None) -> None:
    """Route torch's ``load``/``load_inline`` through kernelcache (idempotent).

    ``settings`` (default: the environment's at each call) is what routed calls use; calling
    again replaces them. Imports ``torch.utils.cpp_extension``.
    """
    import torch.utils.cpp_extension as tce

    with _lock:
        for name in NAMES:
            current = getattr(tce, name)
            if not getattr(current, "__kernelcache_dropin__", False):
                _api.save_original(name, current)
            setattr(tce, name, _replacement(name, settings))
        _installed[:] = [settings]


def uninstall() -> None:
    """Put torch's own functions back (a no-op when not installed)."""
    import sys

    with _lock:
        if not _installed:
            return
        tce = sys.modules.get("torch.utils.cpp_extension")
        if tce is not None:
            for name in NAMES:
                if getattr(getattr(tce, name), "__kernelcache_dropin__", False):
                    setattr(tce, name, _api.original(name))
        _installed.clear()
