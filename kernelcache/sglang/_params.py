"""The parameter table of SGLang's ``load_jit`` (``dropin.params``). Every parameter is keyed: the
route digests what SGLang resolves them into (the module name from ``args``, the build file its
flags, sources, wrappers and dependencies generate, each translation unit), so the table keys
them all, and ``_request`` takes its keyword check from it."""
from __future__ import annotations

from ..dropin.params import Param, ParamTable

LOAD_JIT = ParamTable("sglang.kernels.jit.utils.compile.loader:load_jit", (
    Param("args"), Param("cpp_files"), Param("cuda_files"), Param("cpp_wrappers"), Param("cuda_wrappers"),
    Param("extra_cflags"), Param("extra_cuda_cflags"), Param("extra_ldflags"), Param("extra_include_paths"),
    Param("extra_dependencies"), Param("header_only"),
))
TABLES = (LOAD_JIT,)
