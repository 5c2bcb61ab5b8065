"""``kernelcache lock check`` / ``lock update``: does the lock still describe this checkout and
toolchain, and re-resolving it without running the app.

Why not rebuild to check: a PR check must be cheap and need no GPU. The lock's inputs are
compared by content, the source key recomputed per locked arch from the spec the lock carries,
and, where the kernel's tools exist here, their version lines compared with the locked ones
(a new compiler is drift: the binaries CI built would differ).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.errors import KernelCacheError, SpecError, ToolchainError
from ..base.settings import Settings, resolve
from ..base.spec import KernelSpec
from .drift import inputs_drift, key_drift
from .format import KernelLock, merge_into, read
from .paths import Anchors, spec_from_data


@dataclass
class Drift:
    """What moved for one kernel (``lines`` empty: it still holds)."""

    name: str
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be checked here, and why

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": not self.lines, "drift": self.lines, "notes": self.notes}


def spec_of(k: KernelLock, a: Anchors, s: Settings) -> KernelSpec:
    """The KernelSpec a block rebuilds: the shipped kernel's own spec (its reference), else the
    spec the block carries."""
    ref = k.rebuild.get("ref")
    if k.rebuild.get("route") == "shipped" and isinstance(ref, str):
        from ..base.spec import specs_from_ref

        try:
            found = [sp for sp in specs_from_ref(ref) if sp.name == k.name]
        except SpecError:
            found = []
        if found:
            return found[0]
    restore(k, a)
    return spec_from_data(k.rebuild["spec"], a)


def restore(k: KernelLock, a: Anchors) -> None:
    """A drop-in's generated sources back from the lock's sidecar (``sidecar.restore``) where
    this host's cache lacks them: best effort (a read-only cache names the missing input later)."""
    if "generated" in k.rebuild:
        from .sidecar import restore as _restore

        try:
            _restore(k, a, a.lock_path)
        except KernelCacheError:
            pass


def _tools_drift(k: KernelLock, spec: KernelSpec, s: Settings) -> tuple[list[str], list[str]]:
    from .. import kinds
    from ..key import level1
    from .record import toolchain_of

    try:
        plan = kinds.make_plan(spec, s)
        here = toolchain_of(level1.level1(plan, s).inputs)
    except ToolchainError as e:
        return [], [f"toolchain not checked (no compiler here): {e}".splitlines()[0]]
    lines = []
    for label, rec in sorted(k.archs.items()):
        for tool in sorted(set(rec.toolchain) | set(here)):
            a, b = rec.toolchain.get(tool), here.get(tool)
            if a != b and a is not None and b is not None:
                line = f"toolchain: {tool} was {a!r}, here {b!r}"
                if line not in lines:
                    lines.append(line)
    return lines, []


def check_kernel(k: KernelLock, a: Anchors, s: Settings) -> Drift:
    out = Drift(k.name)
    try:
        spec = spec_of(k, a, s)
    except (KernelCacheError, KeyError, TypeError, ValueError) as e:
        out.lines.append(f"its spec cannot be rebuilt here: {e}")
        return out
    out.lines += inputs_drift(k, Path(spec.root))
    for label in sorted(k.archs):
        for ln in key_drift(k, spec, s, label, skip_sources=bool(out.lines)):
            if ln not in out.lines:
                out.lines.append(ln)
    lines, notes = _tools_drift(k, spec, s)
    out.lines += lines
    out.notes += notes
    return out


def check(path: str | os.PathLike[str], settings: Settings | None = None) -> list[Drift]:
    """One :class:`Drift` per locked kernel, in name order."""
    s = resolve(settings)
    lock = read(path)
    a = Anchors(path, s.cache_dir)
    return [check_kernel(k, a, s) for _, k in sorted(lock.kernels.items())]


def update(path: str | os.PathLike[str], settings: Settings | None = None, jobs: int | None = None) -> list[str]:
    """Re-resolve every locked kernel for each of its arch labels (a build where the cache has
    none: no app is run) and rewrite its block from what was loaded. Returns one line per
    kernel and arch that failed (empty: all re-recorded)."""
    import kernelcache as kc

    s = resolve(settings)
    lock = read(path)
    a = Anchors(path, s.cache_dir)
    blocks: dict[str, KernelLock] = {}
    failed: list[str] = []
    from .record import kernel_block

    for name, k in sorted(lock.kernels.items()):
        try:
            spec = spec_of(k, a, s)
        except (KernelCacheError, KeyError, TypeError, ValueError) as e:
            failed.append(f"{name}: its spec cannot be rebuilt here: {e}")
            continue
        for label in sorted(k.archs):
            ss = s.replace(lock=None, lock_record=None,
                           cuda_arch=None if label == "host" else label)
            res = kc.warm([spec], jobs=jobs, settings=ss)[0]
            if res.error is not None:
                failed.append(f"{name} ({label}): {res.reason}")
                continue
            b = kernel_block(spec, ss, res.entry_path, path)
            blocks[name] = blocks.get(name, k).merged(b)  # an arch that failed keeps its old record
    merge_into(path, list(blocks.values()), s.lock_dir, replace=True)
    return failed
