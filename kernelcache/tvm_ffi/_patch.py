"""Zero-code-change mode: route ``tvm_ffi.cpp``'s four JIT functions through kernelcache.

``install()`` replaces the attributes on ``tvm_ffi.cpp`` and ``tvm_ffi.cpp.extension`` (the
two places callers reach them through) for this process; ``uninstall()`` puts tvm-ffi's own
functions back (the shared base: :class:`kernelcache.dropin.Adapter`). A ``from tvm_ffi.cpp
import load_inline`` executed *before* ``install()`` keeps its reference to the original:
install early (the pytest option does it at configure time).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..dropin.adapter import Adapter, routed
from . import _api, _env, _front

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings

NAMES = ("load_inline", "load", "build_inline", "build")
_MODULES = ("tvm_ffi.cpp", "tvm_ffi.cpp.extension")


def _modules() -> dict[str, Any]:
    import importlib

    # import_module, not attribute access: the import hook installs while ``tvm_ffi`` itself is
    # still initialising (its ``cpp`` attribute is set only after ``tvm_ffi.cpp`` finished).
    return {n: importlib.import_module(n) for n in _MODULES}


def _replacement(name: str, settings: "Settings | None") -> Callable[..., Any]:
    # a base only: the call's own environment still applies (_env)
    # load/load_inline through their front: a routed call is recalled like a direct one
    target = getattr(_front if name in ("load", "load_inline") else _api, name)
    return routed(target, _env.Installed(settings) if settings is not None else None)


def _saved(originals: dict[tuple[str, str], Any]) -> None:
    # Fallbacks (HIP, object outputs) must reach tvm-ffi's own builders, never ourselves.
    _api.save_originals({name: originals[("tvm_ffi.cpp.extension", name)] for name in NAMES})


ADAPTER = Adapter("tvm_ffi", _modules, NAMES, _replacement, _saved)


def is_installed() -> bool:
    return ADAPTER.is_installed()


def install(settings: "Settings | None" = None) -> None:
    """Route ``tvm_ffi.cpp.load_inline/load/build_inline/build`` through kernelcache.

    ``settings`` (default: ``Settings.from_env()`` read at each call) is the base of every routed
    call; what tvm-ffi reads at call time (``TVM_FFI_CUDA_ARCH_LIST``, ``CXX``, ...) still applies
    per call, and a call's own ``settings=`` wins (kernelcache.dropin.call_settings). Calling it
    again replaces the settings; ``uninstall()`` restores tvm-ffi's functions.
    """
    ADAPTER.install(settings)


def uninstall() -> None:
    """Put tvm-ffi's own functions back (a no-op when not installed)."""
    ADAPTER.uninstall()


def install_if_requested(settings: "Settings | None" = None) -> bool:
    """Install when ``KERNELCACHE_PATCH`` names ``tvm_ffi`` (or ``KERNELCACHE_PATCH_TVM_FFI=1``).

    ``settings`` given: its ``patch`` decides and it becomes the base of each call; without it
    the environment decides and each call reads its own. Returns whether it installed; does not
    import tvm_ffi when the setting is off.
    """
    if settings is None:
        from ..base.settings import Settings

        if not Settings.from_env().patch_tvm_ffi:
            return False
    elif not settings.patch_tvm_ffi:
        return False
    install(settings)
    return True
