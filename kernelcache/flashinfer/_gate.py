"""Which FlashInfer modules the route takes, and why it leaves one to FlashInfer.

The route mirrors what FlashInfer's ``generate_ninja_build_for_op`` does (flags, link line), so
it only runs on the FlashInfer versions it was checked against, on ``JitSpecNvcc`` records whose
fields it knows, and on modules without the build steps it does not mirror (nvcc device link,
embedded cubins, per-source flags, another nvcc or a compiler launcher). Anything else goes to
FlashInfer's own path, with one line saying why (once per module and reason).
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

from ._params import JIT_SPEC

TESTED_VERSIONS = ("0.7.4",)
KNOWN_FIELDS = frozenset(JIT_SPEC[1])  # the fields the parameter table declares
# Environment that changes FlashInfer's command lines in ways the route does not mirror.
_FOREIGN_TOOLS = ("FLASHINFER_NVCC", "FLASHINFER_CXX_LAUNCHER", "FLASHINFER_NVCC_LAUNCHER")
_said: set[tuple[str | None, str]] = set()


def flashinfer_version() -> str:
    """The installed FlashInfer's version (readable while ``flashinfer`` is still importing)."""
    import importlib

    try:
        return str(importlib.import_module("flashinfer.version").__version__)
    except (ImportError, AttributeError):
        return "unknown"


def class_refusal(cls: Any) -> str | None:
    """Why the route cannot take any module of this FlashInfer (None: it can)."""
    version = flashinfer_version()
    if version not in TESTED_VERSIONS:
        return f"FlashInfer {version} is not a version the route was tested with ({', '.join(TESTED_VERSIONS)})"
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    unknown = sorted(fields - KNOWN_FIELDS)
    if unknown or not fields:
        return f"JitSpecNvcc has field(s) the route does not know: {', '.join(unknown) or '(not a dataclass)'}"
    return None


def refusal(jit_spec: Any) -> str | None:
    """Why the route leaves this module to FlashInfer (None: the route takes it)."""
    why = class_refusal(type(jit_spec))
    if why:
        return why
    if jit_spec.needs_device_linking:
        return "it needs nvcc device linking"
    if jit_spec.embedded_cubin_factory is not None:
        return "it embeds cubins"
    if jit_spec.extra_cuda_cflags_by_source:
        return "it has per-source CUDA flags"
    for var in _FOREIGN_TOOLS:
        if os.environ.get(var):
            return f"{var} is set"
    if not jit_spec.sources:
        return "it has no sources"
    return None


def say(name: str | None, why: str) -> None:
    """One line on stderr, once per module and reason (``name`` None: the whole route is off)."""
    if (name, why) in _said:
        return
    _said.add((name, why))
    if name is None:
        print(f"kernelcache.flashinfer: the route is off, FlashInfer's own JIT builds every module ({why})",
              file=sys.stderr)
        return
    print(f"kernelcache.flashinfer: {name}: FlashInfer's own JIT builds it ({why})", file=sys.stderr)


def _reset() -> None:
    _said.clear()


from ..base import process_state  # noqa: E402 - registered once the reset exists

process_state.register("flashinfer.said", _reset)
