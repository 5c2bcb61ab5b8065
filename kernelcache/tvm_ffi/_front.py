"""``load_inline`` / ``load``: a call the cache answered before is recalled here; every other
call (and any ``settings=``) takes the full path in :mod:`._api`.

Why a module of its own: ``import kernelcache.tvm_ffi`` and the first warm load of a process
import only this and :mod:`kernelcache.lookup.recall` (benchmarks/bench_dropin_import.py); the argument
handling, the loader and the toolchain are imported when a call is not recalled. The digest and
the call through come from tvm-ffi's parameter tables (``LOAD_INLINE``, ``LOAD``; ``_params``).
"""
from __future__ import annotations

from itertools import filterfalse
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..lookup import recall

# The parameter tables of tvm_ffi.cpp.load_inline / load (plain tables, ``dropin.params``; here and not
# in ``_params``, which has the build tables: no module import on the warm path). The fronts' own
# signatures are the tables' plus ``settings`` (tests/kinds/test_foreign_params.py). Digest and call
# through are spelled with builtins (``dropin.params.digest``/``bind``): no code object more on the
# warm path; ``args`` is the frame's ``locals()``, which a tracer may refresh with more names, so the
# call through takes the table's names from it.
_DIR = ("where tvm-ffi would build; kernelcache builds in a private directory and never reads it for a load "
        "(build/build_inline copy the validated binary there)")
_ALIVE = "whether the returned module keeps itself loaded: applied to the answer after it is found, not part of it"
LOAD_INLINE: Table = ("tvm_ffi.cpp:load_inline",
               ("name", "cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
                "extra_ldflags", "extra_include_paths", "build_directory", "embed_cubin", "keep_module_alive",
                "backend"),
               {"build_directory": _DIR, "keep_module_alive": _ALIVE}, {})
LOAD: Table = ("tvm_ffi.cpp:load",
        ("name", "sources", "cpp_files", "cuda_files", "extra_cflags", "extra_cuda_cflags", "extra_ldflags",
         "extra_include_paths", "build_directory", "keep_module_alive", "backend"),
        {"build_directory": _DIR, "keep_module_alive": _ALIVE}, {})

if TYPE_CHECKING:  # pragma: no cover
    from tvm_ffi import Module

    from ..base.settings import Settings
    from ..dropin.params import Table


def load_inline(
    name: str,
    *,
    cpp_sources: Sequence[str] | str | None = None,
    cuda_sources: Sequence[str] | str | None = None,
    functions: Mapping[str, str] | Sequence[str] | str | None = None,
    extra_cflags: Sequence[str] | None = None,
    extra_cuda_cflags: Sequence[str] | None = None,
    extra_ldflags: Sequence[str] | None = None,
    extra_include_paths: Sequence[str] | None = None,
    build_directory: str | None = None,
    embed_cubin: Mapping[str, bytes] | None = None,
    keep_module_alive: bool = True,
    backend: str | None = None,
    settings: "Settings | None" = None,
) -> "Module":
    """Build (or find in the cache), validate and load a module from inline C++/CUDA code.

    Same arguments and result as ``tvm_ffi.cpp.load_inline`` (see :func:`._api.load_inline`).
    """
    args = locals()
    d = None
    if settings is None and not _links_objects(extra_ldflags):
        d = recall.digest("tvm_ffi.load_inline", (*map(args.__getitem__, filterfalse(LOAD_INLINE[2].__contains__,
                                                                                      LOAD_INLINE[1])),
                                                  recall.real_paths(extra_include_paths)))
        mod = recall.recall(d) if d is not None else None
        if mod is not None:
            return mod
    from . import _api

    return _api.load_inline(**dict(zip(LOAD_INLINE[1], map(args.__getitem__, LOAD_INLINE[1]))), settings=settings,
                            _recall=d)


def load(
    name: str,
    *,
    sources: Sequence[str] | str | None = None,
    cpp_files: Sequence[str] | str | None = None,
    cuda_files: Sequence[str] | str | None = None,
    extra_cflags: Sequence[str] | None = None,
    extra_cuda_cflags: Sequence[str] | None = None,
    extra_ldflags: Sequence[str] | None = None,
    extra_include_paths: Sequence[str] | None = None,
    build_directory: str | None = None,
    keep_module_alive: bool = True,
    backend: str | None = None,
    settings: "Settings | None" = None,
) -> "Module":
    """Build (or find in the cache), validate and load a module from source files.

    Same arguments and result as ``tvm_ffi.cpp.load`` (see :func:`._api.load`).
    """
    args = locals()
    d = None
    if settings is None and not _links_objects(sources, cpp_files, cuda_files, extra_ldflags):
        d = recall.digest("tvm_ffi.load", (*map(args.__getitem__, filterfalse(LOAD[2].__contains__, LOAD[1])),
                                           [recall.real_paths(g) for g in (sources, cpp_files, cuda_files,
                                                                           extra_include_paths)]))
        mod = recall.recall(d) if d is not None else None
        if mod is not None:
            return mod
    from . import _api

    return _api.load(**dict(zip(LOAD[1], map(args.__getitem__, LOAD[1]))), settings=settings, _recall=d)


def _links_objects(*groups: Any) -> bool:
    return recall.links_objects(p for g in groups for p in ([g] if isinstance(g, str) else g or ()))
