"""``load_inline``'s generated sources, written content-addressed under the cache.

The loader keys *files under a root* (their bytes and root-relative names), so the strings
become files in ``<cache>/v1/inline/torch_<name>/<digest>/`` (``Layout.inline_dir``), the digest
covering every file's name and bytes. The directory appears by one rename and its bytes are
compared on every call (a few KB), so a damaged or half-written file is rewritten, never built.
"""
from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path

from ..layout import Layout


def _digest(files: Mapping[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(len(name).to_bytes(8, "little") + name.encode())
        h.update(len(files[name]).to_bytes(8, "little") + files[name])
    return h.hexdigest()


def _matches(d: Path, files: Mapping[str, bytes]) -> bool:
    try:
        return sorted(p.name for p in d.iterdir()) == sorted(files) and all(
            (d / n).read_bytes() == data for n, data in files.items())
    except OSError:
        return False


def materialize(cache_dir: Path, name: str, files: Mapping[str, bytes]) -> Path:
    """The directory holding exactly ``files``; created whole by one rename if absent or damaged."""
    base = Layout(cache_dir).inline_dir(name)
    final = base / _digest(files)[:32]
    if _matches(final, files):
        return final
    base.mkdir(parents=True, exist_ok=True)
    for _attempt in range(3):
        tmp = base / f".tmp.{os.getpid()}.{secrets.token_hex(4)}"
        tmp.mkdir()
        try:
            for fname, data in files.items():
                (tmp / fname).write_bytes(data)
            try:
                os.rename(tmp, final)
                return final
            except OSError:
                pass  # another process's directory is there: theirs if good, else set it aside
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if _matches(final, files):
            return final
        try:
            os.rename(final, base / f".damaged.{os.getpid()}.{secrets.token_hex(4)}")
        except OSError:
            pass
    raise OSError(f"kernelcache.cpp_extension: could not write the inline sources of {name!r} under {base}")
