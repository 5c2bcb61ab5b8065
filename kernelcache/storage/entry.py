"""One entry on local disk: a directory with the binary, its manifest and bookkeeping files."""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..layout import DEPSTAT, USED
from ..manifest import FILENAME as MANIFEST, Manifest


@dataclass
class Entry:
    """An entry directory and its parsed manifest. ``origin``: local | prebuilt | fetched."""

    path: Path
    manifest: Manifest
    origin: str = "local"

    @property
    def so_path(self) -> Path:
        return self.path / self.manifest.so_name

    @property
    def entry_id(self) -> str:
        return self.manifest.entry_id

    @property
    def read_only(self) -> bool:
        return self.origin == "prebuilt"

    def stat_cache(self) -> dict[str, list[int]]:
        try:
            return json.loads((self.path / DEPSTAT).read_text())
        except (OSError, ValueError):
            return {}

    def save_stat_cache(self, refreshed: dict[str, list[int]]) -> None:
        """Remember re-validated stats so the next process trusts them without hashing."""
        if self.read_only:
            return
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
