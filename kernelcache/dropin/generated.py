"""Generated sources (drop-ins' inline code), written content-addressed under the cache.

Why files at all: the loader keys *files under a root* (root-relative names and bytes), so the
strings a caller passes to ``load_inline`` become files in ``<cache>/v1/inline/<name>/<digest>/``
(``Layout.inline_dir``), the digest covering every file's name and bytes. The directory appears
by one rename and its bytes are compared on every call (a few KB), so a damaged or half-written
file is rewritten, never built. Shared by every drop-in (tvm-ffi, torch, FlashInfer's snapshots).
"""
from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from ..base.layout import Layout


def _digest(files: Mapping[str, bytes]) -> str:
    h = hashlib.sha256(b"kernelcache inline v1\0")
    for fname in sorted(files):
        data = files[fname]
        h.update(f"{len(fname)}:{fname}:{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()


def _matches(directory: Path, files: Mapping[str, bytes]) -> bool:
    try:
        for fname, data in files.items():
            p = directory / fname
            if p.stat().st_size != len(data) or p.read_bytes() != data:
                return False
    except OSError:
        return False
    return True


def _inline_base(cache_dir: Path, name: str) -> Path:
    """``<cache>/v1/inline/<name>``; a private temp dir when the cache cannot be written.

    The directory itself is never part of the key (only names relative to it and bytes), so
    the fallback keys exactly like the cache location; it only matters for read-only caches.
    """
    base = Layout(cache_dir).inline_dir(name)
    try:
        base.mkdir(parents=True, exist_ok=True)
        if os.access(base, os.W_OK):
            return base
    except OSError:
        pass
    import tempfile

    base = Path(tempfile.gettempdir()) / f"kernelcache-{os.getuid()}" / "inline" / name
    base.mkdir(parents=True, exist_ok=True)
    return base


def materialize(cache_dir: Path, name: str, files: Mapping[str, bytes]) -> tuple[Path, bool]:
    """The directory holding exactly ``files``, and whether this call created it.

    Created whole by one rename if absent or damaged. The flag lets a call that fails (or may
    not build) remove what it wrote, so failed calls leave no sources behind (:func:`discard`).
    """
    base = _inline_base(cache_dir, name)
    final = base / _digest(files)[:32]
    if _matches(final, files):
        return final, False
    for _attempt in range(3):
        tmp = base / f".tmp.{os.getpid()}.{os.urandom(4).hex()}"
        tmp.mkdir()
        try:
            for fname, data in files.items():
                (tmp / fname).write_bytes(data)
            try:
                os.rename(tmp, final)
                return final, True
            except OSError:
                pass  # someone else's directory is there: theirs if good, else set it aside
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        if _matches(final, files):
            return final, False
        try:
            os.rename(final, base / f".damaged.{os.getpid()}.{os.urandom(4).hex()}")
        except OSError:
            pass
    raise OSError(f"kernelcache: could not write the inline sources of {name!r} under {base}")


def discard(directory: Path) -> None:
    """Remove a generated source directory (and its name directory once empty)."""
    shutil.rmtree(directory, ignore_errors=True)
    try:
        directory.parent.rmdir()  # only when no other version of this module is left
    except OSError:
        pass
