"""Cache root layout, lookup, atomic publish, quarantine, listing and pruning.

Layout (under ``<root>/v1``)::

    entries/<name>/<key1[:32]>/<entry_id>/{<name>.so, manifest.json, build.log, used}
    tmp/<key1[:16]>.<host>.<pid>.<rand>/     private build dirs (same filesystem: rename is atomic)
    quarantine/<entry_id>.<time>/            rejected entries, kept for post-mortems
    trash/                                   evicted entries before deletion

Entries are immutable and appear by one directory rename, whole or not at all. Several entries
may share a level-1 key (one per recorded header set), so flipping between two header
versions never thrashes. Eviction renames first, so a process that has the ``.so`` mapped is
unaffected.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .config import cache_dir

LAYOUT = "v1"
MANIFEST = "manifest.json"
USED = "used"
DEPSTAT = "depstat.json"
TMP_MAX_AGE_S = 6 * 3600


def layout_root(root: Path | None = None) -> Path:
    return (root or cache_dir()) / LAYOUT


def key_dir(name: str, key1: str, root: Path | None = None) -> Path:
    return layout_root(root) / "entries" / name / key1[:32]


@dataclass
class Entry:
    path: Path
    manifest: dict
    prebuilt: bool = False

    @property
    def so_path(self) -> Path:
        return self.path / self.manifest["so_name"]

    @property
    def entry_id(self) -> str:
        return self.manifest["entry_id"]

    def stat_cache(self) -> dict[str, list[int]]:
        try:
            return json.loads((self.path / DEPSTAT).read_text())
        except (OSError, ValueError):
            return {}

    def save_stat_cache(self, refreshed: dict[str, list[int]]) -> None:
        """Remember re-validated stats so the next process trusts them without hashing."""
        cache = self.stat_cache()
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
        try:
            (self.path / USED).touch()
        except OSError:
            pass

    def last_used(self) -> float:
        for p in (self.path / USED, self.path / MANIFEST):
            try:
                return p.stat().st_mtime
            except OSError:
                continue
        return 0.0

    def size_bytes(self) -> int:
        total = 0
        for p in self.path.iterdir():
            try:
                total += p.stat().st_size
            except OSError:
                pass
        return total


def read_entry(path: Path, prebuilt: bool = False) -> Entry | None:
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or "entry_id" not in manifest or "so_name" not in manifest:
        return None
    return Entry(path=path, manifest=manifest, prebuilt=prebuilt)


def candidates(name: str, key1: str, root: Path | None = None, prebuilt: bool = False) -> list[Entry]:
    """Entries recorded under a level-1 key, most recently used first."""
    kd = key_dir(name, key1, root)
    try:
        dirs = [p for p in kd.iterdir() if p.is_dir()]
    except OSError:
        return []
    entries = [e for e in (read_entry(p, prebuilt) for p in dirs) if e is not None]
    entries.sort(key=lambda e: -e.last_used())
    return entries


def all_entries(root: Path | None = None, name: str | None = None, prebuilt: bool = False) -> list[Entry]:
    base = layout_root(root) / "entries"
    out = []
    try:
        names = [name] if name else sorted(p.name for p in base.iterdir())
    except OSError:
        return []
    for n in names:
        try:
            kds = list((base / n).iterdir())
        except OSError:
            continue
        for kd in kds:
            try:
                for ed in kd.iterdir():
                    e = read_entry(ed, prebuilt)
                    if e is not None:
                        out.append(e)
            except OSError:
                continue
    return out


# -- private build dirs and publish --------------------------------------------------------
def new_tmp_dir(key1: str, root: Path | None = None) -> Path:
    base = layout_root(root) / "tmp"
    base.mkdir(parents=True, exist_ok=True)
    d = base / f"{key1[:16]}.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    d.mkdir()
    return d


def private_copy(so_path: Path, root: Path | None = None) -> Path:
    """Copy a .so into a per-process dir (swept when this process is gone)."""
    base = layout_root(root) / "tmp"
    d = base / f"reload.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    dest = d / so_path.name
    shutil.copy2(so_path, dest)
    return dest


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def publish(tmp: Path, name: str, key1: str, eid: str, root: Path | None = None) -> tuple[Path, bool]:
    """Rename a finished build dir into place. Returns (entry path, won the race)."""
    for p in tmp.iterdir():  # what an entry needs to be whole after a crash: binary + manifest
        if p.is_file() and (p.suffix == ".so" or p.name == MANIFEST):
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    _fsync_dir(tmp)
    dest = key_dir(name, key1, root) / eid
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, dest)
    except OSError as e:
        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        # Lost the race to an identical build. Use the winner's entry if it is visible and
        # complete; otherwise (network filesystems) keep and use our own copy.
        if read_entry(dest) is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            return dest, False
        return tmp, False
    _fsync_dir(dest.parent)
    return dest, True


def quarantine(entry: Entry, reason: str) -> Path | None:
    """Move a rejected entry aside (never delete: a running process may have it mapped)."""
    if entry.prebuilt:
        return None
    qdir = layout_root() / "quarantine"
    qdir.mkdir(parents=True, exist_ok=True)
    dest = qdir / f"{entry.path.name}.{int(time.time())}.{uuid.uuid4().hex[:6]}"
    try:
        os.rename(entry.path, dest)
    except OSError:
        return None
    try:
        (dest / "QUARANTINE_REASON").write_text(reason + "\n")
    except OSError:
        pass
    return dest


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_tmp(root: Path | None = None, max_age_s: float = TMP_MAX_AGE_S) -> int:
    """Remove build dirs of dead builders on this host (and very old ones anywhere)."""
    base = layout_root(root) / "tmp"
    host = socket.gethostname()
    removed = 0
    try:
        dirs = list(base.iterdir())
    except OSError:
        return 0
    now = time.time()
    for d in dirs:
        parts = d.name.split(".")
        try:
            age = now - d.stat().st_mtime
        except OSError:
            continue
        dead = False
        if len(parts) >= 4 and parts[-3] == host and parts[-2].isdigit():
            dead = not _pid_alive(int(parts[-2]))
        if dead or age > max_age_s:
            shutil.rmtree(d, ignore_errors=True)
            removed += 1
    return removed


def evict(entry: Entry, root: Path | None = None) -> None:
    trash = layout_root(root) / "trash"
    trash.mkdir(parents=True, exist_ok=True)
    dest = trash / f"{entry.path.name}.{uuid.uuid4().hex[:8]}"
    os.rename(entry.path, dest)
    shutil.rmtree(dest, ignore_errors=True)


def prune(max_bytes: int | None = None, max_age_s: float | None = None, root: Path | None = None) -> list[Entry]:
    """Evict least-recently-used entries beyond a size cap and/or older than an age."""
    entries = all_entries(root)
    entries.sort(key=lambda e: e.last_used())  # oldest first
    now = time.time()
    evicted: list[Entry] = []
    keep: list[Entry] = []
    for e in entries:
        if max_age_s is not None and now - e.last_used() > max_age_s:
            evicted.append(e)
        else:
            keep.append(e)
    if max_bytes is not None:
        sizes = {id(e): e.size_bytes() for e in keep}
        total = sum(sizes.values())
        for e in list(keep):
            if total <= max_bytes:
                break
            total -= sizes[id(e)]
            evicted.append(e)
            keep.remove(e)
    for e in evicted:
        try:
            evict(e, root)
        except OSError:
            pass
    sweep_tmp(root)
    return evicted


def clean(root: Path | None = None) -> None:
    shutil.rmtree(layout_root(root), ignore_errors=True)
