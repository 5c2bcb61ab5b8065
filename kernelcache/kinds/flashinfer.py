"""A FlashInfer JIT module: a tvm-ffi module built from FlashInfer's own command lines.

Why a kind of its own: its flags are FlashInfer's complete lines (its ``-gencode`` set, includes,
``-ltvm_ffi``), so they are used verbatim like the torch kinds' (nothing of kernelcache's tvm-ffi
defaults added), while loading and admission are the tvm-ffi module's. The kind's name is in
both keys, so such an entry never answers for a plain tvm-ffi spec of the same sources.

Loaded lazily, as FlashInfer loads it (``tvm_ffi.load_module``), not with every symbol resolved
first: FlashInfer's modules reference template instantiations they deliberately leave out
(FlashInfer 0.7.4's batch prefill FA2 dispatches ``CTA_TILE_Q`` 32 but instantiates only the
tiles reachable for its head dim), so a bind-now check rejects modules FlashInfer runs fine.
A link cut short still cannot be loaded: entries appear only by an atomic publish.

An entry exported into an artifact root (``kernelcache build --flashinfer``) carries the version
of the FlashInfer it was built with (``VERSION_LABEL`` in its ``prebuilt`` record): a root keeps
the hashes of the module's own sources but not of FlashInfer's headers, so another installed
FlashInfer refuses the entry, with one line naming both versions.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import validate
from ..errors import BuildError
from ..manifest import Manifest
from ..spec import KernelSpec
from .tvm_ffi import TvmFfi


VERSION_LABEL = "flashinfer_version"


def installed_version() -> str:
    import importlib

    try:
        return str(importlib.import_module("flashinfer.version").__version__)
    except (ImportError, AttributeError):
        return "unknown"


def version_refusal(m: Manifest) -> validate.Rejection | None:
    """Why an exported entry may not be used with the installed FlashInfer (None: it may)."""
    label = (m.prebuilt or {}).get(VERSION_LABEL)
    if not label:
        return None
    here = installed_version()
    if label == here:
        return None
    return validate.Rejection("installation", f"built with FlashInfer {label}, installed FlashInfer is {here}")


class FlashInferModule(TvmFfi):
    name = "flashinfer"
    label = "FlashInfer JIT module"
    report_label = "flashinfer"
    verbatim_flags = True
    recall_load = "lazy"  # as admit() below loads it (a local entry carries no version label)

    def key_inputs(self) -> dict[str, str]:
        return {"kind": self.name}

    def record(self, spec: KernelSpec, so_path: Path) -> tuple[dict, dict | None]:
        """The exported schemas of the freshly linked module, loaded as FlashInfer loads it."""
        import tvm_ffi

        try:
            mod = tvm_ffi.load_module(str(so_path))
        except Exception as e:  # noqa: BLE001 - any load failure fails the build
            raise BuildError(spec.name, "<load check>", f"the linked module does not load: {e}") from None
        return validate.exported_schemas(mod, list(spec.functions)), None

    def admit(self, spec: KernelSpec, m: Manifest, path: Path) -> tuple[Any, validate.Rejection | None]:
        import tvm_ffi

        rej = version_refusal(m)
        if rej is not None:
            return None, rej
        try:
            mod = tvm_ffi.load_module(str(path))
        except Exception as e:  # noqa: BLE001 - any load failure is a rejection
            return None, validate.Rejection("dlopen", f"dlopen failed: {type(e).__name__}: {e}")
        rej, _ = validate.after_dlopen(spec, m, mod, path, m.identity)
        return (None, rej) if rej else (mod, None)


KIND = FlashInferModule()
