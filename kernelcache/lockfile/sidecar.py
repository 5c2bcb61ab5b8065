"""Generated sources next to the lock: ``<lock>.sources/<sha256>``, so a runner without the
recording cache rebuilds foreign kernels.

Why a sidecar: a drop-in's kernel (tvm-ffi/torch ``load_inline``, FlashInfer's and SGLang's
generated modules) compiles sources that exist only in the recording cache
(``${KERNELCACHE_DIR}/v1/inline/<name>/<digest>/``), so its spec alone cannot be rebuilt on a CPU
runner with an empty cache. The recorder copies each file of such a root (and only those: files
of the user's repository and of installed packages are referenced by path and digest) into a
content-addressed directory beside the lock (stable names, deduplicated, committed with it) and
lists them in the block (``rebuild.generated``: root-relative name -> ``sha256:<hex>``);
``build --lock``, ``lock check``/``update`` and ``preload`` write them back into this host's cache
at the recorded place before using the spec. Replaying the foreign call instead (FlashInfer's
``MODULE:FUNCTION(args)``) would need the foreign package's generator to give the same bytes on
another host; the bytes themselves need nothing but the lock.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ..base.errors import KernelCacheError
from .paths import CACHE

if TYPE_CHECKING:  # pragma: no cover
    from .format import KernelLock
    from .paths import Anchors

MAX_FILES = 256  # a generated root is a handful of files; more is not a drop-in's snapshot


def directory(lock_path: str | os.PathLike[str]) -> Path:
    """``<lock>.sources``: where the lock's generated sources live."""
    p = Path(os.path.abspath(lock_path))
    return p.with_name(p.name + ".sources")


def is_generated(root_text: str) -> bool:
    """Is a block's root (as the lock writes it) a drop-in's generated root in the cache?"""
    return root_text == CACHE or root_text.startswith(CACHE + "/")


def _files(root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in filenames:
            p = Path(dirpath) / f
            if p.is_file() and not f.startswith("."):
                out[p.relative_to(root).as_posix()] = p
    if len(out) > MAX_FILES:
        raise KernelCacheError(f"{root}: {len(out)} files, more than a generated source root holds ({MAX_FILES})")
    return dict(sorted(out.items()))


def save(root: str | os.PathLike[str], lock_path: str | os.PathLike[str]) -> dict[str, str]:
    """Copy every file of the generated root ``root`` into the sidecar (content-addressed, each
    written once by a rename); returns ``{root-relative name: "sha256:<hex>"}``."""
    d = directory(lock_path)
    out: dict[str, str] = {}
    try:
        d.mkdir(parents=True, exist_ok=True)
        for rel, p in _files(Path(root)).items():
            data = p.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            out[rel] = "sha256:" + digest
            dest = d / digest
            if not dest.is_file():
                tmp = d / f".{digest}.{os.getpid()}.{os.urandom(4).hex()}"
                tmp.write_bytes(data)
                os.replace(tmp, dest)
    except OSError as e:
        raise KernelCacheError(f"cannot write the lock's generated sources into {d}: {e.strerror or e}") from None
    return out


def _holds(dest: Path, files: dict[str, str]) -> bool:
    try:
        return all("sha256:" + hashlib.sha256((dest / rel).read_bytes()).hexdigest() == want
                   for rel, want in files.items())
    except OSError:
        return False


def restore(k: "KernelLock", a: "Anchors", lock_path: str | os.PathLike[str]) -> bool:
    """Write ``k``'s generated sources from the sidecar back to its recorded root on this host
    (``${KERNELCACHE_DIR}/...``) when they are not there; True when the root now holds them.
    A sidecar file missing or not its digest raises :class:`KernelCacheError` naming it."""
    files = k.rebuild.get("generated")
    if not isinstance(files, dict) or not files or not is_generated(k.root):
        return False
    dest = a.from_lock(k.root)
    if _holds(dest, files):
        return True
    side = directory(lock_path)
    blobs: dict[str, bytes] = {}
    for rel, want in sorted(files.items()):
        algo, _, hexd = str(want).partition(":")
        if algo != "sha256" or not hexd or "/" in hexd or rel.startswith("/") or ".." in rel.split("/"):
            raise KernelCacheError(f"kernel {k.name!r}: malformed generated source {rel!r}: {want!r}")
        try:
            data = (side / hexd).read_bytes()
        except OSError as e:
            raise KernelCacheError(f"kernel {k.name!r}: its generated source {rel} is not in {side} "
                                   f"({e.strerror or e}): commit the lock's .sources directory with it") from None
        if hashlib.sha256(data).hexdigest() != hexd:
            raise KernelCacheError(f"kernel {k.name!r}: {side / hexd} is not the bytes its name says")
        blobs[rel] = data
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.parent / f".tmp.{os.getpid()}.{os.urandom(4).hex()}"
        for rel, data in blobs.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        try:
            os.rename(tmp, dest)
        except OSError:  # another process restored it first (or a damaged one is there)
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        raise KernelCacheError(f"kernel {k.name!r}: cannot write its generated sources to {dest}: "
                               f"{e.strerror or e}") from None
    return _holds(dest, files)
