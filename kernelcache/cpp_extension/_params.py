"""The parameter tables of ``torch.utils.cpp_extension.load``/``load_inline`` (``dropin.params``):
what a recalled call keys (lists as plain strings, switches as bools, as the full path reads
them), what it leaves out and why."""
from __future__ import annotations

from ..dropin.params import table
from ._torch_side import strs

_SYCL = "a call with SYCL inputs is never recalled (torch's own path builds it)"
_DIR = "where torch would build; kernelcache builds privately and only copies the answer's binary there"
_VERBOSE = "what is printed, not what is loaded"
_KEEP = "torch's build directory's intermediates; kernelcache's entries are immutable either way"
_LISTS = ("sources", "cpp_sources", "cuda_sources", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
          "extra_include_paths")
_SWITCHES = ("is_python_module", "is_standalone", "with_pytorch_error_handling", "no_implicit_headers")


def _plain(names: tuple[str, ...]) -> dict:
    return {**{n: strs for n in names if n in _LISTS}, **{n: bool for n in names if n in _SWITCHES}}


_LOAD = ("name", "sources", "extra_cflags", "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags",
         "extra_include_paths", "build_directory", "verbose", "with_cuda", "with_sycl", "is_python_module",
         "is_standalone", "keep_intermediates")
LOAD = table("torch.utils.cpp_extension:load", _LOAD, {
    "extra_sycl_cflags": _SYCL, "build_directory": _DIR, "verbose": _VERBOSE, "with_sycl": _SYCL,
    "keep_intermediates": _KEEP}, _plain(_LOAD))
_LOAD_INLINE = ("name", "cpp_sources", "cuda_sources", "sycl_sources", "functions", "extra_cflags",
                "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags", "extra_include_paths", "build_directory",
                "verbose", "with_cuda", "with_sycl", "is_python_module", "with_pytorch_error_handling",
                "keep_intermediates", "use_pch", "no_implicit_headers")
LOAD_INLINE = table("torch.utils.cpp_extension:load_inline", _LOAD_INLINE, {
    "sycl_sources": _SYCL, "extra_sycl_cflags": _SYCL, "build_directory": _DIR, "verbose": _VERBOSE,
    "with_sycl": _SYCL, "keep_intermediates": _KEEP,
    "use_pch": "a call with use_pch is never recalled (it publishes a header for torch)"}, _plain(_LOAD_INLINE))
TABLES = (LOAD, LOAD_INLINE)
