"""The parameter table of FlashInfer's ``JitSpecNvcc`` (``dropin.params``): the fields of the record
the route translates, which of them the recall digest keys and why the others cannot change the
answer. ``_gate`` refuses a record with a field the table does not name (another FlashInfer)."""
from __future__ import annotations

from ..dropin.params import Param, ParamTable, ignored


def _strs(v):  # noqa: ANN001, ANN202 - flags and paths as the route reads them
    return None if v is None else [str(f) for f in v]


JIT_SPEC = ParamTable("flashinfer.jit.core:JitSpecNvcc", (
    Param("name"), Param("sources", plain=_strs), Param("extra_cflags", plain=_strs),
    Param("extra_cuda_cflags", plain=_strs), Param("extra_ldflags", plain=_strs),
    Param("extra_include_dirs", plain=lambda v: [str(d) for d in v or ()]), Param("is_class", plain=bool),
    Param("needs_device_linking", plain=bool),
    ignored("post_load_adapter", "applied to the loaded module on every call, recalled or not: not part of the "
                                 "cached answer"),
    ignored("embedded_cubin_factory", "a module that embeds cubins is left to FlashInfer (_gate)"),
    ignored("extra_cuda_cflags_by_source", "a module with per-source CUDA flags is left to FlashInfer (_gate)"),
))
TABLES = (JIT_SPEC,)
