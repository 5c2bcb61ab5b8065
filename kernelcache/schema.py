"""Expected vs exported schema, and the cheap binary checks done before any dlopen.

tvm-ffi exports ``__tvm_ffi__metadata_<fn>`` when built with
``TVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1``; its ``type_schema`` prints as e.g.
``Callable[[Tensor, int], None]``. A stale binary built from older sources exports a different
schema and is rejected before it can be called with the wrong arguments.
"""
from __future__ import annotations

import ctypes
import hashlib
from pathlib import Path
from typing import Any, Mapping

from .plan import IDENTITY_SYMBOL

ELF_MAGIC = b"\x7fELF"


def normalise(schema: str | None) -> str | None:
    return None if schema is None else "".join(schema.split())


def compare(expected: Mapping[str, str], found: Mapping[str, str | None]) -> dict[str, tuple[str, str | None]]:
    """Functions whose found schema differs from the expected one (missing -> None)."""
    out = {}
    for fn, exp in expected.items():
        got = found.get(fn)
        if normalise(got) != normalise(exp):
            out[fn] = (exp, got)
    return out


def exported_schemas(module: Any, names: list[str]) -> dict[str, str | None]:
    """Read each function's type schema from a loaded tvm-ffi module's metadata."""
    from tvm_ffi.core import TypeSchema

    found: dict[str, str | None] = {}
    for fn in names:
        try:
            meta = module.get_function_metadata(fn)
        except Exception:  # noqa: BLE001 - any failure means "no usable metadata"
            meta = None
        if not meta or "type_schema" not in meta:
            found[fn] = None
            continue
        try:
            found[fn] = repr(TypeSchema.from_json_str(meta["type_schema"]))
        except Exception:  # noqa: BLE001
            found[fn] = None
    return found


def binary_problem(so_path: Path, functions: list[str], expected_size: int | None = None,
                   expected_sha256: str | None = None) -> str | None:
    """Cheap pre-dlopen checks: size, ELF magic, expected symbol names, and (if given) sha256."""
    try:
        data = so_path.read_bytes()
    except OSError as e:
        return f"cannot read {so_path.name}: {e}"
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
        if expected_size is not None and len(data) != expected_size:
            return f"size {len(data)} != recorded {expected_size} (truncated or replaced)"
        return "sha256 of the .so differs from the manifest (corrupted or replaced)"
    if expected_size is not None and len(data) != expected_size:
        return f"size {len(data)} != recorded {expected_size} (truncated or replaced)"
    if not data.startswith(ELF_MAGIC):
        return "not an ELF file"
    for fn in functions:
        if f"__tvm_ffi_{fn}\0".encode() not in data:
            return f"symbol __tvm_ffi_{fn} not exported"
    if f"{IDENTITY_SYMBOL}\0".encode() not in data:
        return "identity symbol missing"
    return None


def read_identity(so_path: Path) -> str | None:
    """Call the identity function of an (already loaded) module; same handle as tvm-ffi's dlopen."""
    try:
        lib = ctypes.CDLL(str(so_path))
        fn = getattr(lib, IDENTITY_SYMBOL)
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    value = fn()
    return value.decode() if value else None
