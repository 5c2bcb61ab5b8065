"""The kernel lock: what production loads, decided in CI, verified on the node.

``KERNELCACHE_LOCK_RECORD=PATH`` records every kernel a process loads (any route) into a lock
file; ``kernelcache lock check PATH`` says whether the sources and toolchain here still match
it; ``KERNELCACHE_LOCK=PATH`` serves only locked kernels whose key here is the locked one, and
:func:`preload` loads and validates the whole locked set at a server's startup.

(``kernelcache.build.lock`` is another thing: the build single-flight lock.) Names resolve lazily:
the loader imports ``kernelcache.lockfile.hook`` on every load, and this package must cost
nothing until a lock is used.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import lazy

__all__ = ["ArchLock", "KernelLock", "LockFile", "LockFileError", "read", "loads", "merge_into", "preload",
           "check", "update", "rebuild_as", "FORMAT"]

_LAZY = {
    **{n: "format" for n in ("ArchLock", "KernelLock", "LockFile", "LockFileError", "read", "loads", "merge_into",
                             "FORMAT")},
    "preload": "serve", "check": "check", "update": "check", "rebuild_as": "record",
}

if TYPE_CHECKING:  # pragma: no cover
    from .check import check, update
    from .format import FORMAT, ArchLock, KernelLock, LockFile, LockFileError, loads, merge_into, read
    from .record import rebuild_as
    from .serve import preload

__getattr__ = lazy.names(__name__, _LAZY, globals())
