"""The default kind: a tvm-ffi module (``tvm_ffi.load_module``), its functions typed by schemas."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..base.errors import BuildError
from ..base.events import RejectCode
from ..base.settings import Settings
from ..base.spec import KernelSpec
from ..entry import validate
from ..entry.manifest import Manifest
from ..key import plan as plan_mod
from .base import Kind


def bind_now(path: Path) -> None:
    """dlopen with every symbol resolved now (OSError if one is missing).

    A module with an unresolved symbol loads fine lazily and kills the process with "symbol
    lookup error" at its first call; resolving everything up front turns that into a rejection.
    The handle is the one tvm-ffi's dlopen of the same path gets.
    """
    import ctypes

    ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)


class TvmFfi(Kind):
    name = "tvm_ffi"
    label = "tvm-ffi module"
    verbatim_flags = False  # tvm-ffi's base flags, include dir and library are added
    stamp_binary = False  # small binaries: re-hashed once per process
    recall_load = "bind_now"  # as admit() below loads it

    def key_inputs(self) -> dict[str, str]:
        return {}

    def plan(self, spec: KernelSpec, settings: Settings) -> plan_mod.BuildPlan:
        """tvm-ffi's base flags, include dir and library added to the spec's."""
        return plan_mod.tvm_ffi_plan(spec, settings, so_name=self.so_name(spec.name), shared=self.shared,
                                     kind_inputs=self.key_inputs())

    def record(self, spec: KernelSpec, so_path: Path) -> tuple[dict, dict | None]:
        """The exported schemas (every symbol must resolve, or the build failed)."""
        import tvm_ffi

        try:
            bind_now(so_path)  # first dlopen of this file: every symbol resolved, or a clear error
        except OSError as e:
            raise BuildError(spec.name, "<load check>", f"the linked module does not load: {e}") from None
        return validate.exported_schemas(tvm_ffi.load_module(str(so_path)), list(spec.functions)), None

    def admit(self, spec: KernelSpec, m: Manifest, path: Path) -> tuple[Any, validate.Rejection | None]:
        import tvm_ffi

        try:
            bind_now(path)
            mod = tvm_ffi.load_module(str(path))
        except Exception as e:  # noqa: BLE001 - any load failure is a rejection
            return None, validate.Rejection(RejectCode.DLOPEN, f"dlopen failed: {type(e).__name__}: {e}")
        rej, _ = validate.after_dlopen(spec, m, mod, path, m.identity)
        return (None, rej) if rej else (mod, None)


class ForeignJitModule(TvmFfi):
    """A tvm-ffi module built from another JIT's complete command lines (FlashInfer's, SGLang's):
    flags used verbatim, loaded as that JIT loads it (``tvm_ffi.load_module``, symbols resolved
    lazily), an exported entry checked against the installed JIT first (``version_refusal``).
    One class, so the two routes' kinds differ only in what is theirs."""

    verbatim_flags = True
    recall_load = "lazy"  # as admit() below loads it

    def __init__(self, name: str, label: str, refusal: Callable[[Manifest], validate.Rejection | None]) -> None:
        """``name`` (its key input and report label), ``label`` (what its errors call it),
        ``refusal``: why an exported entry may not be used with the installed JIT."""
        self.name, self.label, self.report_label = name, label, name
        self._refusal = refusal

    def key_inputs(self) -> dict[str, str]:
        return {"kind": self.name}

    def plan(self, spec: KernelSpec, settings: Settings) -> plan_mod.BuildPlan:
        """The foreign JIT's complete lines, used as given (``Kind.plan``)."""
        return plan_mod.verbatim_plan(spec, settings, so_name=self.so_name(spec.name), shared=self.shared,
                                      kind_inputs=self.key_inputs())

    def version_refusal(self, m: Manifest) -> validate.Rejection | None:
        """Why an exported entry may not be used with the installed JIT (None: it may)."""
        return self._refusal(m)

    def record(self, spec: KernelSpec, so_path: Path) -> tuple[dict, dict | None]:
        """The exported schemas of the freshly linked module, loaded as the foreign JIT loads it."""
        import tvm_ffi

        try:
            mod = tvm_ffi.load_module(str(so_path))
        except Exception as e:  # noqa: BLE001 - any load failure fails the build
            raise BuildError(spec.name, "<load check>", f"the linked module does not load: {e}") from None
        return validate.exported_schemas(mod, list(spec.functions)), None

    def admit(self, spec: KernelSpec, m: Manifest, path: Path) -> tuple[Any, validate.Rejection | None]:
        import tvm_ffi

        rej = self.version_refusal(m)
        if rej is not None:
            return None, rej
        try:
            mod = tvm_ffi.load_module(str(path))
        except Exception as e:  # noqa: BLE001 - any load failure is a rejection
            return None, validate.Rejection(RejectCode.DLOPEN, f"dlopen failed: {type(e).__name__}: {e}")
        rej, _ = validate.after_dlopen(spec, m, mod, path, m.identity)
        return (None, rej) if rej else (mod, None)


KIND = TvmFfi()
