"""One meta-path finder that runs a callback right after a given module finishes importing.

Why wrap ``exec_module`` instead of polling ``sys.modules``: the callback (installing a drop-in)
must run before any caller can fetch the target's functions, i.e. inside the import itself.
The finder only answers for armed names and delegates finding to the rest of ``sys.meta_path``.
"""
from __future__ import annotations

import importlib.abc
import sys
import threading
from typing import Any, Callable, Iterable

_lock = threading.Lock()
_armed: dict[str, Callable[[], None]] = {}  # target module -> what to run once it is imported


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _armed:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                real_exec = spec.loader.exec_module

                def exec_module(module: Any, _real: Any = real_exec) -> None:
                    _real(module)
                    _fire(fullname)

                spec.loader.exec_module = exec_module  # type: ignore[method-assign]
                return spec
        return None


_FINDER = _Finder()


def _fire(target: str) -> None:
    with _lock:
        callback = _armed.pop(target, None)
        if not _armed and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
    if callback is not None:
        callback()


def arm(target: str, callback: Callable[[], None]) -> None:
    """Run ``callback`` once ``target`` is imported; now, if it already is."""
    if target in sys.modules:
        callback()
        return
    with _lock:
        _armed[target] = callback
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def disarm(targets: Iterable[str]) -> None:
    with _lock:
        for t in targets:
            _armed.pop(t, None)
        if not _armed and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)


def armed() -> tuple[str, ...]:
    return tuple(_armed)
