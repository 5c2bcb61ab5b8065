"""A resolved ``load_jit`` request as a kernelcache ``KernelSpec`` of kind ``sglang``.

The loader does the rest, as for every kind: ``-MD`` recorded dependencies (every header the
compiler read), the lock, the atomic publish, validation, the fleet and prebuilt roots.

* Sources: SGLang's generated wrapper units (``main.cpp`` / ``cuda.cu`` of a header-only module)
  are written to a content-addressed snapshot (:mod:`kernelcache.dropin.generated`), so their
  bytes, exports included, are the key's; on-disk sources (``header_only=False``) are compiled
  where they are, relative to SGLang's kernel tree when they lie in it. That tree is the spec's
  root, so its headers are the module's own: stat-checked on every warm load (an edit with its
  mtime restored still moves the ctime), never stood for by the installed ``RECORD``.
* Flags: SGLang's lines, verbatim (``_lines``); the CUDA lines only when a unit is CUDA (a
  CPU module never runs nvcc, so nvcc's flags are not what it is built with).
* Functions: none named. SGLang compiles without tvm-ffi's schema metadata
  (``TVM_FFI_DLL_EXPORT_INCLUDE_METADATA``), so its exports carry no schema to check, and adding
  the define would change what is compiled; the wrapper's exports are in the wrapper's bytes (the
  key), and every load checks the binary's identity and checksum.
* The target: a CUDA module is checked against SGLang's own ``-gencode`` target.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _lines

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings
    from ..base.spec import KernelSpec
    from ._request import Request

_NAME_OK = re.compile(r"^[A-Za-z0-9_]{1,120}$")


def spec_name(module_name: str) -> str:
    """A kernelcache name for an SGLang module name (its own when valid and short, else
    sanitised and cut, with a digest of the whole name)."""
    if _NAME_OK.match(module_name):
        return module_name
    clean = re.sub(r"[^A-Za-z0-9_]", "_", module_name)[:100]
    return f"{clean}_{hashlib.sha256(module_name.encode()).hexdigest()[:12]}"


def _include_dirs(flags: tuple[str, ...]) -> list[str]:
    dirs = [f[2:] for f in flags if f.startswith("-I") and len(f) > 2]
    return list(dict.fromkeys(dirs))


def _archs(cuda_flags: tuple[str, ...]) -> tuple[str, ...]:
    from ..host.gpu import parse_arch_list

    codes = [f.split("code=")[-1] for f in cuda_flags if f.startswith("-gencode") and "code=sm_" in f]
    return parse_arch_list(" ".join(codes)) if codes else ()


def kernel_spec(request: "Request", lines: "_lines.CommandLines", kernel_path: Path,
                settings: "Settings") -> tuple["KernelSpec", "Settings", Path | None]:
    """The KernelSpec of ``request``, the settings to load it with, and the snapshot dir this
    call created (None when none was created: to discard on a failed load)."""
    from ..base.spec import KernelSpec
    from ..dropin import generated

    bspec = request.spec
    name = spec_name(request.module_name)
    units = list(bspec.translation_units())
    cuda = any(u.is_cuda for u in units)
    created = None
    if all(u.source is not None for u in units):
        root, made = generated.materialize(settings.cache_dir, f"sgl_{name}",
                                           {u.filename: u.source.encode() for u in units})
        created = root if made else None
        rel = [u.filename for u in units]
    else:
        paths = [os.path.realpath(u.filename) for u in units]
        tree = os.path.realpath(kernel_path)
        inside = all(p.startswith(tree + os.sep) for p in paths)
        root = Path(tree if inside else os.path.commonpath([os.path.dirname(p) for p in paths]))
        rel = [os.path.relpath(p, root) for p in paths]
    spec = KernelSpec(
        name=name, sources=rel, root=root,
        include_dirs=_include_dirs(lines.cudaflags if cuda else lines.cxxflags),
        cflags=list(lines.cxxflags), cuda_cflags=list(lines.cudaflags) if cuda else [],
        ldflags=list(lines.ldflags), functions={}, backend="cuda" if cuda else "cpu", kind="sglang",
    )
    archs = _archs(lines.cudaflags) if cuda else ()
    if archs:
        settings = settings.replace(cuda_arch=",".join(archs))
    return spec, settings, created


def describe(spec: Any) -> str:
    """One line naming an SGLang module for messages (its module args)."""
    return "_".join(spec.module_args) or spec.module_name
