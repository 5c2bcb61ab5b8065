"""``KERNELCACHE_PATCH_TVM_FFI=1``: install the drop-in when ``tvm_ffi.cpp`` is imported.

Why a hook instead of installing at once: installing needs ``tvm_ffi.cpp``, and importing it
pulls in torch (seconds). ``import kernelcache`` arms this hook when the setting is on; the
drop-in is installed right after ``tvm_ffi.cpp`` finishes importing (or at once if it already
has), so a process that never JITs pays nothing.
"""
from __future__ import annotations

import importlib.abc
import sys
from typing import Any

TARGET = "tvm_ffi.cpp"


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                real_exec = spec.loader.exec_module

                def exec_module(module: Any, _real: Any = real_exec) -> None:
                    _real(module)
                    _install()

                spec.loader.exec_module = exec_module  # type: ignore[method-assign]
                return spec
        return None


def _install() -> None:
    disarm()
    from ._patch import install_if_requested

    install_if_requested()


def arm() -> None:
    """Install now if ``tvm_ffi.cpp`` is loaded, else when it gets imported."""
    if TARGET in sys.modules:
        _install()
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def disarm() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
