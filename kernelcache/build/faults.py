"""What a failed build step reports: the fault itself, not whatever broke first because of it.

Why: when ``kernelcache clean`` removes the cache while a build runs, the first thing to break is
a compiler that cannot open its output ("No such file or directory"), and users read it as a
compiler bug; when the disk fills, the first thing to break is a bare ``OSError`` naming neither
the kernel nor the file. The loader asks :func:`classify` after a failed build step and raises
the error it returns instead (the original chained), and builds once more when the cache was
removed under it.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..base.errors import CacheRemovedError, CacheWriteError, KernelCacheError


def classify(spec_name: str, cache_dir: Path, bdir: Path, err: BaseException) -> KernelCacheError | None:
    """The error to raise instead of ``err`` (raised by the build step of ``spec_name`` in its
    private directory ``bdir``), or None to raise ``err`` as it is."""
    if not isinstance(err, Exception) or isinstance(err, (CacheRemovedError, CacheWriteError)):
        return None  # an interrupt, or already named
    if not os.path.isdir(bdir):  # nothing in the build removes its own directory before this
        return CacheRemovedError(spec_name, str(bdir))
    if isinstance(err, OSError) and not isinstance(err, KernelCacheError):
        path = err.filename
        if path is None or _under(str(path), cache_dir):  # a write of the build's own files
            return CacheWriteError(spec_name, str(path or bdir), err)
    return None


def _under(path: str, cache_dir: Path) -> bool:
    base = str(cache_dir).rstrip(os.sep) + os.sep
    return os.path.abspath(path).startswith(base)


def failure_text(e: BaseException) -> str:
    """What a failed build's event says: the error, or that the build was interrupted (Ctrl-C, a
    signal's exit: their exceptions carry no text, so the log read ``error: ""``)."""
    if isinstance(e, Exception):
        return str(e) or type(e).__name__
    return f"interrupted ({type(e).__name__}{': ' + str(e) if str(e) else ''})"
