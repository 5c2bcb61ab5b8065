"""FlashInfer's generated sources, snapshotted content-addressed before they are compiled.

FlashInfer renders a module's ``.cu`` files and ``*_config.inc`` into its workspace's
``generated/`` directory when the spec is created, unlocked and not atomically (other ranks
may be rewriting them while this one reads). The route compiles a private, immutable copy:
``<cache>/v1/inline/fi_<name>/<digest>/`` (:mod:`kernelcache.dropin.generated`), appearing by
one rename, whose digest covers every file's name and bytes. So the workspace's path is no part
of the key (a fresh or moved workspace rendering the same bytes hits), and a file rewritten
during the build cannot mix into it: the next call snapshots the new bytes, a new key.

A file read empty or changing while read is read again (a writer between truncate and write).
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

_QUOTED = re.compile(rb'^\s*#\s*include\s*"([^"/\\]+)"', re.M)
_ATTEMPTS = 50


class SnapshotError(OSError):
    """A generated source could not be read whole (kept empty or changing while read)."""


def _read_settled(path: Path) -> bytes:
    """The file's bytes, read when its size and mtime hold still across the read and it is not empty."""
    for _ in range(_ATTEMPTS):
        before = os.stat(path)
        data = path.read_bytes()
        after = os.stat(path)
        same = (before.st_size, before.st_mtime_ns, before.st_ino) == (after.st_size, after.st_mtime_ns, after.st_ino)
        if data and same and len(data) == after.st_size:
            return data
        time.sleep(0.02)
    raise SnapshotError(f"kernelcache.flashinfer: generated source {path} stayed empty or kept changing")


def files_of(generated: list[Path]) -> dict[str, bytes]:
    """Name -> bytes of the generated sources and the files beside them they include by name."""
    files: dict[str, bytes] = {}
    for src in generated:
        todo = [src]
        while todo:
            p = todo.pop()
            if p.name in files:
                continue
            files[p.name] = _read_settled(p)
            for inc in _QUOTED.findall(files[p.name]):
                q = p.parent / inc.decode(errors="replace")
                if q.name not in files and q.is_file():
                    todo.append(q)
    return files


def is_generated(path: Path, gen_dir: Path) -> bool:
    try:
        Path(os.path.abspath(path)).relative_to(os.path.abspath(gen_dir))
        return True
    except ValueError:
        return False
