"""Paths in a lock: relative to the lock's directory, or anchored, never this machine's.

Why: the lock is committed and read on CI runners and nodes whose checkout, venv and cache sit
elsewhere. A path under the lock's directory (the repository) is written relative to it
(``csrc/ngram/trie.cpp``); one under an install location carries that location's anchor
(``${KERNELCACHE}`` for the shipped kernels' sources, ``${SITE}`` for site-packages,
``${KERNELCACHE_DIR}`` for generated inline sources, which are named by their content digest);
anything else stays absolute (and a reviewer sees it).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ..base.errors import ToolchainError
from ..base.spec import KernelSpec
from ..host.anchors import anchor_text, machine_anchors

LOCK = "${LOCK}"  # in flags: the lock's directory
CACHE = "${KERNELCACHE_DIR}"


class Anchors:
    """The anchors of one lock file on this host, longest prefix first."""

    def __init__(self, lock_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str]) -> None:
        self.lock_path = os.path.abspath(lock_path)
        self.base = os.path.dirname(self.lock_path)
        try:
            pairs = machine_anchors()
        except ToolchainError:
            pairs = []
        pairs = [*pairs, (CACHE, os.path.realpath(cache_dir)), (LOCK, os.path.realpath(self.base))]
        if os.path.realpath(self.base) != self.base:
            pairs.append((LOCK, self.base))
        self.pairs = sorted(pairs, key=lambda p: -len(p[1]))

    def to_lock(self, path: str | os.PathLike[str]) -> str:
        """A path as the lock writes it."""
        p = os.path.realpath(path)
        for name, prefix in self.pairs:
            if p == prefix or p.startswith(prefix + os.sep):
                rest = p[len(prefix):].lstrip(os.sep).replace(os.sep, "/")
                if name == LOCK:
                    return rest or "."
                return name + ("/" + rest if rest else "")
        return p

    def from_lock(self, text: str) -> Path:
        """A path of the lock on this host."""
        if text.startswith("${"):
            name, _, rest = text.partition("}")
            name += "}"
            prefix = next((q for n, q in self.pairs if n == name), None)
            if prefix is None:
                raise ToolchainError(f"the lock names {text}, and this host has no {name}")
            return Path(prefix + rest)
        return Path(text) if os.path.isabs(text) else Path(self.base) / text

    def text(self, s: str) -> str:
        """A flag with this host's install prefixes anchored."""
        return anchor_text(s, self.pairs)

    def untext(self, s: str) -> str:
        for name, prefix in self.pairs:
            s = s.replace(name, prefix)
        return s


def spec_to_data(spec: KernelSpec, a: Anchors) -> dict[str, Any]:
    """The KernelSpec as data: what ``kernelcache lock update`` and ``preload`` rebuild it from."""
    def rel_or_lock(p: str | Path) -> str:
        return str(p) if not os.path.isabs(p) else a.to_lock(p)

    return {
        "name": spec.name, "root": a.to_lock(spec.root), "kind": spec.kind, "backend": spec.backend,
        "sources": [rel_or_lock(s) for s in spec.sources],
        "include_dirs": [rel_or_lock(d) for d in spec.include_dirs],
        "system_include_dirs": [rel_or_lock(d) for d in spec.system_include_dirs],
        "cflags": [a.text(f) for f in spec.cflags], "cuda_cflags": [a.text(f) for f in spec.cuda_cflags],
        "ldflags": [a.text(f) for f in spec.ldflags], "functions": dict(spec.functions.items()) if isinstance(spec.functions, Mapping) else {},
        "abi": dict(spec.abi),
    }


def spec_from_data(d: dict[str, Any], a: Anchors) -> KernelSpec:
    """The inverse of :func:`spec_to_data` on this host."""
    def path(p: str) -> str:
        return str(a.from_lock(p)) if p.startswith("${") or os.path.isabs(p) else p

    return KernelSpec(
        name=d["name"], root=a.from_lock(d["root"]), kind=d.get("kind", "tvm_ffi"), backend=d.get("backend", "auto"),
        sources=[path(s) for s in d["sources"]], include_dirs=[path(p) for p in d.get("include_dirs", [])],
        system_include_dirs=[path(p) for p in d.get("system_include_dirs", [])],
        cflags=[a.untext(f) for f in d.get("cflags", [])], cuda_cflags=[a.untext(f) for f in d.get("cuda_cflags", [])],
        ldflags=[a.untext(f) for f in d.get("ldflags", [])], functions=d.get("functions") or {},
        abi=d.get("abi") or {})


def shown(root: str, rel: str) -> str:
    """A root-relative input as a reader of the lock finds it (``csrc/ngram/trie.h``)."""
    joined = os.path.normpath(rel if root in ("", ".") else f"{root}/{rel}")
    return joined.replace(os.sep, "/")
