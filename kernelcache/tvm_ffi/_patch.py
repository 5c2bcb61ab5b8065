"""Zero-code-change mode: route ``tvm_ffi.cpp``'s four JIT functions through kernelcache.

``install()`` replaces the attributes on ``tvm_ffi.cpp`` and ``tvm_ffi.cpp.extension`` (the
two places callers reach them through) for this process; ``uninstall()`` puts tvm-ffi's own
functions back. A ``from tvm_ffi.cpp import load_inline`` executed *before* ``install()`` keeps
its reference to the original: install early (the pytest option does it at configure time).
"""
from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any, Callable

from . import _api, _env

if TYPE_CHECKING:  # pragma: no cover
    from ..settings import Settings

NAMES = ("load_inline", "load", "build_inline", "build")
_lock = threading.Lock()
_saved: dict[tuple[str, str], Callable[..., Any]] = {}  # (module, name) -> what was there
_installed_settings: list["Settings | None"] = []  # one element while installed


def _modules() -> dict[str, Any]:
    import importlib

    # import_module, not attribute access: the import hook installs while ``tvm_ffi`` itself is
    # still initialising (its ``cpp`` attribute is set only after ``tvm_ffi.cpp`` finished).
    return {n: importlib.import_module(n) for n in ("tvm_ffi.cpp", "tvm_ffi.cpp.extension")}


def _replacement(name: str, settings: "Settings | None") -> Callable[..., Any]:
    target = getattr(_api, name)
    base = _env.Installed(settings) if settings is not None else None

    @functools.wraps(target)
    def routed(*args: Any, **kwargs: Any) -> Any:
        if base is not None:  # a base only: the call's own environment still applies (_env)
            kwargs.setdefault("settings", base)
        return target(*args, **kwargs)

    routed.__kernelcache_dropin__ = True  # type: ignore[attr-defined]
    return routed


def is_installed() -> bool:
    return bool(_installed_settings)


def install(settings: "Settings | None" = None) -> None:
    """Route ``tvm_ffi.cpp.load_inline/load/build_inline/build`` through kernelcache.

    ``settings`` (default: ``Settings.from_env()`` read at each call) is the base of every routed
    call; what tvm-ffi reads at call time (``TVM_FFI_CUDA_ARCH_LIST``, ``CXX``, ...) still applies
    per call, and a call's own ``settings=`` wins (kernelcache.tvm_ffi._env). Calling it again
    replaces the settings; ``uninstall()`` restores tvm-ffi's functions.
    """
    mods = _modules()
    with _lock:
        for mname, mod in mods.items():
            for name in NAMES:
                current = getattr(mod, name)
                if not getattr(current, "__kernelcache_dropin__", False):
                    _saved[(mname, name)] = current
        # Fallbacks (HIP, object outputs) must reach tvm-ffi's own builders, never ourselves.
        _api.save_originals({name: _saved[("tvm_ffi.cpp.extension", name)] for name in NAMES})
        for mod in mods.values():
            for name in NAMES:
                setattr(mod, name, _replacement(name, settings))
        _installed_settings[:] = [settings]


def uninstall() -> None:
    """Put tvm-ffi's own functions back (a no-op when not installed)."""
    with _lock:
        if not _installed_settings:
            return
        mods = _modules()
        for (mname, name), original in _saved.items():
            mod = mods[mname]
            if getattr(getattr(mod, name), "__kernelcache_dropin__", False):
                setattr(mod, name, original)
        _installed_settings.clear()


def install_if_requested(settings: "Settings | None" = None) -> bool:
    """Install when ``KERNELCACHE_PATCH`` names ``tvm_ffi`` (or ``KERNELCACHE_PATCH_TVM_FFI=1``).

    ``settings`` given: its ``patch`` decides and it becomes the base of each call; without it
    the environment decides and each call reads its own. Returns whether it installed; does not
    import tvm_ffi when the setting is off.
    """
    if settings is None:
        from ..settings import Settings

        if not Settings.from_env().patch_tvm_ffi:
            return False
    elif not settings.patch_tvm_ffi:
        return False
    install(settings)
    return True
