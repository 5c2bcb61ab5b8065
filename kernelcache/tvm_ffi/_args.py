"""Argument handling of the drop-in: the normalisation ``tvm_ffi.cpp`` applies, written once.

Everything here is pure (no filesystem writes, no tvm_ffi import) so that it can be tested and
reused by the four public functions alike.
"""
from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeGuard

from ..base.errors import BuildError

_SPEC_NAME_RE = re.compile(r"[^A-Za-z0-9_]")
_C_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
COMPILED_SUFFIXES = (".cc", ".cpp", ".cxx", ".c", ".cu")
OBJECT_SUFFIXES = (".o", ".obj")
ARCHIVE_SUFFIXES = (".a",)
LINK_SUFFIXES = OBJECT_SUFFIXES + ARCHIVE_SUFFIXES  # linker inputs of load/build, keyed by bytes
METADATA_MACRO = "TVM_FFI_DLL_EXPORT_INCLUDE_METADATA"


class InputError(BuildError):
    """The call's inputs cannot be built (missing file, unsupported input, bad CUBIN name).

    A ``BuildError`` (hence a ``RuntimeError``, as tvm-ffi raises when its build fails on such
    inputs) whose message is the reason itself: no compiler ran, so there is no command or exit.
    """

    def __init__(self, module: str, reason: str):
        self.spec_name = module
        self.command = ""
        self.output = reason
        self.returncode = None
        RuntimeError.__init__(self, f"kernelcache.tvm_ffi: cannot build {module!r}: {reason}")


def as_list(value: Sequence[str] | str | None) -> list[str]:
    """None -> [], one string -> [it], any other sequence -> its items (tvm-ffi's rule)."""
    if value is None:
        return []
    if isinstance(value, (str, Path)):
        return [str(value)]
    return [str(v) for v in value]


def flag_list(value: Sequence[str] | str | None) -> list[str]:
    """Extra flags, each stripped of surrounding whitespace as tvm-ffi does."""
    return [f.strip() for f in as_list(value)]


def function_map(functions: Mapping[str, str] | Sequence[str] | str | None) -> dict[str, str]:
    """``functions`` as {export name: docstring}: mapping as given, names -> empty docs.

    A non-iterable value raises ``TypeError``, the exception tvm-ffi raises for it.
    """
    if functions is None:
        return {}
    if isinstance(functions, str):
        return {functions: ""}
    if isinstance(functions, Mapping):
        return {str(k): ("" if v is None else str(v)) for k, v in functions.items()}
    return {str(fn): "" for fn in functions}


def spec_name(name: str) -> str:
    """A KernelSpec name for a tvm-ffi module name.

    tvm-ffi accepts any file-name-safe string; kernel specs allow ``[A-Za-z0-9_]+``. Other
    characters become ``_`` and a short hash of the original keeps two names that map to the
    same spelling apart.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    clean = _SPEC_NAME_RE.sub("_", name)
    if clean == name and name:
        return name
    return f"{clean or 'module'}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def resolve_paths(paths: Sequence[str] | str | None) -> list[Path]:
    """Paths relative to the current directory made absolute, as tvm-ffi resolves them."""
    return [Path(p).expanduser().resolve() for p in as_list(paths)]


def check_cubin_names(embed_cubin: Mapping[str, bytes] | None, module: str) -> dict[str, bytes]:
    """``embed_cubin`` validated: C identifiers (the macro pastes them into symbols) -> bytes."""
    out: dict[str, bytes] = {}
    for k, v in (embed_cubin or {}).items():
        if not isinstance(k, str) or not _C_IDENT_RE.match(k):
            raise InputError(module, f"CUBIN name {k!r} is not a C identifier "
                             "(it must match the name given to TVM_FFI_EMBED_CUBIN)")
        if not isinstance(v, (bytes, bytearray, memoryview)):
            raise TypeError(f"embed_cubin[{k!r}] must be bytes, got {type(v).__name__}")
        out[k] = bytes(v)
    return out


def gpu_backend(backend: str | None, environ: Mapping[str, str]) -> str:
    """The GPU backend for CUDA sources: "cuda" or "hip" (tvm-ffi's resolution, minus probing).

    An explicit value must be one of the two (``ValueError`` otherwise, as in tvm-ffi). Without
    one, ``TVM_FFI_GPU_BACKEND`` decides, then an already imported ROCm build of torch; else CUDA.
    """
    if backend is not None:
        if backend in ("cuda", "hip"):
            return backend
        raise ValueError(f"Invalid backend: {backend}. Supported backends are 'cuda' and 'hip'.")
    chosen = environ.get("TVM_FFI_GPU_BACKEND", "").lower()
    if chosen in ("cuda", "hip"):
        return chosen
    torch = sys.modules.get("torch")
    if getattr(getattr(torch, "version", None), "hip", None):
        return "hip"
    return "cuda"


def metadata_disabled(cflags: Sequence[str]) -> bool:
    """Do the caller's flags undefine (or zero) the metadata define kernelcache builds with?"""
    state = True
    for f in cflags:
        if f in (f"-U{METADATA_MACRO}", f"-D{METADATA_MACRO}=0"):
            state = False
        elif f in (f"-D{METADATA_MACRO}", f"-D{METADATA_MACRO}=1"):
            state = True
    return not state


def is_object_output(output: str | None) -> TypeGuard[str]:
    return output is not None and Path(output).suffix.lower() in OBJECT_SUFFIXES
