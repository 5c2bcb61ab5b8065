"""Zero-code-change mode: route ``torch.utils.cpp_extension.load/load_inline`` through kernelcache.

``install()`` replaces the two attributes on ``torch.utils.cpp_extension`` for this process;
``uninstall()`` restores torch's functions (the shared base: :class:`kernelcache.dropin.Adapter`).
Code that did ``from torch.utils.cpp_extension import load`` *before* ``install()`` keeps
torch's function: install early (the runner ``python -m kernelcache.cpp_extension`` and the
patch switches install before user code runs).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..dropin.adapter import Adapter, routed
from . import _front, _torch_side

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings

NAMES = ("load", "load_inline")
_TARGET = "torch.utils.cpp_extension"


def _modules() -> dict[str, Any]:
    import importlib

    return {_TARGET: importlib.import_module(_TARGET)}


def _replacement(name: str, settings: "Settings | None") -> Callable[..., Any]:
    # through the front: a routed call is recalled like a direct one (the full path on a miss)
    return routed(getattr(_front, name), settings)


def _saved(originals: dict[tuple[str, str], Any]) -> None:
    for name in NAMES:  # the drop-in's fallbacks call torch's own functions, never ours
        _torch_side.save_original(name, originals[(_TARGET, name)])


ADAPTER = Adapter("torch", _modules, NAMES, _replacement, _saved)


def is_installed() -> bool:
    return ADAPTER.is_installed()


def install(settings: "Settings | None" = None) -> None:
    """Route torch's ``load``/``load_inline`` through kernelcache (idempotent).

    ``settings`` (default: the environment's at each call) is what routed calls use; calling
    again replaces them. Imports ``torch.utils.cpp_extension``.
    """
    ADAPTER.install(settings)


def uninstall() -> None:
    """Put torch's own functions back (a no-op when not installed)."""
    ADAPTER.uninstall()
