"""The kernel lock's records and their bytes: read, dump, merge-write under a file lock.

Why stable bytes: the lock is committed and reviewed like ``uv.lock``; re-recording an unchanged
app must give the identical file, and a diff must show one kernel's block per changed kernel.
So: JSON, keys sorted, one kernel per top-level block (``indent=1``), no timestamps, hosts or
paths of this machine (paths are lock-relative or anchored, ``kernelcache.lockfile.paths``).

Why a merge under a file lock: every rank and xdist worker of a job records into one file; each
writer reads what is there, adds its kernels (a kernel's arch records are merged, the rest of its
block replaced) and renames the result into place, one writer at a time.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..base.errors import KernelCacheError

FORMAT = 1
HOST_ARCH = "host"  # the arch label of a CPU kernel (no CUDA arch)
MAX_BYTES = 64 << 20


class LockFileError(KernelCacheError, ValueError):
    """A lock file that cannot be read: missing, not JSON, another format, a malformed block."""


@dataclass(frozen=True)
class ArchLock:
    """One kernel built for one arch label (``"9.0"``, ``"8.0,9.0"``, ``"host"`` for CPU)."""

    source_key: str  # toolchain-free: what a node without a compiler checks (source_key.py)
    source_inputs: dict[str, Any]  # what source_key hashes, in clear: drift is named from it
    key: str  # the level-1 key of the entry (this toolchain's build)
    binary_sha256: str  # the entry's binary
    toolchain: dict[str, str]  # tool -> its version line; tvm_ffi -> its version

    def to_json(self) -> dict[str, Any]:
        return {"binary_sha256": self.binary_sha256, "key": self.key, "source_inputs": self.source_inputs,
                "source_key": self.source_key, "toolchain": self.toolchain}

    @classmethod
    def from_json(cls, d: Mapping[str, Any], where: str) -> "ArchLock":
        try:
            return cls(source_key=str(d["source_key"]), source_inputs=dict(d["source_inputs"]), key=str(d["key"]),
                       binary_sha256=str(d["binary_sha256"]), toolchain={str(k): str(v) for k, v in
                                                                        dict(d["toolchain"]).items()})
        except (KeyError, TypeError, ValueError) as e:
            raise LockFileError(f"{where}: malformed arch record ({type(e).__name__}: {e})") from None


@dataclass(frozen=True)
class KernelLock:
    """One kernel: what rebuilds it, what it was built from, and per arch what was built.

    ``rebuild``: ``{"route": ..., "spec": {...}}`` always (the KernelSpec as data, paths
    lock-relative or anchored, ``paths.spec_to_data``); ``"ref": "module:callable"`` for a
    shipped kernel; ``"call": ...`` where a foreign route named its call (FlashInfer's
    ``MODULE:FUNCTION(args)``). ``inputs``: root-relative path -> ``"sha256:<hex>"`` (sources)
    or ``"xxh3:<hex>"`` (headers the compiler read under the root), content only."""

    name: str
    kind: str
    root: str  # the spec's root, lock-relative or anchored
    rebuild: dict[str, Any]
    inputs: dict[str, str]
    schema: dict[str, str | None]
    archs: dict[str, ArchLock] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"archs": {a: r.to_json() for a, r in sorted(self.archs.items())}, "inputs": dict(sorted(self.inputs.items())),
                "kind": self.kind, "name": self.name, "rebuild": self.rebuild, "root": self.root,
                "schema": dict(sorted(self.schema.items()))}

    @classmethod
    def from_json(cls, d: Mapping[str, Any], where: str) -> "KernelLock":
        try:
            name = str(d["name"])
            archs = {str(a): ArchLock.from_json(r, f"{where} kernel {name} arch {a}") for a, r in dict(d["archs"]).items()}
            return cls(name=name, kind=str(d["kind"]), root=str(d["root"]), rebuild=dict(d["rebuild"]),
                       inputs={str(k): str(v) for k, v in dict(d["inputs"]).items()},
                       schema={str(k): None if v is None else str(v) for k, v in dict(d["schema"]).items()},
                       archs=archs)
        except (KeyError, TypeError, ValueError) as e:
            raise LockFileError(f"{where}: malformed kernel block ({type(e).__name__}: {e})") from None

    def merged(self, newer: "KernelLock") -> "KernelLock":
        """``newer``'s block, keeping this block's records of the arch labels ``newer`` lacks
        (a job recorded on 9.0 and one on 10.0 give one block with both)."""
        return KernelLock(newer.name, newer.kind, newer.root, newer.rebuild, newer.inputs, newer.schema,
                          {**self.archs, **newer.archs})


@dataclass(frozen=True)
class LockFile:
    kernels: dict[str, KernelLock] = field(default_factory=dict)
    format: int = FORMAT

    def dumps(self) -> str:
        """The stable bytes: sorted keys, one kernel per block, a final newline."""
        data = {"format": self.format, "generator": "kernelcache",
                "kernels": {n: k.to_json() for n, k in sorted(self.kernels.items())}}
        return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=True) + "\n"

    def with_kernels(self, kernels: Iterable[KernelLock], replace: bool = False) -> "LockFile":
        """This lock plus ``kernels`` (merged per arch label; ``replace``: their blocks replaced whole)."""
        out = dict(self.kernels)
        for k in kernels:
            old = out.get(k.name)
            out[k.name] = k if old is None or replace else old.merged(k)
        return LockFile(out, self.format)


def loads(text: str | bytes, where: str = "lock file") -> LockFile:
    """A lock from its bytes; :class:`LockFileError` naming what is wrong."""
    from ..base import bounded

    try:
        data = bounded.loads(text, where, limit=MAX_BYTES)
    except ValueError as e:
        raise LockFileError(f"{where}: not a kernel lock file: {e}") from None
    if not isinstance(data, dict) or data.get("generator") != "kernelcache":
        raise LockFileError(f"{where}: not a kernel lock file (no \"generator\": \"kernelcache\")")
    if data.get("format") != FORMAT:
        raise LockFileError(f"{where}: lock format {data.get('format')!r}, this kernelcache reads {FORMAT} "
                            "(re-record it, or `kernelcache lock update`)")
    kernels = data.get("kernels")
    if not isinstance(kernels, dict):
        raise LockFileError(f"{where}: \"kernels\" must be an object")
    out = {}
    for name, block in kernels.items():
        if not isinstance(block, dict) or block.get("name") != name:
            raise LockFileError(f"{where}: kernel block {name!r} is malformed or names another kernel")
        out[name] = KernelLock.from_json(block, where)
    return LockFile(out)


def read(path: str | os.PathLike[str]) -> LockFile:
    """The lock at ``path`` (a regular file, bounded before it is parsed)."""
    from ..base import bounded

    try:
        data = bounded.read_regular(path, MAX_BYTES)[0]
    except OSError as e:
        raise LockFileError(f"cannot read the kernel lock {os.fspath(path)}: {e.strerror or e}") from None
    return loads(data, os.fspath(path))


def write(path: str | os.PathLike[str], lock: LockFile) -> bool:
    """Write atomically (temp file + rename); False when the file already holds these bytes
    (left untouched, mtime included)."""
    p = Path(path)
    text = lock.dumps().encode()
    try:
        if p.is_file() and p.read_bytes() == text:
            return False
        tmp = p.with_name(f".{p.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}")
        tmp.write_bytes(text)
        os.replace(tmp, p)
    except OSError as e:
        raise KernelCacheError(f"cannot write the kernel lock {p}: {e.strerror or e}") from None
    return True


def merge_into(path: str | os.PathLike[str], kernels: Iterable[KernelLock], lock_dir: str | os.PathLike[str],
               replace: bool = False) -> LockFile:
    """Add ``kernels`` to the lock at ``path`` (created if absent) under a file lock in
    ``lock_dir`` (node-local), so concurrent recorders all land in one valid file."""
    import filelock

    p = Path(os.path.abspath(path))
    d = Path(lock_dir)
    tag = hashlib.sha256(str(p).encode()).hexdigest()[:20]
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        guard = filelock.FileLock(str(d / f"lockfile-{tag}.flock"))
        guard.acquire()
    except OSError as e:
        raise KernelCacheError(f"cannot take the file lock for the kernel lock {p} in {d}: {e.strerror or e} "
                               "(KERNELCACHE_LOCK_DIR)") from None
    try:
        current = read(p) if p.exists() else LockFile()
        out = current.with_kernels(kernels, replace)
        write(p, out)
    finally:
        guard.release()
    return out
