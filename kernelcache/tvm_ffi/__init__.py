"""Drop-in for ``tvm_ffi.cpp``'s JIT functions, built and cached by kernelcache.

Change one import::

    from kernelcache import tvm_ffi as jit   # instead of: import tvm_ffi.cpp as jit
    mod = jit.load_inline("my_ops", cpp_sources=src, functions=["add_one"])

or none at all: ``kernelcache.tvm_ffi.install()`` (``KERNELCACHE_PATCH=tvm_ffi``, the pytest
option ``--kc-patch=tvm_ffi``, or ``python -m kernelcache.patch script.py``; see
:mod:`kernelcache.patch`) routes ``tvm_ffi.cpp.load_inline/load/build_inline/build`` through
kernelcache for the process. In every mode a call reads its inputs when it runs, as tvm-ffi does
(``TVM_FFI_CUDA_ARCH_LIST``, ``CXX`` set around one call apply to that call; see ``_env``).

Same signatures, defaults and return types as ``tvm_ffi.cpp`` (plus an optional ``settings``);
headers are keyed by content from the compiler's dependency records, builds are single-flight
and published atomically, binaries are validated before load, and the exported schemas of the
first good build are enforced on every later load. Semantics that differ on purpose
(``build_directory``, ``output``, ``keep_module_alive``, link-only builds, the metadata define)
are in docs/tvm_ffi_dropin.md.

Importing this module patches nothing and does not import tvm_ffi; it imports the two loading
functions' front (``_front``: a call answered before is recalled without the loader) and the rest
on first use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import lazy
from ._front import load, load_inline

if TYPE_CHECKING:  # pragma: no cover
    from ._api import build, build_inline, file_spec, inline_spec
    from ._patch import install, install_if_requested, is_installed, uninstall

__all__ = [
    "build",
    "build_inline",
    "load",
    "load_inline",
    "install",
    "uninstall",
    "install_if_requested",
    "is_installed",
    "inline_spec",
    "file_spec",
]

_LAZY = {"build": "_api", "build_inline": "_api", "inline_spec": "_api", "file_spec": "_api",
         "install": "_patch", "uninstall": "_patch", "install_if_requested": "_patch", "is_installed": "_patch"}

__getattr__ = lazy.names(__name__, _LAZY, globals())
