"""An SGLang JIT module: a tvm-ffi module built from the command lines SGLang's ``build.ninja`` runs.

Why a kind of its own: its flags are SGLang's complete lines (``-std=c++20 -O3``, its include
dirs, ``-ltvm_ffi``, its ``-gencode`` target), used verbatim as the FlashInfer kind's are, while
loading and admission are the tvm-ffi module's. The kind's name is in both keys, so such an entry
never answers for a plain tvm-ffi spec of the same sources.

Loaded as SGLang loads it (``tvm_ffi.load_module``, symbols resolved lazily): SGLang's modules are
handed to its code exactly as its own loader would hand them. A link cut short still cannot be
loaded: entries appear only by an atomic publish, and a fresh build is loaded before it is.

An entry exported into an artifact root (``kernelcache build --sglang``) carries the version of
the SGLang it was built with (``VERSION_LABEL`` in its ``prebuilt`` record); a serving host with
another SGLang refuses it with one line naming both versions (another version may generate other
wrappers or flags for the same module name).
"""
from __future__ import annotations

from ..base.events import RejectCode
from ..entry import validate
from ..entry.manifest import Manifest
from .tvm_ffi import ForeignJitModule

VERSION_LABEL = "sglang_version"


def installed_version() -> str:
    """The installed SGLang's version, from its distribution metadata (no import of sglang)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except (PackageNotFoundError, ValueError):
        return "unknown"


def version_refusal(m: Manifest) -> validate.Rejection | None:
    """Why an exported entry may not be used with the installed SGLang (None: it may)."""
    label = (m.prebuilt or {}).get(VERSION_LABEL)
    if not label:
        return None
    here = installed_version()
    if label == here:
        return None
    return validate.Rejection(RejectCode.INSTALLATION, f"built with SGLang {label}, installed SGLang is {here}")


class SglangModule(ForeignJitModule):
    """The SGLang kind; its class names this module, where the export labels are
    (``VERSION_LABEL``, ``installed_version``: ``export_lock.export_labels``)."""


KIND = SglangModule("sglang", "SGLang JIT module", version_refusal)
