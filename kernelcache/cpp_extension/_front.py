"""``load`` / ``load_inline``: a call the cache answered before is recalled here; every other
call (and any ``settings=``) takes the full path in :mod:`._api`.

Why a module of its own: a warm call in a fresh process must cost less than torch's own warm
call (issue 24), and the full path's imports (the loader, torch's flag lines, the spec) cost more
than that call. A recalled call imports only :mod:`kernelcache.lookup.recall` and :mod:`._versions`.

torch's in-process names still hold: a recalled module is handed out only when this process's
versioning gives its inputs the name the entry was built under (``name`` for the first inputs of
a name, ``name_v<N>`` after; the inputs' version digest is the note the full path recorded with
the answer), and it is then recorded as loaded under that version, exactly as the full path
records it. Never recalled: SYCL calls (torch's own), ``use_pch`` (it publishes a header for
torch), object files or archives among the inputs or link flags (linked in by their bytes).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable

from ..dropin.params import bind, digest
from ..lookup import recall
from . import _torch_side, _versions
from ._params import LOAD, LOAD_INLINE

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings


def load(name, sources, extra_cflags=None, extra_cuda_cflags=None, extra_sycl_cflags=None, extra_ldflags=None,
         extra_include_paths=None, build_directory=None, verbose=False, with_cuda: bool | None = None,
         with_sycl: bool | None = None, is_python_module=True, is_standalone=False, keep_intermediates=True,
         *, settings: "Settings | None" = None):
    """Build (or find in the cache), validate and load a torch C++/CUDA extension.

    Same arguments and results as ``torch.utils.cpp_extension.load`` (see :func:`._api.load`).
    """
    args = locals()
    d = None
    if (settings is None and not (with_sycl or extra_sycl_cflags) and not _links_objects(sources, extra_ldflags)
            and _arch_fixed(with_cuda, [str(p).endswith((".cu", ".cuh")) for p in _strs_all((sources,))])):
        d = _digest("torch.load", lambda: (*digest(LOAD, args), recall.real_paths(_strs(sources)),
                                           recall.real_paths(_strs(extra_include_paths)), _env()))
        got = _recalled(name, d, verbose, build_directory) if d is not None else None
        if got is not None:
            return got
    from . import _api

    return _api.load(**bind(LOAD, args), settings=settings, _recall=d)


def load_inline(name, cpp_sources, cuda_sources=None, sycl_sources=None, functions=None, extra_cflags=None,
                extra_cuda_cflags=None, extra_sycl_cflags=None, extra_ldflags=None, extra_include_paths=None,
                build_directory=None, verbose=False, with_cuda=None, with_sycl=None, is_python_module=True,
                with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False,
                no_implicit_headers=False, *, settings: "Settings | None" = None):
    """Like :func:`load`, from source strings (``torch.utils.cpp_extension.load_inline``'s
    signature; see :func:`._api.load_inline`)."""
    args = locals()
    d = None
    if (settings is None and not (with_sycl or sycl_sources or extra_sycl_cflags or use_pch)
            and not _links_objects(extra_ldflags) and _arch_fixed(with_cuda, [bool(cuda_sources)])):
        d = _digest("torch.load_inline",
                    lambda: (*digest(LOAD_INLINE, args), recall.real_paths(_strs(extra_include_paths)), _env()))
        got = _recalled(name, d, verbose, build_directory) if d is not None else None
        if got is not None:
            return got
    from . import _api

    return _api.load_inline(**bind(LOAD_INLINE, args), settings=settings, _recall=d)


def _digest(what: str, call: Callable[[], tuple]) -> str | None:
    """The recall digest of one call's inputs; None when they are not plain data (the full
    path reports them)."""
    try:
        inputs = call()
    except TypeError:
        return None
    return recall.digest(what, inputs)


def _recalled(name: Any, d: str, verbose: bool, build_directory: Any) -> Any:
    """The recalled module (or path) under torch's in-process name for these inputs; None: the
    full path decides."""
    if not isinstance(name, str):
        return None
    picked: list[tuple[int, str]] = []

    def accept(built_as: str, note: Any) -> bool:
        if not isinstance(note, str):
            return False
        version, _new = _versions.version_for(name, note)
        picked.append((version, note))
        return _versions.module_name(name, version) == built_as

    got = recall.recall_entry(d, accept)
    if got is None:
        return None
    mod, so, eid, _note = got
    version, inputs = picked[-1]
    if not isinstance(mod, str) and not _versions.claim(mod, eid):
        return None  # the module object belongs to another entry: the full path picks a version
    _versions.loaded(name, inputs, version)
    if build_directory is not None:
        _torch_side.output_copy(so, build_directory, os.path.basename(so))
    if verbose:
        print(f"kernelcache: extension {name}: hit (recalled) {so}", flush=True)
    return mod


def _arch_fixed(with_cuda: Any, cuda_inputs: list[bool]) -> bool:
    """A CPU call, or a CUDA one whose archs are set (``TORCH_CUDA_ARCH_LIST``): without it, torch
    takes them from the visible GPUs, which no stat witnesses (never recalled)."""
    cuda = bool(with_cuda) if with_cuda is not None else any(cuda_inputs)
    return not cuda or bool(os.environ.get("TORCH_CUDA_ARCH_LIST"))


def _env() -> list:
    """What torch's flag writer reads from the environment (``recall.digest`` covers the rest)."""
    env = os.environ
    return [env.get(k) for k in _torch_side.TORCH_ENV]


_strs = _torch_side.strs


def _links_objects(*groups: Any) -> bool:
    """Object files and archives are linked in by their bytes, which the full path hashes on each
    call; such a call is never recalled."""
    return recall.links_objects(_strs_all(groups))


def _strs_all(groups: tuple) -> list[str]:
    out: list[str] = []
    for g in groups:
        try:
            out += _strs(g)
        except TypeError:
            return [".o"]  # an argument that is not plain data: the full path reports it
    return out
