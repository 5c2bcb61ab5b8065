"""The source key: a key computable without any tool, what fleet hosts index shared entries by.

Serving hosts may have no compiler, so the remote cannot be indexed by the level-1 key (it hashes
tool identities).
"""
from __future__ import annotations

import os
from typing import Mapping

from . import native
from .anchors import anchor_text, anchors_of
from .level1 import KEY_FORMAT, canonical_hash, extra_inputs, source_hashes, tvm_abi
from .plan import ROOT
from .settings import Settings
from .spec import KernelSpec


def source_key(spec: KernelSpec, archs: tuple[str, ...], tvm_version: str, settings: Settings,
               kind_inputs: Mapping[str, str], verbatim_flags: bool, hashes: dict[str, str] | None = None) -> str:
    """A key computable without any tool: what fleet hosts index shared entries by.

    Serving hosts may have no compiler, so the remote cannot be indexed by the level-1 key (it
    hashes tool identities). This key only narrows the search; every candidate is then
    validated against this installation (sources, headers, ABI, arch, schemas, bytes).
    ``kind_inputs``/``verbatim_flags``: the facts of the spec's kind (``kinds.source_key``);
    ``hashes``: the sources' hashes when the caller has them (a load hashes them once).
    """
    def where(d: str) -> str:
        p = str(spec.abspath(d))
        root = str(spec.root)
        return ROOT + p[len(root):] if p == root or p.startswith(root + os.sep) else "<external>"

    flags = [list(spec.cflags), list(spec.cuda_cflags), list(spec.ldflags)]
    data = {
        "format": KEY_FORMAT, "name": spec.name, "backend": spec.backend,
        "sources": source_hashes(spec) if hashes is None else hashes,
        "include_dirs": [where(d) for d in spec.include_dirs],
        "system_include_dirs": [where(d) for d in spec.system_include_dirs],
        "flags": flags,
        "arch": list(archs) if spec.is_cuda else [], "tvm_ffi_abi": tvm_abi(tvm_version),
        "functions": dict(spec.functions), "buster": settings.cache_buster,
        **({"native_cpu": sorted(native.cpu_features())} if _has_native(spec) else {}),
    }
    data.update(extra_inputs(spec, kind_inputs))
    if verbatim_flags:
        # Foreign kinds carry complete flag lists with install paths (torch's include and
        # library dirs): anchored, so hosts whose venvs sit elsewhere share the index.
        anchors = anchors_of(spec)
        data["flags"] = [[anchor_text(f, anchors) for f in fl] for fl in flags]
        data["include_dirs"] = [anchor_text(str(spec.abspath(d)), anchors) for d in spec.include_dirs]
        data["system_include_dirs"] = [anchor_text(str(spec.abspath(d)), anchors)
                                       for d in spec.system_include_dirs]
    return canonical_hash(data)


def _has_native(spec: KernelSpec) -> bool:
    """``-march=native`` and friends: the same string builds different code on another CPU, so
    the tool-free source key names this CPU (its feature flags) for such a spec."""
    return bool(native.native_flags(spec.cflags, spec.cuda_cflags))
