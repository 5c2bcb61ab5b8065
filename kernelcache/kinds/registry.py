"""Kind names -> kind objects: the package's own kinds, then the ``kernelcache.kinds`` entry points.

Why a registry: a kind that lives outside the package (a plain C library loaded with ctypes, a
Triton launcher, an ORC JIT object file) must get the key, lock, cache, explain and fleet without
touching kernelcache. Its distribution declares an entry point::

    [project.entry-points."kernelcache.kinds"]
    my_kind = "my_pkg.kind:KIND"        # a kinds.base.Kind instance (or a class / factory of one)

The package's own kinds are files of ``kernelcache/kinds`` and are imported on first use; entry
points are read only when a name is none of those (``importlib.metadata`` costs ~10 ms), and only
the entry point of that name is imported, so a broken plugin fails the loads of its own kind
with a :class:`~kernelcache.base.errors.SpecError` naming it, never anyone else's.
"""
from __future__ import annotations

import sys
import threading
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ..base import process_state
from ..base.errors import SpecError

if TYPE_CHECKING:
    from .base import Kind

GROUP = "kernelcache.kinds"
_PACKAGE = __name__.rsplit(".", 1)[0]
_NOT_KINDS = frozenset({"base", "torch_common", "registry"})  # files of the package that are no kind

_lock = threading.Lock()
_plugins: dict[str, "Kind"] = {}  # entry-point kinds loaded in this process (and ``register``ed ones)


def _forget_plugins() -> None:
    with _lock:
        _plugins.clear()


process_state.register("kinds.registry.plugins", _forget_plugins)


def of(name: str) -> "Kind":
    """The kind named ``name``: a file of this package, else a registered kind, else the entry
    point of that name in group ``kernelcache.kinds`` (SpecError when none is, or it is broken).

    The fast path takes a module from ``sys.modules`` only once it has its ``KIND``: another
    thread may still be executing it (the plugin warms kernels in parallel threads), and
    ``import_module`` is what waits for that thread's import to finish."""
    kind = getattr(sys.modules.get(f"{_PACKAGE}.{name}"), "KIND", None)
    if kind is not None:
        return kind
    if not isinstance(name, str) or not name.isidentifier():
        raise SpecError(f"unknown module kind {name!r}")
    if name not in _NOT_KINDS:
        try:
            mod = import_module(f"{_PACKAGE}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{_PACKAGE}.{name}":
                raise
        else:
            kind = getattr(mod, "KIND", None)
            if kind is not None:
                return kind
    with _lock:
        kind = _plugins.get(name)
    return kind if kind is not None else _from_entry_point(name)


def register(kind: "Kind") -> "Kind":
    """Make ``kind`` known under ``kind.name`` in this process (what an entry point does, for
    code that defines a kind at run time). A name of the package's own kinds cannot be taken."""
    _check(kind, f"register({kind!r})")
    if kind.name in _NOT_KINDS or _builtin(kind.name):
        raise SpecError(f"module kind {kind.name!r} is one of kernelcache's own; choose another name")
    with _lock:
        _plugins[kind.name] = kind
    return kind


def _builtin(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(f"{_PACKAGE}.{name}") is not None


def _from_entry_point(name: str) -> "Kind":
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
    if not found:
        raise SpecError(f"unknown module kind {name!r}: no kernelcache/kinds/{name}.py and no entry point {name!r} in "
                        f"group {GROUP!r} (is the distribution that provides it installed?)")
    ep = found[0]
    dist = getattr(getattr(ep, "dist", None), "name", None)
    where = f"entry point {ep.name} = {ep.value!r} in group {GROUP!r}" + (f" of distribution {dist!r}" if dist else "")
    try:
        obj: Any = ep.load()
        kind = obj() if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "name")) else obj
    except Exception as e:  # noqa: BLE001 - a broken plugin is named, whatever it raised
        raise SpecError(f"module kind {name!r}: the {where} is broken: {type(e).__name__}: {e}") from e
    _check(kind, where)
    if kind.name != name:
        raise SpecError(f"module kind {name!r}: the {where} gives a kind named {kind.name!r}")
    with _lock:
        return _plugins.setdefault(name, kind)


def _check(kind: Any, where: str) -> None:
    from .base import Kind

    if not isinstance(kind, Kind):
        raise SpecError(f"{where} is not a kernelcache.kinds.base.Kind (got {type(kind).__name__})")
    if not isinstance(kind.name, str) or not kind.name.isidentifier():
        raise SpecError(f"{where}: kind name {kind.name!r} is not an identifier")
