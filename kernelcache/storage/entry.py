"""One entry on local disk: a directory with the binary, its manifest and bookkeeping files.

A warm load reads the entry's packed hit record (``kernelcache.entry.deprecord``), not its JSON
manifest: ``head`` (the manifest without its dependency list) and ``record`` serve the hit path;
``manifest`` (the full record, parsed on first use) serves export, the fleet and ``explain``.
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from ..base import bounded
from ..base.errors import KernelCacheError
from ..base.events import Place
from ..base.layout import DEPSTAT, USED
from ..base.warm_facts import stat_fields
from ..entry import deprecord
from ..entry.manifest import FILENAME as MANIFEST, Manifest, read as read_manifest


class Entry:
    """An entry directory. ``origin``: the place it is in (local | prebuilt | fetched). A plain class (every load
    builds one): the manifest is parsed only when asked for, the hit record read only once."""

    __slots__ = ("path", "origin", "_manifest", "_head", "_record")

    def __init__(self, path: Path, manifest: Manifest | None = None, origin: Place = Place.LOCAL,
                 record: "deprecord.HitRecord | None" = None, head: Manifest | None = None) -> None:
        self.path = path
        self.origin = origin
        self._manifest = manifest
        self._record = record
        self._head = head

    @classmethod
    def open(cls, path: Path, origin: Place = Place.LOCAL) -> "Entry | None":
        """The entry at ``path`` if it is whole (a bound hit record, or a parseable manifest)."""
        rec = deprecord.load(path, MANIFEST)
        if rec is not None:
            head = Manifest.from_dict(rec.head)
            if head is not None:
                return cls(path, None, origin, rec, head)
        entry = cls(path, None, origin)
        rec, m = entry._record_from_manifest()
        if m is None:
            return None
        entry._manifest, entry._record = m, rec
        return entry

    def __repr__(self) -> str:
        return f"Entry({str(self.path)!r}, origin={str(self.origin)!r})"

    # -- what is recorded ----------------------------------------------------------------------
    @property
    def manifest(self) -> Manifest:
        """The full manifest (dependencies included), parsed on first use."""
        if self._manifest is None:
            self._manifest = read_manifest(self.path)
            if self._manifest is None:
                raise KernelCacheError(f"cache entry {self.path}: manifest.json is missing or unreadable")
        return self._manifest

    @property
    def head(self) -> Manifest:
        """The manifest for admission (dependency lists empty when it came from the hit record)."""
        return self._head if self._head is not None else self.manifest

    @property
    def record(self) -> "deprecord.HitRecord | None":
        """The packed dependency record (None only for a manifest that cannot be packed)."""
        if self._record is None:
            self._record = deprecord.load(self.path, MANIFEST) or self._record_from_manifest()[0]
        return self._record

    def _record_from_manifest(self) -> "tuple[deprecord.HitRecord | None, Manifest | None]":
        """Parse manifest.json once (an entry of an older version, or a copied one) and write its
        hit record where the entry is writable, folding in an older version's depstat.json."""
        read = self._read_manifest()
        if read is None:
            return None, None
        data, mstat, parsed = read
        m = Manifest.from_dict(parsed)
        if m is None:
            return None, None
        rec = deprecord.HitRecord.from_manifest(parsed, data, mstat, self._legacy_stat_cache())
        if rec is not None and not self.read_only:
            deprecord.save(self.path, rec)
        return rec, m

    def _read_manifest(self) -> "tuple[bytes, tuple, Any] | None":
        """manifest.json's bytes, the stat they were read under (binds the hit record) and the parse."""
        path = self.path / MANIFEST
        try:
            data, st = bounded.read_regular(path)  # a root's manifest: a FIFO, device or huge file refused
            return data, stat_fields(st), bounded.loads(data, str(path))
        except (OSError, ValueError):
            return None

    @property
    def so_path(self) -> Path:
        return self.path / self.head.so_name

    @property
    def entry_id(self) -> str:
        return self.head.entry_id

    @property
    def read_only(self) -> bool:
        return self.origin == Place.PREBUILT

    # -- re-validated stats --------------------------------------------------------------------
    def _legacy_stat_cache(self) -> dict:
        try:
            cache = bounded.loads(bounded.read_regular(self.path / DEPSTAT)[0], DEPSTAT)
        except (OSError, ValueError):
            return {}
        return cache if isinstance(cache, dict) else {}

    def stat_cache(self) -> dict[str, list[int]]:
        """Stats re-validated since the build: the binary's (``binary:<so name>``) once its
        sha256 was verified; dependency stats live in the hit record's array."""
        rec = self.record
        if rec is None:
            return self._legacy_stat_cache()
        if not any(rec.binary_stamp):
            return {}
        return {f"binary:{self.head.so_name}": list(rec.binary_stamp)}

    def save_stat_cache(self, refreshed: dict[str, list[int]]) -> None:
        """Remember re-validated stats so the next process trusts them without hashing."""
        if self.read_only or not refreshed:
            return
        rec = self.record
        if rec is None:
            self._save_legacy_stat_cache(refreshed)
            return
        stamp = refreshed.get(f"binary:{self.head.so_name}")
        deps = {k: v for k, v in refreshed.items() if not k.startswith("binary:")}
        self._record = rec.refreshed_by(deps, tuple(stamp) if stamp else None)
        deprecord.save(self.path, self._record)

    def rederive_record(self, refreshed: dict[str, list[int]]) -> None:
        """Derive the hit record again from the manifest (an installed package was reinstalled:
        its headers were verified by bytes; the trust in it is checked anew against its RECORD)."""
        rec = self.record
        if self.read_only or rec is None:
            return
        read = self._read_manifest()
        if read is None:
            return
        data, mstat, parsed = read
        stats = {**rec.dep_stats(), **refreshed}
        if any(rec.binary_stamp):
            stats[f"binary:{self.head.so_name}"] = list(rec.binary_stamp)
        new = deprecord.HitRecord.from_manifest(parsed, data, mstat, stats)
        if new is not None:
            self._record = new
            deprecord.save(self.path, new)

    def _save_legacy_stat_cache(self, refreshed: dict[str, list[int]]) -> None:
        cache = self._legacy_stat_cache()
        cache.update(refreshed)
        tmp = self.path / f".{DEPSTAT}.{os.getpid()}.{uuid.uuid4().hex[:6]}"
        try:
            tmp.write_text(json.dumps(cache))
            os.replace(tmp, self.path / DEPSTAT)
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass

    def touch_used(self) -> None:
        if self.read_only:
            return
        try:
            (self.path / USED).touch()
        except OSError:
            pass

    def last_used(self) -> float:
        return last_used(self.path)


def last_used(path: Path) -> float:
    for p in (path / USED, path / MANIFEST):
        try:
            return p.stat().st_mtime
        except OSError:
            continue
    return 0.0


def dir_size(path: Path) -> int:
    total = 0
    try:
        with os.scandir(path) as it:
            for e in it:
                try:
                    total += e.stat(follow_symlinks=False).st_size
                except OSError:
                    pass
    except OSError:
        pass
    return total


def fsync_dir(path: Path) -> None:
    """Make a rename or link in ``path`` durable (best effort: some filesystems refuse)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
