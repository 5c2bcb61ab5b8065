"""The cache's fixed spellings that the leanest paths need: the layout version and the recall area.

Why a leaf of its own: a recalled call (``kernelcache.lookup.recall``) must not import
:mod:`kernelcache.base.layout` (its ``Layout`` class alone leaves ~60 objects in a process where a
full garbage collection is pending), yet the spelling must have one owner. Both import it here.
"""
from __future__ import annotations

VERSION = "v1"  # the cache layout's version: every area lives under <cache dir>/v1/
RECALL = "recall"  # under the layout's root: one memo per recalled call
RECALL_FORMAT = 4  # 4: the import path keyed by what it resolves to (import_stamp), not the whole sys.path
