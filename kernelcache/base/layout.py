"""The cache layout: every path under a cache dir or an artifact root is spelled here, once.

Why one owner: the layout is a protocol between processes of different versions (a serving
host reading entries another release wrote, a companion wheel shipping an artifact root), so a
second spelling of ``v1/entries/<name>/<key>`` anywhere is a future incompatibility. Every other
module asks a :class:`Layout` (``Layout(settings.cache_dir)`` or ``Layout(artifact_root)``).

Under ``<dir>/v1``::

    entries/<name>/<key1[:32]>/<entry_id>/   built entries (binary, manifest.json, build.log, used)
    entries/<name>/<key1[:32]>/.recent       entry id of the last hit (tried first)
    fetched/<name>/<skey[:32]>/<entry_id>/   fleet entries fetched to this host
    inline/<name>/<digest>/                  drop-in generated sources (content-addressed)
    dropin/<dir>/                            drop-in output copies; dropin/objects/ scratch
    tmp/<tag>.<host>.<pid>.<rand>/           private build / download dirs (same filesystem)
    quarantine/<entry_id>.<time>.<rand>/     rejected entries, kept for post-mortems
    trash/                                   evicted entries before deletion
    toolchain/                               on-disk memo of tool identities
    recall/<digest>                          recalled drop-in calls (kernelcache.lookup.recall spells it
                                             too: it cannot afford to import this module)
"""
from __future__ import annotations

from pathlib import Path

from .warm_facts import NAME_MAX, NAME_SUFFIXES, RECALL, VERSION, name_problem  # noqa: F401 - the layout's words

BUILT = "entries"  # area of entries built on this host (and of artifact roots)
FETCHED = "fetched"  # area of fleet entries fetched to this host
AREAS = (BUILT, FETCHED)
KEY_PREFIX = 32  # key directories are named by the first 32 hex digits of their key
QUARANTINE = "quarantine"  # where rejected entries go (also the EntryInfo.area of one there)
# files of an entry directory besides its binary and manifest.json, and of a key directory
USED = "used"  # touched on every hit: LRU order for prune, newest-first candidate order
DEPSTAT = "depstat.json"  # re-validated dependency stats (a later process trusts them unhashed)
RECENT = ".recent"  # in a key directory: the entry id of the last hit (tried first)
# characters a build file (ninja) cannot hold in a path: a newline or carriage return ends the
# line, "|" starts the implicit outputs/inputs, and none of them has an escape
UNBUILDABLE_CHARS = {"\n": "a newline", "\r": "a carriage return", "|": "'|'"}


def path_problem(path: str) -> str | None:
    """Why a build cannot use ``path`` (a build file cannot hold it), or None."""
    for ch, what in UNBUILDABLE_CHARS.items():
        if ch in path:
            return f"it contains {what}, which a build file (ninja) cannot hold in a path"
    return None


class _Under:
    """A working area of the layout: the directory ``name`` under another of its paths (``root``
    unless said), read like a property."""

    __slots__ = ("name", "parent")

    def __init__(self, name: str, parent: str = "root") -> None:
        self.name, self.parent = name, parent

    def __get__(self, layout: "Layout", owner: type | None = None) -> Path:
        return getattr(layout, self.parent) / self.name


class Layout:
    """Paths of one cache dir or artifact root (cheap; touches nothing on disk)."""

    __slots__ = ("base", "root")

    def __init__(self, base: Path | str):
        self.base = Path(base)
        self.root = self.base / VERSION

    def __repr__(self) -> str:
        return f"Layout({str(self.base)!r})"

    # -- entries -----------------------------------------------------------------------------
    def area(self, area: str) -> Path:
        if area not in AREAS:
            raise ValueError(f"unknown cache area {area!r} (one of {', '.join(AREAS)})")
        return self.root / area

    def kernel_dir(self, name: str, area: str = BUILT) -> Path:
        return self.area(area) / name

    def key_dir(self, name: str, key1: str) -> Path:
        return self.root / BUILT / name / key1[:KEY_PREFIX]

    def fetched_dir(self, name: str, skey: str) -> Path:
        return self.root / FETCHED / name / skey[:KEY_PREFIX]

    def entry_dir(self, name: str, key1: str, entry_id: str) -> Path:
        return self.key_dir(name, key1) / entry_id

    def is_artifact_root(self) -> bool:
        return (self.root / BUILT).is_dir()

    # -- working areas -----------------------------------------------------------------------
    tmp = _Under("tmp")
    quarantine = _Under(QUARANTINE)
    recall = _Under(RECALL)
    trash = _Under("trash")
    memo = _Under("toolchain")
    inline = _Under("inline")
    dropin = _Under("dropin")
    dropin_objects = _Under("objects", "dropin")

    def inline_dir(self, name: str) -> Path:
        return self.inline / name
