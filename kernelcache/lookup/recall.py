"""Recall: a warm drop-in call served without the loader, from what the last full load proved.

Why: the first load of a fresh process is what every user of a JIT cache feels, and the full
lookup (plan, toolchain facts, level-1 key, hit record, acceptance) imports ~30 modules and
leaves ~3,000 new objects behind. Right after ``import torch`` (which ``import tvm_ffi`` does
when torch is installed) a full garbage collection over torch's objects is pending and ~300 new
objects set it off (~90 ms). This module is the whole warm path of a repeated call: it imports
nothing beyond the standard modules tvm-ffi already imported, and keeps almost nothing alive.

How it stays sound: after a full load accepted an entry for a call, ``kernelcache.lookup.recall_write``
records, under a digest of the call (its arguments, the environment the full path reads, the
working directory, this interpreter), the files whose state decided that answer, each with the
stat the full path verified (size, mtime_ns, ctime_ns, inode: ctime cannot be set back, so an
edit with a restored mtime moves it): the entry's binary and manifest, every dependency the hit
record checks, the installed distributions it trusts, include paths that must stay absent, the
compilers, tvm-ffi's library, the prebuilt roots' state and kernelcache's own key rules. A
recalled call re-stats all of them; any difference, a missing file, an odd environment or a
damaged memo sends the call down the full path, which decides and records again. Nothing
here rehashes: bytes are the full path's job.
"""
from __future__ import annotations

import marshal
import os
import sys
from typing import Any, Callable

from ..base import environ
from ..base.warm_facts import COMPILER_ENV, RECALL_FORMAT, import_stamp, memo_path, read_file, stat_array

# read by the full path when it plans a build (the compiler's environment, keyed by the build, and
# the drop-ins' call-time variables): a different value may mean a different key, so it is part of
# the digest (tests/loader/test_recall_env_reads.py checks this list against real loads' reads)
ENV = (*COMPILER_ENV, "CXX", "CC", "CUDA_HOME", "CUDA_PATH", "PATH", "TVM_FFI_CUDA_ARCH_LIST", "TVM_FFI_GPU_BACKEND",
       "XDG_CACHE_HOME", "HOME", "FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST",
       "LD_LIBRARY_PATH")
# KERNELCACHE_* values under which the full path must decide every call
# (a kernel lock recorded: the loader records each load, kernelcache.lockfile; one served is
# recalled only from a load checked against it, the lock's stat witnessed: recall_write)
_NEVER = ("KERNELCACHE_REBUILD", "KERNELCACHE_VERIFY_INSTALLED", "KERNELCACHE_NO_RECALL", "KERNELCACHE_LOCK_RECORD")
_FALSE = ("", "0", "false", "no", "off")

# What this process has loaded, shared with kernelcache.lookup.admit (one module object per entry).
MODULES: dict[tuple[str, str], Any] = {}  # (entry dir, entry id) -> module
DLOPENED: dict[str, int] = {}  # path -> inode dlopen mapped at that path
UNREPORTED: list[tuple[str, str, str, str, str]] = []  # (kernel, entry id, entry dir, root, kind) recalled before kernelcache.base.events existed


def digest(kind: str, call: tuple, env_prefix: str | None = None) -> str | None:
    """A digest of one call and everything around it the full path reads; None: never recalled
    (a setting that asks for the full path, or arguments that are not plain data).
    ``env_prefix``: the foreign JIT's own variables (``FLASHINFER_``), all of them part of it."""
    env = os.environ
    kc = environ.kc_items(env)
    for k, v in kc:
        if k in _NEVER and v.strip().lower() not in _FALSE:
            return None
    own = sorted((k, env[k]) for k in env if k.startswith(env_prefix)) if env_prefix else ()
    try:
        # the toolkit a CUDA_HOME spelling (or the default) points at now: a retargeted symlink
        # is another toolkit, though every file of the old one still holds its stat
        cuda = os.path.realpath(env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda")
        data = marshal.dumps((RECALL_FORMAT, kind, call, tuple(kc), tuple(own), tuple(env.get(k) for k in ENV), cuda,
                              os.getcwd(),
                              os.uname()[1], sys.executable, sys.version, sys.byteorder), 2)  # version 2: no refcount-dependent refs
    except (ValueError, OSError):
        return None
    import hashlib

    return hashlib.blake2b(data, digest_size=20).hexdigest()


def real_paths(paths: Any) -> list[str]:
    """Where ``paths`` (one path, or several) lead now, symlinks followed: part of a digest, since
    the full path resolves them (a retargeted link names other files, whose old ones still hold)."""
    if paths is None:
        return []
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    return [os.path.realpath(os.path.expanduser(os.fsdecode(p))) for p in paths]


def links_objects(paths: Any) -> bool:
    """Does any of ``paths`` name an object file or archive? Those are linked in by their bytes,
    which the full path hashes on each call (no stat witnesses them): such a call is never
    recalled (the drop-ins' fronts and ``kernelcache.lookup.front``)."""
    return any(os.fsdecode(p).lower().endswith((".o", ".obj", ".a")) for p in paths)


def _read(d: str) -> tuple | None:
    return read_file(memo_path(d))


def holds(rec: tuple) -> bool:
    """Does everything the recorded answer rests on still stand?"""
    _fmt, _name, _eid, _edir, _so, _how, paths, stats, absent, stamp, _note, _root, _kind = rec
    cur, ok = stat_array(paths.split(b"\0"))
    if not ok or cur.tobytes() != stats:
        return False
    exists = os.path.exists
    if absent and any(exists(p) for p in absent.split(b"\0")):
        return False
    return stamp is None or stamp == import_stamp()


def recall(d: str) -> Any:
    """The module the full path gave the call with digest ``d`` last time, if that still holds;
    else None (the caller takes the full path). Never raises for a bad or stale memo."""
    got = recall_entry(d)
    return None if got is None else got[0]


def recall_entry(d: str, accept: Callable[[str, Any], bool] | None = None) -> tuple[Any, str, str, Any] | None:
    """``recall`` with what the caller may need besides the module: (module, path of the entry's
    binary, entry id, the note the drop-in recorded with the answer), or None.

    ``accept(name, note)``: asked before anything is loaded, with the name the entry was built
    under and the note; False sends the call down the full path (the torch drop-in: the name its
    in-process versioning gives these inputs now is not the one the entry was built as)."""
    rec = _read(d)
    if rec is None or not holds(rec):
        return None
    name, eid, edir, so, how, note = rec[1], rec[2], rec[3], rec[4], rec[5], rec[10]
    if accept is not None and not accept(name, note):
        return None
    mod = MODULES.get((edir, eid))
    if mod is None:
        try:
            ino = os.stat(so).st_ino
        except OSError:
            return None
        seen = DLOPENED.get(so)
        if seen is not None and seen != ino:
            return None  # dlopen caches that path for other bytes: the full path loads a private copy
        try:
            mod = _load(so, how, name)
        except Exception:  # noqa: BLE001 - a module that does not load now: the full path judges it
            return None
        if how != "path":
            DLOPENED[so] = ino
        MODULES[(edir, eid)] = mod
    _used(edir)
    _report(name, eid, edir, rec[11], rec[12])
    return mod, so, eid, note


def _load(so: str, how: str, name: str) -> Any:
    """Load as the entry's kind admits it (``kinds.base.Kind.recall_load``)."""
    if how == "path":  # an executable: handed out, never loaded
        return so
    if ":" in how:  # a kind's own lean load (``MODULE:FUNCTION``, a kind outside the package)
        import importlib

        module, _, attr = how.partition(":")
        return getattr(importlib.import_module(module), attr)(so, name)
    if how in ("torch_python", "torch_library"):
        import torch  # the binary links libtorch: its libraries first

        if how == "torch_library":
            torch.ops.load_library(so)
            return so
        from ..kinds.surface import import_path

        return import_path(name, so)
    import tvm_ffi

    if how == "bind_now":  # as the tvm-ffi kind admits it: every symbol resolved now
        import ctypes

        ctypes.CDLL(so, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    return tvm_ffi.load_module(so)


def _used(edir: str) -> None:
    """The entry's LRU stamp (kernelcache.base.layout.USED), as a full hit touches it."""
    p = os.path.join(edir, "used")
    try:
        os.utime(p)
    except FileNotFoundError:
        try:
            open(p, "ab").close()
        except OSError:
            pass
    except OSError:
        pass


def _report(name: str, eid: str, edir: str, root: str, kind: str) -> None:
    """A recalled load is a hit: counted by kernelcache.base.events when that is loaded (by the
    loader, a listener, a log target), else remembered until it is (it counts them on import and
    in ``stats()``; it never imports this module, which is why it looks in ``sys.modules``).
    Logged where ``KERNELCACHE_LOG`` says, as a full load's hit is (the loader sets that target
    for its own calls only).
    The entry's directory, the spec's root and kind travel with it, as with a full load's hit: what
    the answer rests on (its manifest's inputs under that root) is what test impact records, and the
    kind labels the kernel in the reports."""
    events = sys.modules.get("kernelcache.base.events")
    if events is None and environ.log_requested():
        from ..base import events
    if events is None:
        UNREPORTED.append((name, eid, edir, root, kind))
        return
    with events.logging_to(environ.log_target()):
        events.emit(events.Event.HIT, name=name, entry=eid, recalled=True, entry_dir=edir, root=root, kind=kind)
