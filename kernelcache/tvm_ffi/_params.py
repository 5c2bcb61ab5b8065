"""The parameter tables of ``tvm_ffi.cpp``'s four functions (``dropin.params``): what a recalled
``load``/``load_inline`` keys, what it leaves out and why; ``build``/``build_inline`` are never
recalled, their tables say what reaches the built module."""
from __future__ import annotations

from ..dropin.params import Param, ParamTable, ignored

_DIR = ("where tvm-ffi would build; kernelcache builds in a private directory and never reads it for a load "
        "(build/build_inline copy the validated binary there)")
_ALIVE = "whether the returned module keeps itself loaded: applied to the answer after it is found, not part of it"
_OUTPUT = "the name of the copy build/build_inline deliver; the module built is the same"

LOAD_INLINE = ParamTable("tvm_ffi.cpp:load_inline", (
    Param("name"), Param("cpp_sources"), Param("cuda_sources"), Param("functions"), Param("extra_cflags"),
    Param("extra_cuda_cflags"), Param("extra_ldflags"), Param("extra_include_paths"), ignored("build_directory", _DIR),
    Param("embed_cubin"), ignored("keep_module_alive", _ALIVE), Param("backend"),
))
LOAD = ParamTable("tvm_ffi.cpp:load", (
    Param("name"), Param("sources"), Param("cpp_files"), Param("cuda_files"), Param("extra_cflags"),
    Param("extra_cuda_cflags"), Param("extra_ldflags"), Param("extra_include_paths"), ignored("build_directory", _DIR),
    ignored("keep_module_alive", _ALIVE), Param("backend"),
))
BUILD_INLINE = ParamTable("tvm_ffi.cpp:build_inline", (
    Param("name"), Param("cpp_sources"), Param("cuda_sources"), Param("functions"), Param("extra_cflags"),
    Param("extra_cuda_cflags"), Param("extra_ldflags"), Param("extra_include_paths"), ignored("build_directory", _DIR),
    Param("embed_cubin"), Param("backend"), ignored("output", _OUTPUT),
))
BUILD = ParamTable("tvm_ffi.cpp:build", (
    Param("name"), Param("sources"), Param("cpp_files"), Param("cuda_files"), Param("extra_cflags"),
    Param("extra_cuda_cflags"), Param("extra_ldflags"), Param("extra_include_paths"), ignored("build_directory", _DIR),
    Param("backend"), ignored("output", _OUTPUT),
))
TABLES = (LOAD_INLINE, LOAD, BUILD_INLINE, BUILD)
