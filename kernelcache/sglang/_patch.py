"""Zero-code-change mode: route SGLang's ``load_jit`` through kernelcache.

``load_jit`` is one function, but SGLang's kernels reach it under several names: it is defined
in ``sglang.kernels.jit.utils.compile.loader`` and re-exported by ``...utils.compile`` and
``...utils``, and each kernel module binds it at its own import
(``from sglang.kernels.jit.utils import load_jit``). Installed by the import hook, right after the
loader module executes, only the loader holds it yet: every later binding takes ours. Installed
later (``install()`` from code), every ``sglang.*`` module already holding SGLang's function gets
ours too. ``uninstall()`` puts SGLang's back everywhere it finds ours; one bound elsewhere keeps
ours, which then calls SGLang's own (the drop-ins' base: :class:`kernelcache.dropin.Adapter`).
An untested SGLang version leaves everything alone and says so once.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ..dropin.adapter import Adapter, is_ours
from ..dropin.call_settings import Installed
from . import _gate, _route

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings

NAME = "load_jit"


def _holders() -> dict[str, Any]:
    """The loader module and every ``sglang.*`` module whose ``load_jit`` is SGLang's (or ours)."""
    import importlib

    loader = importlib.import_module(_route.LOADER)
    own = ADAPTER.original(NAME, _route.LOADER) if (_route.LOADER, NAME) in ADAPTER.originals() else None
    own = own if own is not None else vars(loader).get(NAME)
    out = {_route.LOADER: loader}
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or mod is loader or not mod_name.startswith("sglang."):
            continue
        bound = vars(mod).get(NAME) if hasattr(mod, "__dict__") else None
        if bound is not None and (bound is own or is_ours(bound)):
            out[mod_name] = mod
    return out


def _replacement(name: str, settings: "Settings | None") -> Any:
    base = Installed(settings) if settings is not None else None
    return _route.make(lambda: ADAPTER.original(NAME, _route.LOADER), ADAPTER.is_installed, base)


ADAPTER = Adapter("sglang", _holders, (NAME,), _replacement)


def is_installed() -> bool:
    return ADAPTER.is_installed()


def install(settings: "Settings | None" = None) -> bool:
    """Route SGLang's ``load_jit`` through kernelcache; False (and one line) when this SGLang is
    not one the route was tested with, leaving it untouched.

    ``settings`` (default: the environment's at each call) is the base of every routed load.
    """
    why = _gate.version_refusal()
    if why:
        _gate.say("*", why)
        return False
    ADAPTER.install(settings)
    return True


def uninstall() -> None:
    """Put SGLang's own ``load_jit`` back, also where a kernel module bound ours (a no-op when
    not installed)."""
    if not ADAPTER.is_installed():
        return
    own = ADAPTER.original(NAME, _route.LOADER)
    holders = _holders()
    ADAPTER.uninstall()
    for mod in holders.values():
        if is_ours(vars(mod).get(NAME)):
            setattr(mod, NAME, own)
