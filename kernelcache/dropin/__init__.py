"""The base every drop-in is built on: one way to save and restore what it patches, one rule for
the settings a routed call runs with, one place for the sources a drop-in generates.

* :mod:`.adapter` — :class:`Adapter`: the originals a drop-in replaced (fallbacks reach them,
  never the replacement), ``install(settings)`` / ``uninstall()`` / ``is_installed()``, the
  routed wrappers (marked ``__kernelcache_dropin__``) that pass the installed settings on.
* :mod:`.call_settings` — what settings one call runs with: its own ``settings=``, else the
  installed base or the environment read at call time, plus the foreign JIT's own call-time
  arch variable.
* :mod:`.generated` — generated sources, content-addressed under the cache, and their cleanup
  when a call fails.
* :mod:`.params` — one parameter table per foreign function: the fronts' recall digest, call
  through and signature check derive from it.

The registry of drop-ins and the parsing of their names is :mod:`kernelcache.base.patch_names`.
Importing this package imports none of the foreign JITs.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Adapter", "Installed", "resolve"]


def __getattr__(name: str) -> Any:
    """``Adapter``, ``Installed``, ``resolve`` on first use: a front that imports only
    :mod:`.params` on its warm path does not pay for the adapter."""
    if name == "Adapter":
        from .adapter import Adapter

        return Adapter
    if name in ("Installed", "resolve"):
        from . import call_settings

        return getattr(call_settings, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
