"""The parameter table of FlashInfer's ``JitSpecNvcc`` (``dropin.params``): the fields of the record
the route translates, which of them the recall digest keys and why the others cannot change the
answer. ``_gate`` refuses a record with a field the table does not name (another FlashInfer)."""
from __future__ import annotations

from ..dropin.params import table


def _strs(v):  # noqa: ANN001, ANN202 - flags and paths as the route reads them
    return None if v is None else [str(f) for f in v]


def _dirs(v):  # noqa: ANN001, ANN202
    return [str(d) for d in v or ()]


JIT_SPEC = table("flashinfer.jit.core:JitSpecNvcc", (
    "name", "sources", "extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_dirs", "is_class",
    "needs_device_linking", "post_load_adapter", "embedded_cubin_factory", "extra_cuda_cflags_by_source"), {
    "post_load_adapter": "applied to the loaded module on every call, recalled or not: not part of the cached answer",
    "embedded_cubin_factory": "a module that embeds cubins is left to FlashInfer (_gate)",
    "extra_cuda_cflags_by_source": "a module with per-source CUDA flags is left to FlashInfer (_gate)",
}, {"sources": _strs, "extra_cflags": _strs, "extra_cuda_cflags": _strs, "extra_ldflags": _strs,
    "extra_include_dirs": _dirs, "is_class": bool, "needs_device_linking": bool})
TABLES = (JIT_SPEC,)
