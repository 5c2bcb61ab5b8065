"""Zero-code-change mode: route FlashInfer's nvcc JIT modules through kernelcache.

``install()`` replaces six attributes of ``flashinfer.jit.core.JitSpecNvcc`` (the one class
every nvcc module, templated or not, is built and loaded through) for this process:
``build_and_load`` and ``_build_and_load_jit_fallback`` (which bypasses it), and the four that
name the loaded file (``get_library_path(s)``, ``jit_library_path``, ``is_compiled``), so they
agree with what was loaded; and FlashInfer's bulk prebuild ``build_jit_specs`` (in
``flashinfer.jit.core`` and its re-export ``flashinfer.jit``: ``_bulk``), so a prebuilt module
is the entry a later ``build_and_load`` hits. ``uninstall()`` puts FlashInfer's own back (the drop-ins' base:
:class:`kernelcache.dropin.Adapter`). An untested FlashInfer version leaves the class alone
and says so once.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..dropin.adapter import Adapter
from ..dropin.call_settings import Installed
from . import _bulk, _gate, _route

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings

NAMES = ("build_and_load", "_build_and_load_jit_fallback", "get_library_path", "get_library_paths",
         "jit_library_path", "is_compiled")
_LABEL = "JitSpecNvcc"


def _classes() -> dict[str, Any]:
    import importlib

    return {_LABEL: importlib.import_module("flashinfer.jit.core").JitSpecNvcc}


def _replacement(name: str, settings: "Settings | None") -> Any:
    base = Installed(settings) if settings is not None else None
    return _route.make(name, lambda: ADAPTER.original(name, _LABEL), base)


ADAPTER = Adapter("flashinfer", _classes, NAMES, _replacement)

BULK = "build_jit_specs"


def _modules() -> dict[str, Any]:
    """``flashinfer.jit.core`` and, once it has bound the name, ``flashinfer.jit`` (which
    re-exports it: ``flashinfer.jit.build_jit_specs`` is what FlashInfer's tests call). Installed
    from the import hook, ``flashinfer.jit`` is still importing and binds ours from core itself."""
    import importlib
    import sys

    out = {"core": importlib.import_module("flashinfer.jit.core")}
    jit = sys.modules.get("flashinfer.jit")
    if jit is not None and BULK in vars(jit):
        out["jit"] = jit
    return out


def _bulk_replacement(name: str, settings: "Settings | None") -> Any:
    base = Installed(settings) if settings is not None else None
    return _bulk.make(lambda: BULK_ADAPTER.original(name, "core"), BULK_ADAPTER.is_installed, base)


# A second adapter: its targets are modules, the first one's a class.
BULK_ADAPTER = Adapter("flashinfer.build_jit_specs", _modules, (BULK,), _bulk_replacement)


def is_installed() -> bool:
    return ADAPTER.is_installed()


def install(settings: "Settings | None" = None) -> bool:
    """Route FlashInfer's nvcc modules through kernelcache; False (and one line) when this
    FlashInfer is not one the route knows, leaving it untouched.

    ``settings`` (default: the environment's at each call) is the base of every routed load.
    """
    why = _gate.class_refusal(_classes()[_LABEL])
    if why:
        _gate.say(None, why)
        return False
    ADAPTER.install(settings)
    BULK_ADAPTER.install(settings)
    return True


def uninstall() -> None:
    """Put FlashInfer's own methods back (a no-op when not installed). A ``flashinfer.jit``
    that bound ours while importing keeps it; uninstalled, it calls FlashInfer's own."""
    BULK_ADAPTER.uninstall()
    ADAPTER.uninstall()
