"""Objects in and out of the drop-in: link-only inputs keyed by their bytes, object outputs.

Inputs: ``build(name, sources=["a.o", "b.o"])`` (tvm-ffi's compile-to-object, embed, link flow)
is a normal cache entry. Each ``.o``/``.obj``/``.a`` is linked from a copy in a directory named
by its bytes, so the link command line (part of the key) changes whenever an object does: a
replaced object is a miss, never a stale hit. kernelcache keys files under a root, so a
link-only build also compiles one generated, empty translation unit (``kc_link_only.cc``).
Static archives are linked whole (``--whole-archive``): the module exports what they hold.

Outputs: an object (``output="x.o"``) cannot be loaded, hence not validated; tvm-ffi's own
builder compiles it fresh on every call, in a directory named by the call's inputs (under a
lock), so the same inputs give the same path and the same bytes, and nothing piles up.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..dropin import generated as inline_sources
from . import _args

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings

LINK_ONLY_FILE = "kc_link_only.cc"
_LINK_ONLY_SOURCE = b"// kernelcache.tvm_ffi: a link-only module; its code is in the linked objects.\n"


def link_inputs(inputs: list[Path], settings: "Settings") -> list[str]:
    """Linker arguments for pre-built inputs, each a copy whose directory names its bytes."""
    out: list[str] = []
    for obj in inputs:
        where = inline_sources.materialize(settings.cache_dir, "_objects", {obj.name: obj.read_bytes()})[0]
        path = str(where / obj.name)
        if obj.suffix.lower() in _args.ARCHIVE_SUFFIXES:
            out += ["-Wl,--whole-archive", path, "-Wl,--no-whole-archive"]
        else:
            out.append(path)
    return out


def link_only_root(settings: "Settings", name: str) -> tuple[Path, bool]:
    """The root holding the one generated source of a link-only module (and: created now?)."""
    return inline_sources.materialize(settings.cache_dir, name, {LINK_ONLY_FILE: _LINK_ONLY_SOURCE})


def _digest(fn_name: str, name: str, output: str, kwargs: dict[str, Any]) -> str:
    import json

    def enc(v: Any) -> Any:
        if isinstance(v, (bytes, bytearray)):
            return hashlib.sha256(bytes(v)).hexdigest()
        if isinstance(v, dict):
            return {str(k): enc(x) for k, x in sorted(v.items())}
        if isinstance(v, (list, tuple)):
            return [enc(x) for x in v]
        return v if v is None or isinstance(v, (bool, int, float)) else str(v)

    blob = json.dumps([fn_name, name, output, enc(kwargs), os.getcwd()], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def atomic_copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.kc-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def build_object(original: Callable[..., str], name: str, build_directory: str | None, output: str,
                 settings: "Settings", **kwargs: Any) -> str:
    """An object output, compiled now by tvm-ffi's builder; the path returned holds it.

    Without ``build_directory`` the object stays at ``<cache>/v1/dropin/objects/<name>-<inputs>/``
    (one directory per distinct call, reused, never one per call); with it, the object is moved
    there (atomic) and the private directory removed.
    """
    from contextlib import nullcontext

    from filelock import FileLock

    from ..host import lockdir

    digest = _digest(getattr(original, "__name__", "build"), name, output, kwargs)
    # A lock dir that is not private (kernelcache.host.lockdir) is not used: this call then works in
    # a directory of its own instead of the shared one the lock guards (one per call, not reused).
    locked = lockdir.prepare(settings.lock_dir) is None
    alone = "" if locked else f"-{os.getpid()}-{os.urandom(4).hex()}"
    home = settings.layout.dropin_objects / f"{_args.spec_name(name)}-{digest}{alone}"
    home.mkdir(parents=True, exist_ok=True)
    with FileLock(str(settings.lock_dir / f"dropin-object-{digest}.lock")) if locked else nullcontext():
        scratch = home / "build"
        shutil.rmtree(scratch, ignore_errors=True)  # fresh: never ninja's mtime-based reuse
        scratch.mkdir()
        try:
            built = Path(original(name, build_directory=str(scratch), output=output, **kwargs))
            kept = home / built.name
            os.replace(built, kept)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if build_directory is None:
            return str(kept)
        dest = Path(build_directory).expanduser().resolve() / kept.name
        atomic_copy(kept, dest)
        shutil.rmtree(home, ignore_errors=True)
        return str(dest)
