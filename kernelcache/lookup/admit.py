"""The one door every entry goes through before its code can run: validate, dlopen, check.

What a process remembers lives here too (loaded modules, files whose sha256 was verified,
the inodes dlopen has mapped per path), because those facts decide how an entry is admitted:
a module already admitted is handed out again, a file already verified is not re-hashed, and a
path whose bytes changed since dlopen saw it is loaded from a private copy.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from .. import kinds
from ..base import basis, process_state
from ..base.events import RejectCode
from ..base.spec import KernelSpec
from ..entry import validate
from ..storage.entry import Entry
from ..storage.local import LocalStore
from . import recall


class _ProcessState:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        # shared with kernelcache.lookup.recall, which hands out the same module objects without the loader
        self.modules: dict[tuple[str, str], Any] = recall.MODULES  # (entry dir, entry id) -> module
        self.verified_sha: set[str] = set()
        self.verified_stat: dict[str, os.stat_result] = {}  # path -> its stat when its bytes were verified
        self.dlopened: dict[str, int] = recall.DLOPENED  # path -> inode dlopen'ed from that path
        self.name_locks: dict[str, threading.Lock] = {}


_state = _ProcessState()


def name_lock(name: str) -> threading.Lock:
    """One in-process lock per kernel name (threads of one process never build twice)."""
    with _state.lock:
        return _state.name_locks.setdefault(name, threading.Lock())


def _forget_admitted() -> None:
    """Forget loaded modules and verified checksums (the next load re-validates from disk).

    What dlopen has mapped is remembered: the dynamic loader itself never forgets a path, so
    a later load of a replaced file at that path must still go through a private copy.
    """
    with _state.lock:
        _state.modules.clear()
        _state.verified_sha.clear()
        _state.verified_stat.clear()


process_state.register("admit.admitted", _forget_admitted)


def dlopen_path(so_path: Path, store: LocalStore) -> Path:
    """A path that dlopen has not cached for different bytes.

    dlopen returns the already-loaded handle for a path it has seen, even if the file there was
    replaced (e.g. a rejected entry rebuilt under the same id). Such a file is loaded from a
    private per-process copy instead, so the new bytes really run.
    """
    ino = so_path.stat().st_ino
    with _state.lock:
        seen = _state.dlopened.get(str(so_path))
        if seen is None or seen == ino:
            _state.dlopened[str(so_path)] = ino
            return so_path
    private = store.private_copy(so_path)
    with _state.lock:
        _state.dlopened[str(private)] = private.stat().st_ino
    return private


def accept(spec: KernelSpec, entry: Entry, store: LocalStore) -> tuple[Any, validate.Rejection | None]:
    """Validate and load an entry on local disk. (module, None) or (None, why not)."""
    mkey = (str(entry.path), entry.entry_id)
    sp = str(entry.so_path)
    with _state.lock:
        mod = _state.modules.get(mkey)
    if mod is not None:
        _note_binary(sp)
        return mod, None
    kind = kinds.of(spec.kind)
    check_sha = sp not in _state.verified_sha
    stamp = _binary_stamp(entry) if check_sha and kind.stamp_binary else None
    if stamp is not None and entry.stat_cache().get(stamp[0]) == stamp[1]:
        check_sha = False
        with _state.lock:  # verified by the stamp: its stat is the one the bytes were verified at
            _state.verified_stat[sp] = stamp[2]
    try:
        before = os.stat(sp) if check_sha else None
    except OSError:
        before = None
    rej = validate.before_dlopen(spec, entry.head, entry.so_path, check_sha=check_sha, checks=kind.checks)
    if rej:
        return None, rej
    with _state.lock:
        _state.verified_sha.add(sp)
        if before is not None:
            _state.verified_stat[sp] = before
    if check_sha and stamp is not None:
        entry.save_stat_cache(dict([stamp[:2]]))
    try:
        path = dlopen_path(entry.so_path, store) if kind.in_process else entry.so_path
        mod, rej = kind.admit(spec, entry.head, path)
    except Exception as e:  # noqa: BLE001 - any load failure is a rejection
        return None, validate.Rejection(RejectCode.DLOPEN, f"loading failed: {type(e).__name__}: {e}")
    if rej:
        return None, rej
    with _state.lock:
        _state.modules[mkey] = mod
    _note_binary(sp)
    return mod, None


def _note_binary(sp: str) -> None:
    """The binary at the stat its bytes were verified at (``basis``); a file that moved since
    (replaced under a running process) spoils the answer for recall."""
    with _state.lock:
        st = _state.verified_stat.get(sp)
    try:
        now = os.stat(sp)
    except OSError:
        now = None
    if st is None or now is None or basis.fields(st) != basis.fields(now):
        basis.spoil(f"{sp} is not the file whose bytes were verified")
    else:
        basis.note(sp, st)


def published(fresh: Entry, dest: Entry, module: Any) -> Any:
    """A fresh entry accepted in its build directory was renamed into place: what this process
    learned about it (its module, its verified bytes, the inode dlopen mapped) holds at its new
    path, since a rename keeps the file. Repeat loads then hand out the same module. Returns
    ``module`` as it reads after the rename: kinds whose admission hands back a path (an
    executable, a torch library) named the file under the build directory."""
    module = _moved(module, fresh.path, dest.path)
    with _state.lock:
        mod = _state.modules.pop((str(fresh.path), fresh.entry_id), None)
        if mod is not None:
            _state.modules[(str(dest.path), dest.entry_id)] = _moved(mod, fresh.path, dest.path)
        old = str(fresh.so_path)
        if old in _state.verified_sha:
            _state.verified_sha.discard(old)
            _state.verified_sha.add(str(dest.so_path))
        st = _state.verified_stat.pop(old, None)
        if st is not None:  # a rename keeps the file's stat
            _state.verified_stat[str(dest.so_path)] = st
        ino = _state.dlopened.pop(old, None)
        if ino is not None:
            _state.dlopened[str(dest.so_path)] = ino
    return module


def _moved(module: Any, old: Path, new: Path) -> Any:
    """``module`` as it reads after its entry was renamed from ``old`` to ``new``: a path (kinds
    whose admission hands back a file) is re-rooted, and a Python module imported from the build
    directory gets the published path as its ``__file__`` (the rename kept the file it maps)."""
    prefix = str(old)

    def moved(text: str) -> str | None:
        if text == prefix or text.startswith(prefix + os.sep):
            return str(new) + text[len(prefix):]
        return None

    if isinstance(module, (str, Path)):
        text = moved(str(module))
        return module if text is None else type(module)(text)
    where = getattr(module, "__file__", None)
    if isinstance(where, str) and moved(where) is not None:
        try:
            module.__file__ = moved(where)
            spec = getattr(module, "__spec__", None)
            if spec is not None and isinstance(spec.origin, str) and moved(spec.origin) is not None:
                spec.origin = moved(spec.origin)
        except (AttributeError, TypeError):  # a module type that does not take attributes
            pass
    return module


def _binary_stamp(entry: Entry) -> tuple[str, list[int], os.stat_result] | None:
    """(key, stat) of the binary, remembered once its sha256 was verified (``Kind.stamp_binary``).

    Torch kinds' binaries are large (a pybind11 module is ~1 MB), so hashing one in every fresh process
    would cost more than the rest of a warm load. The stat recorded next to the entry after a
    verification (size, mtime, ctime, inode: a replaced or rewritten file changes its ctime or
    inode, which no user can set back) stands in for the hash while it is unchanged.
    """
    try:
        st = entry.so_path.stat()
    except OSError:
        return None
    return f"binary:{entry.so_path.name}", [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino], st
