"""The loader's one call into the lock (``loader.load_with_result``): cheap when no lock is set.

Why a module of its own: the loader imports it on every load, so it holds only the test
"is a lock in play" and defers everything else to :mod:`.serve` (a load that builds nothing,
checked against the lock, before any build step) and :mod:`.record` (the block written after the load).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings
    from ..base.spec import KernelSpec


def active(s: "Settings") -> bool:
    """Does this load run under a lock (serving or recording)?"""
    return s.lock is not None or s.lock_record is not None


def run(spec: "KernelSpec", s: "Settings", pipeline: Callable[["KernelSpec", "Settings"], tuple[Any, Any]]
        ) -> tuple[Any, Any]:
    """``pipeline(spec, s)`` under the lock: refused (or warned about) before it starts when the
    lock does not describe ``spec`` here; recorded after it when ``s.lock_record`` is set."""
    if s.lock is not None:
        from .serve import served

        mod, res = served(spec, s, pipeline)
    else:
        mod, res = pipeline(spec, s)
    if s.lock_record is not None:
        from .record import note

        note(spec, s, res.entry_path)
    return mod, res
