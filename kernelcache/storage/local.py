"""The writable cache directory: layout, lookup order, atomic publish, quarantine, prune.

The layout itself (paths) is owned by ``kernelcache.base.layout``.

Entries are immutable and appear by one directory rename, whole or not at all. Several entries
may share a level-1 key (one per recorded header set), so flipping between two header
versions never thrashes. Cost does not grow with the cache: lookup tries the last hit first
and reads further entries only when that one does not validate, newest first, each through its
packed hit record (``kernelcache.entry.deprecord``), not its JSON manifest; ``ls`` and ``prune`` work
from paths and stats, never parsing manifests.
"""
from __future__ import annotations

import errno
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

from ..base import basis
from ..base.errors import CacheRemovedError, RemovalError, UnsafeDirectoryError
from ..base.events import Place
from ..base.layout import BUILT, FETCHED, QUARANTINE, RECENT, Layout
from ..base.records import FrozenRecord
from ..base.settings import Settings
from ..entry import manifest as manifest_mod
from ..host import dir_trust
from .entry import MANIFEST, Entry, dir_size, fsync_dir, last_used

TMP_MAX_AGE_S = 6 * 3600


class EntryInfo(FrozenRecord):
    """What ``ls`` and ``prune`` need, read from paths and stats only."""

    path: Path
    area: str  # entries | fetched | quarantine
    name: str
    key: str  # key1[:32] (entries) or skey[:32] (fetched)
    entry_id: str
    size: int
    last_used: float


class LocalStore:
    """The cache dir of one ``Settings`` (cheap to construct; holds no open files)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.layout: Layout = settings.layout
        self.root = self.layout.root
        self.check_dirs()

    def check_dirs(self, settled: bool = False) -> None:
        """Others must not write the cache dir (``dir_trust``; looked at once per process, and again
        by a load that created it: ``settled``, with the recall area made first so that the
        stats the check notes are those the load leaves behind)."""
        fix = "Make it yours alone (chmod go-w, chown) or point KERNELCACHE_DIR elsewhere."
        if settled:
            os.makedirs(self.layout.recall, exist_ok=True)
        why = dir_trust.check([self.layout.base, self.root], "cache dir", fix, strict=self.settings.strict_dirs,
                              again=settled)
        if why is not None and self.settings.strict_dirs:
            raise UnsafeDirectoryError(dir_trust.refusal(self.layout.base, "cache dir", why, fix))

    # -- paths -------------------------------------------------------------------------------
    def key_dir(self, name: str, key1: str) -> Path:
        return self.layout.key_dir(name, key1)

    def fetched_dir(self, name: str, skey: str) -> Path:
        return self.layout.fetched_dir(name, skey)

    # -- lookup ------------------------------------------------------------------------------
    def candidates(self, name: str, key1: str) -> Iterator[Entry]:
        """Entries under a level-1 key: the last hit first, then the others newest first.

        A generator: the caller stops at the first valid one, so 300 sibling entries (header
        versions accumulated over months) cost one manifest parse, not 300.
        """
        yield from _iter_dir(self.key_dir(name, key1), Place.LOCAL)

    def published_since(self, name: str, key1: str) -> Callable[[], bool]:
        """A test, cheap enough to poll (one directory listing), of whether an entry was published
        under ``key1`` after this call: what a process waiting for another's build looks for."""
        kd = self.key_dir(name, key1)
        before = _listing(kd)
        return lambda: bool(_listing(kd) - before)

    def fetched(self, name: str, skey: str) -> Iterator[Entry]:
        """Fleet entries fetched earlier, checked like prebuilt ones (the builder was another host)."""
        yield from _iter_dir(self.fetched_dir(name, skey), Place.FETCHED)

    def remember_hit(self, entry: Entry) -> None:
        """Make this entry the first candidate next time (written only when it changes)."""
        if entry.read_only:
            return
        hint = entry.path.parent / RECENT
        try:
            if hint.read_text() == entry.path.name:
                return
        except OSError:
            pass
        tmp = entry.path.parent / f"{RECENT}.{os.getpid()}.{uuid.uuid4().hex[:6]}"
        try:
            tmp.write_text(entry.path.name)
            os.replace(tmp, hint)
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass

    def entries(self, name: str | None = None) -> list[Entry]:
        """Every entry with a parsed manifest (``verify``, ``explain``): slow by design."""
        out = []
        for info in self.infos(name):
            m = manifest_mod.read(info.path)
            if m is not None:
                out.append(Entry(info.path, m, Place.LOCAL if info.area == BUILT else Place.FETCHED))
        return out

    def infos(self, name: str | None = None) -> list[EntryInfo]:
        """Every entry from paths and stats only (``ls``, ``prune``: 10,000 entries in well under 2 s)."""
        out: list[EntryInfo] = []
        for area in (BUILT, FETCHED):
            base = self.layout.area(area)
            for n in ([name] if name else _names(base)):
                for kd in _subdirs(base / n):
                    for ed in _subdirs(kd):
                        if (ed / MANIFEST).exists():
                            out.append(EntryInfo(ed, area, n, kd.name, ed.name, dir_size(ed), last_used(ed)))
        return out

    # -- private dirs and publish ------------------------------------------------------------
    def new_tmp_dir(self, tag: str) -> Path:
        base = self.layout.tmp
        base.mkdir(parents=True, exist_ok=True)
        d = base / f"{tag[:16]}.{manifest_mod.this_host()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        d.mkdir()
        return d

    def private_copy(self, so_path: Path) -> Path:
        """Copy a .so into a per-process dir (swept when this process is gone)."""
        d = self.new_tmp_dir("reload")
        dest = d / so_path.name
        shutil.copy2(so_path, dest)
        return dest

    def publish(self, tmp: Path, name: str, key1: str, eid: str) -> tuple[Path, bool]:
        """Rename a finished build dir into place. Returns (entry path, won the race). Raises
        CacheRemovedError when the build dir is gone (``kernelcache clean`` meanwhile)."""
        try:
            return _publish(tmp, self.key_dir(name, key1) / eid)
        except FileNotFoundError as e:
            if os.path.isdir(tmp):
                raise
            raise CacheRemovedError(name, str(tmp)) from e

    def publish_fetched(self, tmp: Path, name: str, skey: str, eid: str) -> tuple[Path, bool]:
        return _publish(tmp, self.fetched_dir(name, skey) / eid)

    def quarantine(self, entry: Entry, reason: str) -> Path | None:
        """Move a rejected entry aside (never delete: a running process may have it mapped)."""
        if entry.read_only:
            return None
        qdir = self.layout.quarantine
        qdir.mkdir(parents=True, exist_ok=True)
        dest = qdir / f"{entry.path.name}.{int(time.time())}.{uuid.uuid4().hex[:6]}"
        try:
            os.rename(entry.path, dest)
        except OSError:
            return None
        basis.drop_under(entry.path)  # moved away by this load: no answer rests on it
        try:
            (dest / "QUARANTINE_REASON").write_text(reason + "\n")
        except OSError:
            pass
        return dest

    # -- housekeeping ------------------------------------------------------------------------
    def sweep_tmp(self, max_age_s: float = TMP_MAX_AGE_S, failed: list[tuple[Path, OSError]] | None = None) -> int:
        """Remove private dirs of dead builders on this host (and very old ones anywhere); the
        number removed. What could not be removed is added to ``failed`` (ignored without it:
        ``warm`` sweeps in passing)."""
        host = manifest_mod.this_host()
        removed = 0
        now = time.time()
        for d in _subdirs(self.layout.tmp):
            parts = d.name.split(".")
            try:
                age = now - d.stat().st_mtime
            except OSError:
                continue
            dead = len(parts) >= 4 and parts[-3] == host and parts[-2].isdigit() and not _pid_alive(int(parts[-2]))
            if dead or age > max_age_s:
                from .removal import rmtree  # housekeeping only: a load never imports it

                errors = rmtree(d)
                removed += not errors
                if failed is not None:
                    failed.extend(errors)
        return removed

    def evict(self, path: Path) -> None:
        """Rename first (a process with the .so mapped keeps running), then delete."""
        trash = self.layout.trash
        trash.mkdir(parents=True, exist_ok=True)
        dest = trash / f"{path.name}.{uuid.uuid4().hex[:8]}"
        os.rename(path, dest)
        shutil.rmtree(dest, ignore_errors=True)

    def quarantined(self) -> list[EntryInfo]:
        """Quarantined entries (area ``quarantine``), aged by when they were quarantined: the
        directory's mtime, which writing QUARANTINE_REASON into it sets."""
        out = []
        for d in _subdirs(self.layout.quarantine):
            m = manifest_mod.read(d)
            try:
                when = d.stat().st_mtime
            except OSError:
                continue
            out.append(EntryInfo(d, QUARANTINE, m.name if m else "?", m.key1[:32] if m else "",
                                 d.name.split(".")[0], dir_size(d), when))
        return out

    def prune(self, max_bytes: int | None = None, max_age_s: float | None = None) -> list[EntryInfo]:
        """Evict least-recently-used entries beyond a size cap and/or older than an age.

        Quarantined entries count too: they are removed by the age of their quarantine, and under
        the size cap before any live entry (nothing loads them again; they are kept only for a
        post-mortem).

        Returns what was evicted; raises RemovalError (with ``done``: what was evicted anyway)
        when anything could not be removed (a read-only cache, a full disk's trash, permissions).
        """
        quarantined = sorted(self.quarantined(), key=lambda i: i.last_used)
        infos = quarantined + sorted(self.infos(), key=lambda i: i.last_used)  # oldest first
        now = time.time()
        evicted = [i for i in infos if max_age_s is not None and now - i.last_used > max_age_s]
        keep = [i for i in infos if i not in evicted]
        if max_bytes is not None:
            total = sum(i.size for i in keep)
            while keep and total > max_bytes:
                victim = keep.pop(0)
                total -= victim.size
                evicted.append(victim)
        failed: list[tuple[Path, OSError]] = []
        done = []
        for info in evicted:
            try:
                self.evict(info.path)
                done.append(info)
            except FileNotFoundError:  # gone already (another prune)
                done.append(info)
            except OSError as e:
                failed.append((info.path, e))
        if max_age_s is not None:
            self._age_out_dropin(now - max_age_s, failed)
        self._drop_orphaned_recalls(failed)
        self.sweep_tmp(failed=failed)
        if failed:
            raise RemovalError("prune", failed, done)
        return done

    def _drop_orphaned_recalls(self, failed: list[tuple[Path, OSError]]) -> None:
        """Recalled-call memos (``recall/``) whose entry is gone, or that cannot be read: a memo
        of a live entry stays (it is rewritten whenever the full path answers that call)."""
        from ..base.warm_facts import read_file

        try:
            with os.scandir(self.layout.recall) as it:
                memos = [e.path for e in it if e.is_file(follow_symlinks=False)]
        except OSError:
            return
        for p in memos:
            rec = read_file(p)  # unreadable, another format, or its entry gone: no use
            if rec is None or not os.path.isdir(rec[3]):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    failed.append((Path(p), e))

    def _age_out_dropin(self, cutoff: float, failed: list[tuple[Path, OSError]]) -> None:
        """The tvm-ffi drop-in's generated sources (``inline/``) and output copies (``dropin/``):
        content-addressed and re-created on the next call, so an old one is simply removed."""
        for d in [*(g for n in _subdirs(self.layout.inline) for g in _subdirs(n)), *_subdirs(self.layout.dropin)]:
            try:
                if d.stat().st_mtime < cutoff:
                    self.evict(d)
            except FileNotFoundError:
                pass
            except OSError as e:
                failed.append((d, e))

    def clean(self) -> bool:
        """Remove the whole layout root (``kernelcache.storage.removal.remove_root``: renamed
        aside first, so builds running meanwhile retry in a fresh one); False when there was none."""
        from .removal import remove_root

        return remove_root(self.root)


# -- helpers -----------------------------------------------------------------------------------
def _listing(d: Path) -> set[str]:
    try:
        return set(os.listdir(d))
    except OSError:
        return set()


def _names(base: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(base) if e.is_dir())
    except OSError:
        return []


def _subdirs(d: Path) -> list[Path]:
    try:
        with os.scandir(d) as it:
            return [Path(e.path) for e in it if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _iter_dir(kd: Path, origin: Place) -> Iterator[Entry]:
    first = None
    try:
        first = (kd / RECENT).read_text().strip()
    except OSError:
        pass
    if first and "/" not in first:  # the last hit: no listing, one hit record read
        entry = Entry.open(kd / first, origin)
        if entry is not None:
            yield entry
    dirs = _subdirs(kd)
    rest = sorted((d for d in dirs if d.name != first), key=last_used, reverse=True)
    for d in rest:
        entry = Entry.open(d, origin)
        if entry is not None:
            yield entry


def _publish(tmp: Path, dest: Path) -> tuple[Path, bool]:
    for p in tmp.iterdir():  # what an entry needs to be whole after a crash: binary + manifest
        if p.is_file() and (p.suffix == ".so" or p.name == MANIFEST):
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fsync_dir(tmp)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, dest)
    except OSError as e:
        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        # Lost the race to an identical build. Use the winner's entry if it is visible and
        # complete; otherwise (network filesystems) keep and use our own copy.
        if manifest_mod.read(dest) is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            return dest, False
        return tmp, False
    fsync_dir(dest.parent)
    return dest, True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
