"""The source key: a key computable without any tool, what fleet hosts index shared entries by,
and what an entry built elsewhere (a prebuilt root, a companion wheel, the fleet) must match.

Serving hosts may have no compiler, so the remote cannot be indexed by the level-1 key (it
hashes tool identities). The same key decides whether an artifact built on another machine is
*this* build: one owner of "the same build" (the sources, the spec's flags, defines, include
dirs and link line, the arch, the tvm-ffi ABI, the kind's facts, the compiler environment
variables every compile here reads), so an input added to the key
is checked by every place at once. Its inputs are recorded in clear in each manifest
(``Manifest.skey_inputs``), so a refusal names what differs (:func:`diff`).
"""
from __future__ import annotations

import os
from typing import Mapping

from ..base.settings import Settings
from ..base.spec import KernelSpec
from ..host import native, toolchain
from ..host.anchors import ROOT, anchor_text, anchors_of
from .level1 import KEY_FORMAT, canonical_hash, extra_inputs, source_hashes, tvm_abi

# The compiler environment that changes what a compile of the same command line produces (header
# search, appended flags), part of every compile here as of the local key: a build elsewhere made
# without it is not this host's build. Left out: where tools and link-time libraries are found
# (LIBRARY_PATH is set by CUDA images on serving hosts that never compile; the tools are checked
# by the local key alone, which a host without them cannot compute).
CODE_ENV = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")


def source_inputs(spec: KernelSpec, archs: tuple[str, ...], tvm_version: str, settings: Settings,
                  kind_inputs: Mapping[str, str], verbatim_flags: bool, hashes: dict[str, str] | None = None,
                  native_cpu: list[str] | None = None, links_tvm_ffi: bool = True) -> dict:
    """What the source key hashes, in clear (see :func:`source_key`).

    ``native_cpu``: the CPU features to name for a ``-march=native`` spec instead of this CPU's
    (an entry built on another CPU whose features this CPU was checked to have).
    ``links_tvm_ffi``: the kind's fact; only then is tvm-ffi's ABI an input."""
    def where(d: str) -> str:
        p = str(spec.abspath(d))
        root = str(spec.root)
        return ROOT + p[len(root):] if p == root or p.startswith(root + os.sep) else "<external>"

    flags = [list(spec.cflags), list(spec.cuda_cflags), list(spec.ldflags)]
    data = {
        "format": KEY_FORMAT, "name": spec.name, "backend": spec.backend,
        "sources": source_hashes(spec) if hashes is None else hashes,
        "include_dirs": [where(str(d)) for d in spec.include_dirs],
        "system_include_dirs": [where(str(d)) for d in spec.system_include_dirs],
        "flags": flags,
        "arch": list(archs) if spec.is_cuda else [], "tvm_ffi_abi": tvm_abi(tvm_version),
        "functions": dict(spec.schemas), "buster": settings.cache_buster,
    }
    if not links_tvm_ffi:
        del data["tvm_ffi_abi"]
    env = {k: v for k, v in toolchain.env_inputs().items() if k in CODE_ENV}
    if env:  # (absent when unset: keys of hosts that set none are unchanged)
        data["env"] = env
    if _has_native(spec):
        data["native_cpu"] = sorted(native.cpu_features()) if native_cpu is None else list(native_cpu)
    data.update(extra_inputs(spec, kind_inputs))
    if verbatim_flags:
        # Foreign kinds carry complete flag lists with install paths (torch's include and
        # library dirs): anchored, so hosts whose venvs sit elsewhere share the index.
        anchors = anchors_of(spec)
        data["flags"] = [[anchor_text(f, anchors) for f in fl] for fl in flags]
        data["include_dirs"] = [anchor_text(str(spec.abspath(d)), anchors) for d in spec.include_dirs]
        data["system_include_dirs"] = [anchor_text(str(spec.abspath(d)), anchors)
                                       for d in spec.system_include_dirs]
    return data


def source_key(spec: KernelSpec, archs: tuple[str, ...], tvm_version: str, settings: Settings,
               kind_inputs: Mapping[str, str], verbatim_flags: bool, hashes: dict[str, str] | None = None) -> str:
    """A key computable without any tool: what fleet hosts index shared entries by.

    This key narrows the fleet's search and admits entries built elsewhere; every candidate is
    then validated against this installation (headers, ABI, arch, schemas, bytes).
    ``kind_inputs``/``verbatim_flags``: the facts of the spec's kind (``kinds.source_key``);
    ``hashes``: the sources' hashes when the caller has them (a load hashes them once).
    """
    return canonical_hash(source_inputs(spec, archs, tvm_version, settings, kind_inputs, verbatim_flags, hashes))


def _has_native(spec: KernelSpec) -> bool:
    """``-march=native`` and friends: the same string builds different code on another CPU, so
    the tool-free source key names this CPU (its feature flags) for such a spec."""
    return bool(native.native_flags(spec.cflags, spec.cuda_cflags))


# -- why two builds differ -------------------------------------------------------------------------
_FLAG_LISTS = ("cflags", "cuda_cflags", "ldflags")
_WORDS = {"include_dirs": "include dirs", "system_include_dirs": "system include dirs", "arch": "arch",
          "tvm_ffi_abi": "tvm-ffi ABI", "buster": "cache buster (KERNELCACHE_CACHE_BUSTER)",
          "native_cpu": "CPU features (-march=native)", "env": "compiler environment (CPATH, NVCC_APPEND_FLAGS, ...)", "functions": "function schemas", "extra_abi": "ABI facts"}


def _only(a: list, b: list) -> list:
    """Items of ``a`` that ``b`` lacks, in ``a``'s order (every item when both hold the same ones)."""
    return [x for x in a if x not in b]


def _lists(what: str, a: list, b: list) -> str:
    built, here = _only(a, b), _only(b, a)
    if not built and not here:
        return f"{what}: the same items in another order ({a} here {b})"
    return f"{what}: built with {built}, this spec has {here}"


def diff(built: Mapping, here: Mapping) -> list[str]:
    """What differs between the source-key inputs an entry was built with (``built``) and this
    spec's (``here``), one line each: ``cflags: built with ['-DFACTOR=2'], this spec has
    ['-DFACTOR=3']``."""
    out: list[str] = []
    for k in sorted(set(built) | set(here), key=lambda k: (k != "flags", k)):
        a, b = built.get(k), here.get(k)
        if a == b:
            continue
        if k == "flags" and isinstance(a, list) and isinstance(b, list) and len(a) == len(b) == 3:
            out += [_lists(name, fa, fb) for name, fa, fb in zip(_FLAG_LISTS, a, b) if fa != fb]
        elif k == "sources" and isinstance(a, dict) and isinstance(b, dict):
            out += [f"source {s} {'added' if s not in a else 'removed' if s not in b else 'changed'}"
                    for s in sorted(set(a) | set(b)) if a.get(s) != b.get(s)]
        elif isinstance(a, list) and isinstance(b, list):
            out.append(_lists(_WORDS.get(k, k), a, b))
        elif k == "functions" and isinstance(a, dict) and isinstance(b, dict):
            fns = sorted(f for f in set(a) | set(b) if a.get(f) != b.get(f))
            out.append(f"function schemas: {', '.join(f'{f} built as {a.get(f)!r}, this spec has {b.get(f)!r}' for f in fns)}")
        else:
            out.append(f"{_WORDS.get(k, k)}: built with {a!r}, this spec has {b!r}")
    return out
