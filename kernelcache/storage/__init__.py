"""Where entries live. One small protocol, several places:

* ``local``    the writable cache dir (entries by level-1 key; a mirror of fetched fleet entries),
* ``prebuilt`` read-only artifact roots (wheel-shipped or ``KERNELCACHE_PREBUILT``),
* ``remote``   the fleet cache (object stores, shared filesystems) — reached by a load only
  through the fleet stage (``kernelcache.lookup.fleet``, beside the loader), which brings an entry into
  local staging before anything validates or loads it.

Each place answers "which entries might serve this spec?" with :class:`Entry` records on local
disk; validation (``kernelcache.entry.validate``) decides whether one may be loaded. Nothing here
imports the loader or the fleet stage.
"""
from .entry import Entry

__all__ = ["Entry"]
