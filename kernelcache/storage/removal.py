"""Removing trees from the cache honestly: every path that could not be removed, with its error.

Why: ``shutil.rmtree(..., ignore_errors=True)`` let ``prune`` and ``clean`` report success on a
read-only cache. Here a removal returns (or raises, as ``RemovalError``) what it could not do.
"""
from __future__ import annotations

import errno
import os
import shutil
import sys
import uuid
from pathlib import Path

from ..base.errors import RemovalError

ASIDE = ".removing."  # <root>.removing.<pid>.<rand>: a root being deleted by `clean`


def rmtree(path: Path) -> list[tuple[Path, OSError]]:
    """Remove a tree; what could not be removed, each path with its error (empty: all gone)."""
    failed: list[tuple[Path, OSError]] = []

    def record(_fn, p, exc) -> None:  # onerror's exc_info (3.11) or onexc's exception (3.12+)
        e = exc[1] if isinstance(exc, tuple) else exc
        if not isinstance(e, FileNotFoundError):
            failed.append((Path(p), e if isinstance(e, OSError) else OSError(str(e))))

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=record)
    else:
        shutil.rmtree(path, onerror=record)
    return failed


def remove_root(root: Path) -> bool:
    """Remove a cache's layout root; False when there was none. Raises RemovalError naming what
    could not be removed.

    The root is first renamed aside in one step, then deleted: a build running meanwhile finds
    its directory gone and retries (``kernelcache.build.faults``) in a fresh root, which this
    deletion never reaches. Roots left aside by an interrupted clean are deleted too.
    """
    aside = root.with_name(f"{root.name}{ASIDE}{os.getpid()}.{uuid.uuid4().hex[:8]}")
    existed = True
    try:
        os.rename(root, aside)
    except FileNotFoundError:
        existed = False
    except OSError as e:
        raise RemovalError("clean", [(root, e)]) from e
    failed: list[tuple[Path, OSError]] = []
    try:
        with os.scandir(root.parent) as it:
            leftovers = [Path(d.path) for d in it if d.name.startswith(root.name + ASIDE) and d.is_dir()]
    except OSError:
        leftovers = [aside] if existed else []
    for d in leftovers:
        errors = rmtree(d)
        if errors and all(e.errno == errno.ENOTEMPTY for _, e in errors):
            errors = rmtree(d)  # a process whose directory was in it wrote one more file meanwhile
        failed += errors
    if failed:
        raise RemovalError("clean", failed)
    return existed
