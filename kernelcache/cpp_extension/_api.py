"""``load`` / ``load_inline`` with ``torch.utils.cpp_extension``'s signatures, built and cached by
kernelcache's loader (public API: ``KernelSpec`` + ``load_with_result``).

The translator turns torch's arguments into a ``KernelSpec`` whose flags are the ones torch
would use (``_flags``), of kind ``torch_python`` (pybind11 module), ``torch_library``
(``is_python_module=False``: loaded into the process, its ``TORCH_LIBRARY`` ops appear in
``torch.ops``, the path is returned) or ``executable`` (``is_standalone=True``: the path is
returned). The loader does the rest: content keys over every header the compiler read, one
flock per key (a killed builder leaves nothing to wait on), immutable entries, checks before
import. Where torch's semantics and the cache differ, see docs/torch_cpp_extension_dropin.md.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..base.errors import BuildError, SpecError
from ..base.events import Status
from ..base.spec import KernelSpec
from . import _flags, _torch_side, _versions

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings

CPP_FILE = "main.cpp"
CUDA_FILE = "cuda.cu"


class ExtensionBuildError(BuildError):
    """A failed build, worded like torch's (``Error building extension 'name': ...``).

    A ``RuntimeError`` (what torch raises) and a ``kernelcache.BuildError`` (command, compiler
    output, exit status). Nothing is cached for a failed build: fix the cause and call again.
    """

    def __init__(self, name: str, err: BuildError, kept: str = ""):
        self.spec_name, self.command, self.output, self.returncode = name, err.command, err.output, err.returncode
        status = f" (exit {err.returncode})" if err.returncode is not None else ""
        where = f"\nthe generated sources are kept in {kept}" if kept else ""
        RuntimeError.__init__(self, f"Error building extension '{name}'{status}: {err.output.rstrip()}\n"
                                    f"command: {err.command}{where}")


_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_name(name: Any) -> str:
    """The extension name, or torch's kind of error: it becomes the module's ``PyInit_`` symbol,
    the ``TORCH_EXTENSION_NAME`` define and a directory name, so it must be an identifier."""
    if not isinstance(name, str):
        raise TypeError(f"extension name must be a str, got {type(name).__name__}")
    if not _NAME_RE.match(name):
        raise ValueError(f"Invalid extension name {name!r}: it must be a valid Python identifier "
                         "(letters, digits and underscores, not starting with a digit), because it "
                         "names the built module (PyInit_<name>) and TORCH_EXTENSION_NAME")
    return name


def _settings(settings: "Settings | None") -> "Settings":
    if settings is not None:
        return settings
    from ..base.settings import Settings

    return Settings.from_env()


_list = _torch_side.strs  # one reading of torch's str / path / sequence arguments (the front's too)


def _strip(value: Any) -> list[str]:
    return [f.strip() for f in _list(value)]


def _kind(is_python_module: bool, is_standalone: bool) -> str:
    if is_python_module and is_standalone:
        raise ValueError("`is_python_module` and `is_standalone` are mutually exclusive.")
    return "executable" if is_standalone else ("torch_python" if is_python_module else "torch_library")


def make_spec(name: str, sources: list[str], *, extra_cflags=None, extra_cuda_cflags=None, extra_ldflags=None,
              extra_include_paths=None, with_cuda: bool | None = None, is_python_module: bool = True,
              is_standalone: bool = False, settings: "Settings | None" = None) -> KernelSpec:
    """The KernelSpec for a ``load`` call (sources rooted at their common directory)."""
    check_name(name)
    kind = _kind(is_python_module, is_standalone)
    paths = [Path(p).expanduser().resolve() for p in sources]
    if not paths:
        raise ValueError(f"extension {name!r}: no sources given")
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ExtensionBuildError(name, BuildError(name, "<sources>", "source file(s) not found: "
                                                   + ", ".join(missing), None))
    if with_cuda is None:
        with_cuda = any(_flags.is_cuda_file(str(p)) for p in paths)
    s = _settings(settings)
    lines = _flags.lines(s.memo_dir, name, [str(p) for p in paths], _strip(extra_cflags),
                         _strip(extra_cuda_cflags), _strip(extra_ldflags), _strip(extra_include_paths),
                         bool(with_cuda), is_standalone)
    root = Path(os.path.commonpath([str(p.parent) for p in paths]))
    try:
        return KernelSpec(
            name=name, sources=[str(p.relative_to(root)) for p in paths], root=root,
            include_dirs=_flags.search_dirs(lines.cflags, "-I") or lines.user_includes,
            system_include_dirs=_flags.search_dirs(lines.cflags, "-isystem") or lines.system_includes,
            cflags=lines.cflags, cuda_cflags=lines.cuda_cflags, ldflags=lines.ldflags,
            backend="cuda" if any(p.suffix == ".cu" for p in paths) else "cpu",
            kind=kind, abi=_flags.abi(kind),
        )
    except SpecError as e:  # e.g. a source type torch's JIT does not compile either
        raise ValueError(f"extension {name!r}: {str(e).replace(f'KernelSpec {name!r}: ', '')}") from None


def renamed(spec: KernelSpec, module_name: str) -> KernelSpec:
    """``spec`` built as ``module_name`` (torch's ``name_v<N>``): entry name and the name define."""
    if module_name == spec.name:
        return spec
    define = _versions.NAME_DEFINE

    def swap(flags):
        return [define + module_name if f == define + spec.name else f for f in flags]

    return dataclasses.replace(spec, name=module_name, cflags=swap(spec.cflags), cuda_cflags=swap(spec.cuda_cflags))


def inline_files(cpp_sources, cuda_sources, functions, with_pytorch_error_handling: bool,
                 no_implicit_headers: bool) -> dict[str, bytes]:
    """``main.cpp`` (and ``cuda.cu``) with exactly the text torch's ``load_inline`` writes."""
    cpp = _list(cpp_sources)
    cuda = _list(cuda_sources)
    if not no_implicit_headers:
        cpp.insert(0, "#include <torch/extension.h>")
    if functions is not None:
        if isinstance(functions, str):
            functions = [functions]
        if isinstance(functions, list):
            functions = {f: f for f in functions}
        elif not isinstance(functions, dict):
            raise ValueError(f"Expected 'functions' to be a list or dict, but was {type(functions)}")
        cpp.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
        for fn, doc in functions.items():
            target = f"torch::wrap_pybind_function({fn})" if with_pytorch_error_handling else fn
            cpp.append(f'm.def("{fn}", {target}, "{doc}");')
        cpp.append("}")
    files = {CPP_FILE: "\n".join(cpp).encode()}
    if cuda:
        if not no_implicit_headers:
            cuda[:0] = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
        files[CUDA_FILE] = "\n".join(cuda).encode()
    return files


def _verbose(name: str, res: Any) -> None:
    print(f"kernelcache: extension {name}: {res.status} ({res.reason or 'cached'}) {res.so_path}", flush=True)


def _load_spec(spec: KernelSpec, settings: "Settings", verbose: bool, kept: str = "",
               recall: str | None = None, note: str | None = None) -> tuple[Any, Any]:
    import kernelcache

    try:
        mod, res = kernelcache.load_with_result(spec, settings, recall=recall, recall_note=note)
    except ExtensionBuildError:
        raise
    except BuildError as e:  # one error, worded like torch's: the compiler output appears once
        raise ExtensionBuildError(spec.name, e, kept) from None
    from ..base import events

    events.emit(events.Event.EXTENSION_LOADED, name=spec.name, kind=spec.kind, status=res.status)
    if verbose:
        _verbose(spec.name, res)
    return mod, res


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _input_digest(spec: KernelSpec) -> str:
    return _versions.digest([str(p) for p in spec.source_paths()],
                            [spec.cflags, spec.cuda_cflags, spec.ldflags, map(str, spec.include_dirs),
                             map(str, spec.system_include_dirs)],
                            [spec.kind, *(f"{k}={v}" for k, v in spec.abi.items())])


def load_versioned(spec: KernelSpec, settings: "Settings", verbose: bool, kept: str = "",
                   build_directory: Any = None, recall: str | None = None) -> Any:
    """Load ``spec`` under torch's in-process module name for its inputs, checked by identity.

    The first inputs of a name in this process load as ``name``; other inputs as ``name_v1``,
    ``name_v2`` ... (``_versions``). A Python module handed back must come from the entry the
    load resolved to; one that belongs to another entry moves these inputs to a fresh version.
    """
    d = _input_digest(spec)
    version, new = _versions.version_for(spec.name, d)
    for _attempt in range(3):
        target = _versions.module_name(spec.name, version)
        if verbose and new and version > 0:
            print(f"The input conditions for extension module {spec.name} have changed. "
                  f"Bumping to version {version} and re-building as {target}...", flush=True)
        mod, res = _load_spec(renamed(spec, target), settings, verbose, kept, recall, d)
        if any(f == "-Winvalid-pch" for f in spec.cflags) and res.status == Status.BUILT:
            from ._pch import warn_if_unused

            warn_if_unused(_read(Path(res.entry_path) / "build.log"), target)
        if not isinstance(mod, ModuleType) or _versions.claim(mod, res.entry_id):  # a library or executable: a path
            _versions.loaded(spec.name, d, version)
            if build_directory is not None:
                _torch_side.output_copy(res.so_path, build_directory, Path(res.so_path).name)
            return mod
        version, new = _versions.bump(spec.name, version), True
    raise RuntimeError(f"extension {spec.name!r}: the module imported as {target!r} belongs to another "
                       "build in this process; restart the process to load this one")


def load(name, sources, extra_cflags=None, extra_cuda_cflags=None, extra_sycl_cflags=None, extra_ldflags=None,
         extra_include_paths=None, build_directory=None, verbose=False, with_cuda: bool | None = None,
         with_sycl: bool | None = None, is_python_module=True, is_standalone=False, keep_intermediates=True,
         *, settings: "Settings | None" = None, _recall: str | None = None):
    """Build (or find in the cache), validate and load a torch C++/CUDA extension.

    Same arguments and results as ``torch.utils.cpp_extension.load``: a pybind11 module, the
    library path (``is_python_module=False``, loaded into the process) or the executable path
    (``is_standalone=True``). ``build_directory`` receives a copy of the output (torch's file
    name), but the build never happens there; ``keep_intermediates`` and
    ``TORCH_EXTENSIONS_DIR`` do not decide where the build happens (entries are immutable and
    content-addressed under the kernelcache dir); SYCL sources are handed to torch unchanged.
    """
    if with_sycl or _list(extra_sycl_cflags) or any(str(s).endswith(".sycl") for s in _list(sources)):
        return _original("load")(name, sources, extra_cflags, extra_cuda_cflags, extra_sycl_cflags, extra_ldflags,
                                 extra_include_paths, build_directory, verbose, with_cuda, with_sycl,
                                 is_python_module, is_standalone, keep_intermediates)
    s = _settings(settings)
    spec = make_spec(name, _list(sources), extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
                     extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths, with_cuda=with_cuda,
                     is_python_module=is_python_module, is_standalone=is_standalone, settings=s)
    return load_versioned(spec, s, verbose, build_directory=build_directory, recall=_recall)


def load_inline(name, cpp_sources, cuda_sources=None, sycl_sources=None, functions=None, extra_cflags=None,
                extra_cuda_cflags=None, extra_sycl_cflags=None, extra_ldflags=None, extra_include_paths=None,
                build_directory=None, verbose=False, with_cuda=None, with_sycl=None, is_python_module=True,
                with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False,
                no_implicit_headers=False, *, settings: "Settings | None" = None, _recall: str | None = None):
    """Like :func:`load`, from source strings (``torch.utils.cpp_extension.load_inline``'s signature).

    The generated ``main.cpp``/``cuda.cu`` (same text as torch's, ``functions=`` bindings included)
    are written content-addressed under the cache instead of ``build_directory``; ``use_pch=True``
    compiles against a precompiled ``torch/extension.h`` kept in the cache (``_pch``).
    """
    if with_sycl or _list(sycl_sources) or _list(extra_sycl_cflags):
        return _original("load_inline")(
            name, cpp_sources, cuda_sources, sycl_sources, functions, extra_cflags, extra_cuda_cflags,
            extra_sycl_cflags, extra_ldflags, extra_include_paths, build_directory, verbose, with_cuda, with_sycl,
            is_python_module, with_pytorch_error_handling, keep_intermediates, use_pch, no_implicit_headers)
    check_name(name)  # before anything is written: a bad name leaves nothing behind
    s = _settings(settings)
    files = inline_files(cpp_sources, cuda_sources, functions, with_pytorch_error_handling, no_implicit_headers)
    from ..dropin import generated

    root, created = generated.materialize(s.cache_dir, f"torch_{name}", files)
    try:
        spec = make_spec(name, [str(root / f) for f in files], extra_cflags=extra_cflags,
                         extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                         extra_include_paths=extra_include_paths, with_cuda=with_cuda,
                         is_python_module=is_python_module, is_standalone=False, settings=s)
        if use_pch:
            from . import _pch

            spec = _pch.apply(spec, s)
        mod = load_versioned(spec, s, verbose, kept=str(root), build_directory=build_directory,
                             recall=None if use_pch else _recall)
        if use_pch:
            _pch.publish_for_torch(spec, _list(extra_cflags), _list(extra_include_paths))
        return mod
    except ExtensionBuildError as e:
        if created and not e.output:  # nothing the compiler said points at these files
            generated.discard(root)
        raise  # the compiler's messages name the generated files: they stay (see the message)
    except BaseException:
        if created:  # any other failure leaves no generated sources behind
            generated.discard(root)
        raise


def _original(fn: str) -> Any:
    return _torch_side.original(fn)


def torch_loaded() -> bool:
    return "torch" in sys.modules
