"""The parameter tables of ``torch.utils.cpp_extension.load``/``load_inline`` (``dropin.params``):
what a recalled call keys (lists as plain strings, switches as bools, as the full path reads
them), what it leaves out and why."""
from __future__ import annotations

from ..dropin.params import Param, ParamTable, ignored
from ._torch_side import strs

_SYCL = "a call with SYCL inputs is never recalled (torch's own path builds it)"
_DIR = "where torch would build; kernelcache builds privately and only copies the answer's binary there"
_VERBOSE = "what is printed, not what is loaded"
_KEEP = "torch's build directory's intermediates; kernelcache's entries are immutable either way"


LOAD = ParamTable("torch.utils.cpp_extension:load", (
    Param("name"), Param("sources", plain=strs), Param("extra_cflags", plain=strs),
    Param("extra_cuda_cflags", plain=strs), ignored("extra_sycl_cflags", _SYCL), Param("extra_ldflags", plain=strs),
    Param("extra_include_paths", plain=strs), ignored("build_directory", _DIR), ignored("verbose", _VERBOSE),
    Param("with_cuda"), ignored("with_sycl", _SYCL), Param("is_python_module", plain=bool),
    Param("is_standalone", plain=bool), ignored("keep_intermediates", _KEEP),
))
LOAD_INLINE = ParamTable("torch.utils.cpp_extension:load_inline", (
    Param("name"), Param("cpp_sources", plain=strs), Param("cuda_sources", plain=strs),
    ignored("sycl_sources", _SYCL), Param("functions"), Param("extra_cflags", plain=strs),
    Param("extra_cuda_cflags", plain=strs), ignored("extra_sycl_cflags", _SYCL), Param("extra_ldflags", plain=strs),
    Param("extra_include_paths", plain=strs), ignored("build_directory", _DIR), ignored("verbose", _VERBOSE),
    Param("with_cuda"), ignored("with_sycl", _SYCL), Param("is_python_module", plain=bool),
    Param("with_pytorch_error_handling", plain=bool), ignored("keep_intermediates", _KEEP),
    ignored("use_pch", "a call with use_pch is never recalled (it publishes a header for torch)"),
    Param("no_implicit_headers", plain=bool),
))
TABLES = (LOAD, LOAD_INLINE)
