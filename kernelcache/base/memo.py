"""A recalled call's memo on disk: where it lives and how it is read.

Why here and not in :mod:`kernelcache.lookup.recall`: the cache's own housekeeping (``prune`` drops memos
whose entry is gone) reads memos too, and storage sits below the lookup floor; both read them
through this one reader.
"""
from __future__ import annotations

import marshal
import os

from . import environ
from .formats import RECALL, RECALL_FORMAT, VERSION


def memo_path(digest: str, base: str | None = None) -> str:
    return os.path.join(base or environ.cache_dir(), VERSION, RECALL, digest)


def read_file(path: str) -> tuple | None:
    """One memo as written (None: unreadable, damaged or of another format)."""
    try:
        with open(path, "rb") as f:
            rec = marshal.loads(f.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if type(rec) is not tuple or len(rec) != 13 or rec[0] != RECALL_FORMAT:
        return None
    return rec
