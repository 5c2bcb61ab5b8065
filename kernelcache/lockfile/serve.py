"""Locked serving: ``KERNELCACHE_LOCK=PATH`` refuses, before any build step, a kernel the lock
lacks or whose inputs or key here differ from the locked ones; :func:`preload` loads and
validates the whole locked set at startup.

Why before the pipeline: "never compiles" must hold on a node without a compiler and with a
read-only cache or root, so the check needs nothing but the lock, the sources' bytes and the
toolchain-free source key (``kernelcache.source_key``). ``KERNELCACHE_LOCK_MODE=warn`` says the
same line (a ``lock_drift`` event, shown as a progress line) and lets the load go on.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import events, process_state
from ..errors import LockViolation
from ..settings import Settings, resolve
from ..spec import KernelSpec
from .drift import drift
from .format import LockFile, read

if TYPE_CHECKING:  # pragma: no cover
    from ..loader import WarmResult

_memo: dict[str, tuple[tuple[int, ...], LockFile]] = {}  # path -> (stat, lock)


def _forget() -> None:
    _memo.clear()


process_state.register("lockfile.serve.memo", _forget)


def lock_of(path: str | os.PathLike[str]) -> LockFile:
    """The lock at ``path``, parsed once per content (size, mtime, ctime, inode)."""
    p = os.path.abspath(path)
    try:
        st = os.stat(p)
        stamp: tuple[int, ...] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    except OSError:
        stamp = (-1, -1, -1, -1)
    got = _memo.get(p)
    if got is not None and got[0] == stamp:
        return got[1]
    lock = read(p)
    _memo[p] = (stamp, lock)
    return lock


def checked_stat(path: str | os.PathLike[str]) -> list[int] | None:
    """The stat (size, mtime, ctime, inode) of the lock at ``path`` as this process last read it:
    what a recalled call must find again (``recall_write`` witnesses it), None if never read."""
    got = _memo.get(os.path.abspath(path))
    return None if got is None or got[0][0] < 0 else list(got[0])


def enforce(spec: KernelSpec, s: Settings) -> None:
    """Raise :class:`LockViolation` (mode ``error``) or emit ``lock_drift`` (mode ``warn``)
    when the lock at ``s.lock`` does not describe ``spec`` here."""
    assert s.lock is not None
    lock = lock_of(s.lock)
    lines = drift(lock.kernels.get(spec.name), spec, s, s.lock)
    if not lines:
        return
    if s.lock_mode == "warn":
        events.emit(events.Event.LOCK_DRIFT, name=spec.name, reason="; ".join(lines), lock=str(s.lock))
        return
    events.emit(events.Event.LOCK_REFUSED, name=spec.name, reason="; ".join(lines), lock=str(s.lock))
    raise LockViolation(spec.name, lines, str(s.lock))


def locked_specs(path: str | os.PathLike[str], s: Settings) -> list[KernelSpec]:
    """The KernelSpecs the lock at ``path`` names, rebuilt on this host from their blocks (a
    shipped kernel from its reference, any other from the spec the block carries)."""
    from .check import spec_of
    from .paths import Anchors

    lock = lock_of(path)
    a = Anchors(path, s.cache_dir)
    return [spec_of(k, a, s) for _, k in sorted(lock.kernels.items())]


def preload(path: str | os.PathLike[str], settings: Settings | None = None, jobs: int | None = None
            ) -> list["WarmResult"]:
    """Load and validate every kernel of the lock at ``path`` in parallel (``kc.warm``'s pool)
    under locked serving, then mark the process ready: a drift fails here, at startup, with one
    :class:`LockViolation` naming every refused kernel, and compiles from now on are counted as
    compiles after ready (``kc.stats()["compiles_after_ready"]``)."""
    import kernelcache as kc

    s = resolve(settings)
    s = s.replace(lock=Path(os.path.abspath(path)), lock_record=None)
    results = kc.warm(locked_specs(path, s), jobs=jobs, settings=s)
    refused = [r for r in results if isinstance(r.error, LockViolation)]
    if refused:
        errs: list[Any] = [r.error for r in refused]
        first = errs[0]
        raise LockViolation(first.spec_name, first.drift, str(path),
                            also=[f"{e.spec_name}: {d}" for e in errs[1:] for d in e.drift]) from first
    failed = [r for r in results if r.error is not None]
    if failed:
        raise failed[0].error  # type: ignore[misc]
    events.mark_ready()
    return results
