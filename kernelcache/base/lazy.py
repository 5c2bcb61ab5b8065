"""A package's names imported on first use (PEP 562 ``__getattr__``): one rule for the packages
whose warm path must not pay for their heavier modules (the drop-ins, the lockfile).

A leaf: it imports nothing of kernelcache."""
from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def names(package: str, where: Mapping[str, str], namespace: MutableMapping[str, Any]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``name`` from its submodule ``where[name]``,
    kept in ``namespace`` (the package's globals) so the next lookup is a plain one."""

    def __getattr__(name: str) -> Any:
        mod = where.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f".{mod}", package), name)
        namespace[name] = value
        return value

    return __getattr__
