"""What a full load's answer rested on: files at the stat it verified, paths that had to be absent.

Why here, on the ground floor: the checks that verify those facts sit on several floors (the
toolchain finds compilers on ``PATH`` and stats them, the hit record checks the dependencies,
admission verifies the binary, the prebuilt place looks for a kernel's directory), and each notes
what it verified into the basis of the load that runs it. A recalled call
(``kernelcache.lookup.recall``) re-stats exactly that list, so it cannot miss a fact the full path
used and a hand-kept list forgot. A fact a stat cannot witness spoils the basis (that answer is
never recalled).

A load opens one with :func:`gathering`. Candidates it refused are part of its answer too (a
prebuilt entry refused for other flags, replaced by a good one, changes the answer), so what was
looked at to refuse them is noted as well; only what the load itself moved away is dropped. With
no basis open, noting costs one context-variable read. Facts memoised per process must be noted again on each use (the answer of
this load rests on them as much as the first one's did).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Sequence

from .warm_facts import stat_fields

Path = str | bytes | os.PathLike[str]


class Basis:
    """Paths with the stat (size, mtime_ns, ctime_ns, inode) each must still have, and paths that
    must stay absent; ``spoiled``: why this answer must not be recalled (None: it may be)."""

    __slots__ = ("stats", "absent", "spoiled")

    def __init__(self) -> None:
        self.stats: dict[bytes, tuple[int, ...]] = {}
        self.absent: dict[bytes, None] = {}  # ordered, without repeats
        self.spoiled: str | None = None

    def note(self, path: Path, st: os.stat_result | Sequence[int]) -> None:
        key = os.fsencode(path)
        self.stats[key] = fields(st) if isinstance(st, os.stat_result) else tuple(st)
        self.absent.pop(key, None)

    def note_absent(self, path: Path) -> None:
        key = os.fsencode(path)
        if key in self.stats:
            self.spoil(f"{os.fsdecode(key)} both used and required absent")
            return
        self.absent[key] = None

    def spoil(self, why: str) -> None:
        if self.spoiled is None:
            self.spoiled = why

    def renamed(self, old: Path, new: Path) -> None:
        """Files noted under directory ``old`` are now under ``new`` (a build published into the
        cache by a rename, which keeps every file's stat)."""
        o, n = os.fsencode(old) + b"/", os.fsencode(new) + b"/"
        self.stats = {(n + p[len(o):] if p.startswith(o) else p): st for p, st in self.stats.items()}

    def drop_under(self, directory: Path) -> None:
        """Forget files under ``directory``: the load itself moved it away (a quarantined entry, a
        build directory another process's entry won over); the answer does not rest on them."""
        d = os.fsencode(directory) + b"/"
        self.stats = {p: st for p, st in self.stats.items() if not p.startswith(d)}


_current: ContextVar[Basis | None] = ContextVar("kernelcache_basis", default=None)


fields = stat_fields  # the one stat rule (``warm_facts``): what a recalled call compares


def current() -> Basis | None:
    return _current.get()


@contextmanager
def gathering() -> Iterator[Basis]:
    """A basis for one full load: what is noted while it is open goes into it."""
    b = Basis()
    token = _current.set(b)
    try:
        yield b
    finally:
        _current.reset(token)


def note(path: Path, st: os.stat_result | Sequence[int] | None = None) -> bool:
    """Note ``path`` at ``st`` (the stat the caller verified), or at its stat now. False: it
    cannot be stat-ed now (noted as a spoiled basis)."""
    b = _current.get()
    if b is None:
        return True
    if st is None:
        try:
            st = os.stat(path)
        except OSError:
            b.spoil(f"{os.fsdecode(path)} cannot be stat-ed")
            return False
    b.note(path, st)
    return True


def note_absent(path: Path) -> None:
    b = _current.get()
    if b is not None:
        b.note_absent(path)


def note_exists(path: Path) -> bool:
    """``os.path.exists`` whose answer is noted either way."""
    try:
        st = os.stat(path)
    except OSError:
        note_absent(path)
        return False
    note(path, st)
    return True


def spoil(why: str) -> None:
    b = _current.get()
    if b is not None:
        b.spoil(why)


def note_which(name: str, found: str | None) -> None:
    """What a ``shutil.which(name)`` lookup that answered ``found`` rested on: that file, and
    (a bare name, looked up on ``PATH``) no file of that name in an earlier ``PATH`` directory.
    An earlier file that exists but was skipped (not executable) spoils the basis: a chmod would
    change the answer, and no stat of an absent path witnesses it."""
    b = _current.get()
    if b is None:
        return
    if os.path.dirname(name):
        note_exists(name)
        return
    target = os.path.abspath(found) if found else None
    for d in (os.environ.get("PATH") or "").split(os.pathsep):
        cand = os.path.join(d or ".", name)
        if target is not None and os.path.abspath(cand) == target:
            note(found or cand)
            return
        if os.path.lexists(cand):
            b.spoil(f"{cand} exists but was not the {name!r} found on PATH")
            return
        b.note_absent(cand)


def renamed(old: Path, new: Path) -> None:
    b = _current.get()
    if b is not None:
        b.renamed(old, new)


def drop_under(directory: Path) -> None:
    b = _current.get()
    if b is not None:
        b.drop_under(directory)
