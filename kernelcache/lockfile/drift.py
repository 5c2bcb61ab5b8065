"""Drift: what moved between a kernel's lock block and this host, one line per input.

Why one module for serving and ``lock check``: the node refusing a load and the PR check must
name the same input (``tree_speculative_sampling: csrc/.../tree_sampling.cuh changed``). Inputs
are compared by content (sha256 / xxh3 of the bytes; a header edited with its mtime restored is
drift), the source key's inputs with ``source_key.diff`` (the diff a refused prebuilt entry and
``explain`` name), and, where a compiler exists, the tools' version lines.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..base.errors import ToolchainError
from ..base.settings import Settings
from ..base.spec import KernelSpec
from ..host import toolchain
from ..key.source_key import diff as source_diff
from .format import KernelLock
from .paths import shown
from .record import arch_label, source


def digest_of(path: Path, algo: str) -> str | None:
    """The content digest of ``path`` in the lock's spelling (None: unreadable)."""
    try:
        if algo == "xxh3":
            return "xxh3:" + toolchain.content_hash(path)
        with open(path, "rb") as f:
            return "sha256:" + hashlib.sha256(f.read()).hexdigest()
    except (OSError, ValueError):
        return None


def inputs_drift(k: KernelLock, root: Path) -> list[str]:
    """Each locked input (root-relative) whose bytes here differ, or that is gone."""
    out = []
    for rel, want in sorted(k.inputs.items()):
        p = root / rel
        name = shown(k.root, rel)
        if not p.is_file():
            out.append(f"{name} removed")
            continue
        got = digest_of(p, want.partition(":")[0])
        if got != want:
            out.append(f"{name} changed")
    return out


def key_drift(k: KernelLock, spec: KernelSpec, s: Settings, label: str | None = None,
              skip_sources: bool = False) -> list[str]:
    """The source key of ``spec`` here for ``label`` (default: this host's archs) against the lock's."""
    try:
        if label is None:
            archs, label = arch_label(spec, s)
        else:
            archs = () if label == "host" else tuple(label.split(","))
        rec = k.archs.get(label)
        if rec is None:
            return [f"not locked for arch {label} (locked: {', '.join(sorted(k.archs)) or 'none'})"]
        skey, here = source(spec, s, archs)
    except (ToolchainError, OSError) as e:
        return [f"its key cannot be computed here: {e}"]
    if skey == rec.source_key:
        return []
    lines = source_diff(rec.source_inputs, here) or ["source key differs"]
    if skip_sources:  # already named by their bytes
        lines = [ln for ln in lines if not ln.startswith("source ")]
    return lines


def drift(k: KernelLock | None, spec: KernelSpec, s: Settings, lock_path: str | os.PathLike[str]) -> list[str]:
    """Why ``spec`` may not be served under the lock (empty: it may): not in the lock, an input
    whose bytes moved, a flag, arch or tvm-ffi ABI the source key sees."""
    if k is None:
        return [f"not in the kernel lock {os.fspath(lock_path)}"]
    moved = inputs_drift(k, Path(spec.root))
    return moved + key_drift(k, spec, s, skip_sources=bool(moved))
