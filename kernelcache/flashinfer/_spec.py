"""A FlashInfer ``JitSpecNvcc`` as a kernelcache ``KernelSpec``: a tvm-ffi module built from
FlashInfer's complete command lines (kind ``flashinfer``: ``kinds/flashinfer.py``), so the loader does the rest: ``-MD``
recorded dependencies (every header read, ``-isystem`` ones included), the lock, the atomic
publish, validation, the fleet and prebuilt roots.

Key inputs this adds up to: the bytes of every source and header the compiler read, the argv
(anchored: site-packages, the snapshot root, the toolkit's real path), nvcc and host-compiler
identity, the gencode set in the flags, the tvm-ffi ABI. The URI and FlashInfer's version are
labels (the spec name, ``abi`` is not used for them): two versions rendering the same bytes
with the same flags share an entry.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _flags, _snapshot

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings
    from ..base.spec import KernelSpec

_NAME_OK = re.compile(r"^[A-Za-z0-9_]+$")


def spec_name(uri: str) -> str:
    """A kernelcache name for a FlashInfer URI (its own when valid, else sanitised + a digest)."""
    if _NAME_OK.match(uri):
        return uri
    return re.sub(r"[^A-Za-z0-9_]", "_", uri) + "_" + hashlib.sha256(uri.encode()).hexdigest()[:8]


def kernel_spec(jit_spec: Any, settings: "Settings") -> tuple["KernelSpec", "Settings", Path | None]:
    """The KernelSpec of ``jit_spec``, the settings to load it with (the target arch is the
    module's own gencode set, which FlashInfer chose), and the snapshot dir this call created."""
    from flashinfer.jit import env as fi_env

    from ..base.spec import KernelSpec
    from ..dropin import generated

    name = spec_name(jit_spec.name)
    sources = [Path(s) for s in jit_spec.sources]
    gen = [p for p in sources if _snapshot.is_generated(p, fi_env.FLASHINFER_GEN_SRC_DIR)]
    static = [Path(os.path.realpath(p)) for p in sources if p not in gen]
    created = None
    if gen:
        root, made = generated.materialize(settings.cache_dir, f"fi_{name}", _snapshot.files_of(gen))
        created = root if made else None
        rel = [p.name for p in gen] + [str(p) for p in static]
    else:
        root = Path(os.path.commonpath([str(p.parent) for p in static]))
        rel = [str(p.relative_to(root)) for p in static]
    lines = _flags.command_lines(jit_spec)
    spec = KernelSpec(
        name=name, sources=rel, root=root, system_include_dirs=list(lines.include_dirs),
        cflags=list(lines.cflags), cuda_cflags=list(lines.cuda_cflags), ldflags=list(lines.ldflags),
        functions={}, backend="cuda" if any(p.suffix == ".cu" for p in sources) else "cpu",
        kind="flashinfer",
    )
    if lines.archs:
        settings = settings.replace(cuda_arch=",".join(lines.archs))
    return spec, settings, created
