"""The parameter tables of ``tvm_ffi.cpp``'s four functions (plain tables, ``dropin.params``): what
a recalled ``load``/``load_inline`` keys and what it leaves out and why (declared in ``_front``,
on the warm path, where a module import would cost), and ``build``/``build_inline``, which are
never recalled: their tables say what reaches the built module."""
from __future__ import annotations

from ..dropin.params import Table
from ._front import LOAD, LOAD_INLINE

_DIR = ("where tvm-ffi would build; kernelcache builds in a private directory, then copies the validated "
        "binary there")
_OUTPUT = "the name of the copy build/build_inline deliver; the module built is the same"

BUILD_INLINE: Table = ("tvm_ffi.cpp:build_inline",
                ("name", "cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
                 "extra_ldflags", "extra_include_paths", "build_directory", "embed_cubin", "backend", "output"),
                {"build_directory": _DIR, "output": _OUTPUT}, {})
BUILD: Table = ("tvm_ffi.cpp:build",
         ("name", "sources", "cpp_files", "cuda_files", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
          "extra_include_paths", "build_directory", "backend", "output"),
         {"build_directory": _DIR, "output": _OUTPUT}, {})
TABLES = (LOAD_INLINE, LOAD, BUILD_INLINE, BUILD)
