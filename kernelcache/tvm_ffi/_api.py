"""``load_inline`` / ``load`` / ``build_inline`` / ``build`` with tvm_ffi.cpp's signatures, built
and cached by kernelcache (public loader API only: ``KernelSpec``, ``load_with_result``).

Where the two designs disagree, this module chooses the cache's guarantees and keeps the
caller's contract (see docs/tvm_ffi_dropin.md):

* ``build_directory`` is not where kernelcache builds (builds are private, entries immutable).
  ``build``/``build_inline`` put a copy of the validated ``.so`` there (atomic rename) and
  return that path; ``load``/``load_inline`` load the validated cache entry and ignore it.
* ``output`` names that copy. An object-file ``output`` (``.o``/``.obj``) cannot be validated
  or cached by kernelcache: tvm-ffi's own builder compiles it fresh on every call (_objects).
* Inputs are read at call time, as tvm-ffi reads them (_env): ``TVM_FFI_CUDA_ARCH_LIST``,
  ``CXX``, ``CUDA_HOME`` set around one call apply to that call, in every mode.
* HIP (and Windows) builds are handed to the original tvm-ffi functions unchanged.
"""
from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import _env

# The argument, source and object helpers and the spec (and the loader behind them) are imported
# inside the functions: a process that routes tvm-ffi through the drop-in pays for them at its
# first call, not at import (benchmarks/bench_dropin_import.py).
if TYPE_CHECKING:  # pragma: no cover
    from tvm_ffi import Module

    from ..base.settings import Settings
    from ..base.spec import KernelSpec

_ORIGINALS: dict[str, Callable[..., Any]] = {}  # filled by _patch.install before patching
_settings = _env.resolve  # the settings of one call: explicit, else installed/env + call-time env


# -- the core, through its public API -----------------------------------------------------------
def _core(spec: KernelSpec, settings: "Settings", generated: Path | None,
          recall: str | None = None) -> tuple[Any, Any]:
    """Load through the cache; a failed or refused (no-build) call removes the sources it wrote.
    ``recall``: the call's digest (``_front``), under which the loader records its answer."""
    import kernelcache

    from ..dropin import generated as inline_sources

    try:
        return kernelcache.load_with_result(spec, settings=settings, recall=recall)
    except BaseException:
        if generated is not None:
            inline_sources.discard(generated)
        raise


def _core_load(spec: KernelSpec, settings: "Settings", generated: Path | None = None,
               recall: str | None = None) -> "Module":
    return _core(spec, settings, generated, recall)[0]


def _core_build(spec: KernelSpec, settings: "Settings", generated: Path | None = None) -> Path:
    """Build (or find), validate and load; the cached ``.so`` (errors raised as they are)."""
    res = _core(spec, settings, generated)[1]
    return Path(res.so_path) if res.so_path else Path(res.entry_path) / f"{spec.name}.so"


def save_originals(originals: dict[str, Callable[..., Any]]) -> None:
    """Remember tvm-ffi's own functions (fallbacks reach them while the patch is installed)."""
    _ORIGINALS.update(originals)


def _original(name: str) -> Callable[..., Any]:
    """tvm-ffi's own function (the saved one while patched: never our replacement)."""
    if name in _ORIGINALS:
        return _ORIGINALS[name]
    import importlib

    # By module name, not `import tvm_ffi.cpp.extension as ext` (an attribute lookup on
    # tvm_ffi.cpp): under an import swap, "tvm_ffi.cpp" may be this drop-in itself.
    return getattr(importlib.import_module("tvm_ffi.cpp.extension"), name)


def _needs_original(has_cuda: bool, backend: str | None) -> bool:
    """HIP and Windows builds are outside kernelcache's toolchain: tvm-ffi builds them."""
    from . import _args

    if sys.platform == "win32":
        return True
    return has_cuda and _args.gpu_backend(backend, os.environ) == "hip"


def _load_module(path: str, keep_module_alive: bool) -> "Module":
    import tvm_ffi

    return tvm_ffi.load_module(path, keep_module_alive=keep_module_alive)


# -- specs ----------------------------------------------------------------------------------------
def _flags(extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths) -> dict[str, Any]:
    from . import _args

    return dict(
        cflags=_args.flag_list(extra_cflags),
        cuda_cflags=_args.flag_list(extra_cuda_cflags),
        ldflags=_args.flag_list(extra_ldflags),
        include_dirs=[str(p) for p in _args.resolve_paths(extra_include_paths)],
    )


def _inline(name: str, *, cpp_sources=None, cuda_sources=None, functions=None, extra_cflags=None,
            extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None, embed_cubin=None,
            settings: "Settings | None" = None) -> tuple[KernelSpec, Path | None]:
    """The spec ``load_inline`` builds, and its generated source dir when this call wrote it."""
    from ..base.spec import KernelSpec
    from ..dropin import generated as inline_sources
    from . import _args, _sources

    cpp = _args.as_list(cpp_sources)
    cuda = _args.as_list(cuda_sources)
    exports = _args.function_map(functions)
    if not cpp and not cuda:
        raise AssertionError("sources must be provided.")  # what tvm_ffi.cpp raises here
    kname = _args.spec_name(name)
    flags = _flags(extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths)
    learned: dict[str, str | None] = {fn: None for fn in exports}  # recorded by the first good build
    if exports and _args.metadata_disabled([*flags["cflags"], *flags["cuda_cflags"]]):
        warnings.warn(f"kernelcache.tvm_ffi: {name!r} is built without {_args.METADATA_MACRO}: its "
                      "exported schemas are not recorded or checked (binary checks still apply)",
                      RuntimeWarning, stacklevel=3)
        learned = {}
    files: dict[str, bytes] = {}
    # The functions are exported from the C++ file when there is one, else from the CUDA file.
    if cpp:
        files[_sources.CPP_FILE] = _sources.wrapped_source("\n".join(cpp), exports).encode()
    if cuda:
        files[_sources.CUDA_FILE] = _sources.wrapped_source("\n".join(cuda), {} if cpp else exports).encode()
    for cname, image in _args.check_cubin_names(embed_cubin, name).items():
        files[_sources.cubin_file_name(cname)] = _sources.cubin_source(cname, image).encode()
    root, created = inline_sources.materialize(_settings(settings).cache_dir, kname, files)
    spec = KernelSpec(name=kname, sources=sorted(files), root=root, functions=learned,
                      backend="cuda" if cuda else "cpu", **flags)
    return spec, (root if created else None)


def inline_spec(name: str, **kwargs: Any) -> KernelSpec:
    """The KernelSpec ``load_inline`` builds: generated files under the cache, learned schemas."""
    return _inline(name, **kwargs)[0]


def _files(name: str, *, sources=None, cpp_files=None, cuda_files=None, extra_cflags=None,
           extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None,
           settings: "Settings | None" = None) -> tuple[KernelSpec, Path | None]:
    """The spec ``load``/``build`` build (files where they are), and a generated dir it wrote."""
    from ..base.spec import KernelSpec
    from . import _args, _objects

    paths = _args.resolve_paths(_args.as_list(sources) + _args.as_list(cpp_files) + _args.as_list(cuda_files))
    if not paths:
        raise AssertionError("sources must be provided.")  # what tvm_ffi.cpp raises here
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise _args.InputError(name, "source file(s) not found: " + ", ".join(missing))
    linked = [p for p in paths if p.suffix.lower() in _args.LINK_SUFFIXES]
    compiled = [p for p in paths if p not in linked]
    odd = [str(p) for p in compiled if not p.name.endswith(_args.COMPILED_SUFFIXES)]
    if odd:
        raise _args.InputError(name, "unsupported source type(s): " + ", ".join(odd) + " (kernelcache compiles "
                               ".cc/.cpp/.cxx/.c/.cu and links .o/.obj/.a)")
    s = _settings(settings)
    flags = _flags(extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths)
    if linked:
        flags["ldflags"] = [*flags["ldflags"], *_objects.link_inputs(linked, s)]
    generated = None
    if compiled:
        root = Path(os.path.commonpath([str(p.parent) for p in compiled]))
        rel = [str(p.relative_to(root)) for p in compiled]
    else:  # link-only: objects made by build(..., output="x.o") or by the caller's own toolchain
        root, created = _objects.link_only_root(s, _args.spec_name(name))
        rel, generated = [_objects.LINK_ONLY_FILE], (root if created else None)
    spec = KernelSpec(name=_args.spec_name(name), sources=rel, root=root, functions={},
                      backend="cuda" if any(p.suffix.lower() == ".cu" for p in compiled) else "cpu", **flags)
    return spec, generated


def file_spec(name: str, **kwargs: Any) -> KernelSpec:
    """The KernelSpec ``load``/``build`` build: the files where they are, rooted at their common dir."""
    return _files(name, **kwargs)[0]


# -- outputs --------------------------------------------------------------------------------------
def _deliver(so: Path, spec_module: str, build_directory: str | None, output: str | None,
             settings: "Settings") -> str:
    from . import _objects

    if build_directory is None and output is None:
        return str(so)  # the immutable cache entry's .so: a changed kernel gets a new path
    filename = Path(output).name if output else f"{spec_module}.so"
    dest_dir = Path(build_directory).expanduser().resolve() if build_directory is not None else (
        settings.layout.dropin / so.parent.name)
    dest = dest_dir / filename
    if not _same_bytes(so, dest):
        _objects.atomic_copy(so, dest)
    return str(dest.resolve())


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()
    except OSError:
        return False


# -- the four functions ---------------------------------------------------------------------------
def build_inline(
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
    backend: str | None = None,
    output: str | None = None,
    settings: "Settings | None" = None,
) -> str:
    """Build a module from inline C++/CUDA code and return the path of its shared library.

    Same arguments and result as ``tvm_ffi.cpp.build_inline``. The library is built, validated
    and cached by kernelcache; without ``build_directory``/``output`` the returned path is the
    immutable cache entry's ``.so``, otherwise a copy placed there (docs/tvm_ffi_dropin.md).
    """
    from . import _args, _objects

    s = _settings(settings)
    common = dict(cpp_sources=cpp_sources, cuda_sources=cuda_sources, functions=functions,
                  extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                  extra_include_paths=extra_include_paths, embed_cubin=embed_cubin)
    if _needs_original(bool(_args.as_list(cuda_sources)), backend):
        return _original("build_inline")(name, build_directory=build_directory, backend=backend, output=output,
                                         **common)
    if _args.is_object_output(output):
        return _objects.build_object(_original("build_inline"), name, build_directory, output, s,
                                     backend=backend, **common)
    spec, generated = _inline(name, settings=s, **common)
    return _deliver(_core_build(spec, s, generated), name, build_directory, output, s)


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
    _recall: str | None = None,
) -> "Module":
    """Build (or find in the cache), validate and load a module from inline C++/CUDA code.

    Same arguments and result as ``tvm_ffi.cpp.load_inline``: ``functions`` (a mapping of
    name -> docstring, a sequence of names or one name) are exported by generated wrapper code,
    from the C++ sources when there are any, else from the CUDA sources. Headers are tracked by
    content; the exported schemas of the first good build are recorded and enforced on every
    later load. ``build_directory`` is accepted and not used (the module is the cache entry);
    modules stay alive for the process whatever ``keep_module_alive`` says (kernelcache hands
    out one module object per entry).
    """
    from . import _args

    s = _settings(settings)
    common = dict(cpp_sources=cpp_sources, cuda_sources=cuda_sources, functions=functions,
                  extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                  extra_include_paths=extra_include_paths, embed_cubin=embed_cubin)
    if _needs_original(bool(_args.as_list(cuda_sources)), backend):
        path = _original("build_inline")(name, build_directory=build_directory, backend=backend, **common)
        return _load_module(path, keep_module_alive)
    spec, generated = _inline(name, settings=s, **common)
    return _core_load(spec, s, generated, _recall)


def build(
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
    backend: str | None = None,
    output: str | None = None,
    settings: "Settings | None" = None,
) -> str:
    """Build a module from source files and return the path of its shared library.

    Same arguments and result as ``tvm_ffi.cpp.build``; the sources export their functions
    themselves (``TVM_FFI_DLL_EXPORT_TYPED_FUNC``). ``.o``/``.obj`` inputs are linked in and
    keyed by their bytes. ``build_directory``/``output`` as in :func:`build_inline`.
    """
    from . import _args, _objects

    s = _settings(settings)
    common = dict(sources=sources, cpp_files=cpp_files, cuda_files=cuda_files, extra_cflags=extra_cflags,
                  extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                  extra_include_paths=extra_include_paths)
    merged = _args.as_list(sources) + _args.as_list(cpp_files) + _args.as_list(cuda_files)
    if _needs_original(any(p.lower().endswith(".cu") for p in merged), backend):
        return _original("build")(name, build_directory=build_directory, backend=backend, output=output, **common)
    if _args.is_object_output(output):
        return _objects.build_object(_original("build"), name, build_directory, output, s,
                                     backend=backend, **common)
    spec, generated = _files(name, settings=s, **common)
    return _deliver(_core_build(spec, s, generated), name, build_directory, output, s)


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
    _recall: str | None = None,
) -> "Module":
    """Build (or find in the cache), validate and load a module from source files.

    Same arguments and result as ``tvm_ffi.cpp.load``; ``build_directory`` and
    ``keep_module_alive`` as in :func:`load_inline`.
    """
    from . import _args

    s = _settings(settings)
    common = dict(sources=sources, cpp_files=cpp_files, cuda_files=cuda_files, extra_cflags=extra_cflags,
                  extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                  extra_include_paths=extra_include_paths)
    merged = _args.as_list(sources) + _args.as_list(cpp_files) + _args.as_list(cuda_files)
    if _needs_original(any(p.lower().endswith(".cu") for p in merged), backend):
        path = _original("build")(name, build_directory=build_directory, backend=backend, **common)
        return _load_module(path, keep_module_alive)
    spec, generated = _files(name, settings=s, **common)
    return _core_load(spec, s, generated, _recall)
