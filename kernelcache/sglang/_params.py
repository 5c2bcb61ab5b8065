"""The parameter table of SGLang's ``load_jit`` (``dropin.params``). Every parameter is keyed: the
route digests what SGLang resolves them into (the module name from ``args``, the build file its
flags, sources, wrappers and dependencies generate, each translation unit), and ``_request``
takes its keyword check from the table."""
from __future__ import annotations

from ..dropin.params import table

LOAD_JIT = table("sglang.kernels.jit.utils.compile.loader:load_jit", (
    "args", "cpp_files", "cuda_files", "cpp_wrappers", "cuda_wrappers", "extra_cflags", "extra_cuda_cflags",
    "extra_ldflags", "extra_include_paths", "extra_dependencies", "header_only"), {})
TABLES = (LOAD_JIT,)
