"""Directories other users can write: a cache dir or prebuilt root is code this process runs.

Why: whatever another user puts in a world-writable cache dir (or in a prebuilt root on a shared
mount they own) is dlopened here on the next hit; a checksum in a manifest they also wrote
proves nothing. So a directory that users other than this one (and root) can write, or can
replace through a directory above it, is named in an :class:`UnsafeDirectoryWarning` (and an
``unsafe_directory`` event), once per directory per process; under ``KERNELCACHE_STRICT_DIRS`` such
a cache dir is an error and such a prebuilt root is skipped, each with the reason. Group-writable
directories are left alone: a team sharing a cache through its group is a deliberate setup.
"""
from __future__ import annotations

import os
import stat
import threading
import warnings
from pathlib import Path

from ..base import basis, events, process_state
from ..base.errors import UnsafeDirectoryWarning

_lock = threading.Lock()
# directory looked at -> why others can write it (existing ones only), and the stats that answer rests on
_checked: dict[str, tuple[str | None, list[tuple[str, os.stat_result]]]] = {}


def _reset() -> None:
    with _lock:
        _checked.clear()


process_state.register("dir_trust.checked", _reset)


def others_can_write(path: Path | str, seen: list[tuple[str, os.stat_result]] | None = None) -> str | None:
    """Why users other than this one and root can write ``path`` or replace it; None if they
    cannot (or ``path`` does not exist). ``path`` itself must be neither world-writable (a sticky
    bit does not help: others may still add files) nor another user's; a directory above it must
    not let another user rename it away (world-writable without the sticky bit, or theirs).
    ``seen``: gets ``path`` with its stat (a chmod or chown moves its ctime). Not the directories
    above it: their stats move whenever a sibling is created (``/tmp``), so a recalled call
    witnessing them would almost never hold; every full load checks them, a recalled call does not."""
    p = Path(os.path.abspath(path))
    me = os.geteuid()
    seen = [] if seen is None else seen
    try:
        st = os.stat(p)
    except OSError:
        return None
    seen.append((str(p), st))
    if st.st_mode & stat.S_IWOTH:
        return f"{p} is writable by every user (mode {stat.S_IMODE(st.st_mode):04o})"
    if st.st_uid not in (me, 0):
        return f"{p} belongs to another user (uid {st.st_uid})"
    for up in p.parents:
        try:
            st = os.stat(up)
        except OSError:
            return None
        if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
            return (f"{up}, a directory above it, is writable by every user without the sticky bit "
                    f"(mode {stat.S_IMODE(st.st_mode):04o}): anyone can replace {p}")
        if st.st_uid not in (me, 0):
            return f"{up}, a directory above it, belongs to another user (uid {st.st_uid}), who can replace {p}"
    return None


def check(paths: list[Path], what: str, fix: str, strict: bool = False, again: bool = False) -> str | None:
    """Why others can write the first of ``paths`` (a directory and what under it is read), or None.
    ``what``: "cache dir" / "prebuilt root"; ``fix``: the remedy. Looked at once per process (the
    answer remembered). Not ``strict``: warned once; ``strict`` (``KERNELCACHE_STRICT_DIRS``): the
    caller refuses the directory, naming the reason (:func:`refusal` says it). When ``strict``
    (the answer decides a load), the directories it looked at are noted (``basis``) on every call;
    ``again``: looked at anew (a load that wrote under it: the stats it leaves are the ones noted)."""
    key = str(paths[0])
    with _lock:
        got = None if again else _checked.get(key)
    if got is None:
        if not os.path.isdir(paths[0]):
            return None  # not there yet: looked at once it is
        seen: list[tuple[str, os.stat_result]] = []
        why = next((w for w in (others_can_write(p, seen) for p in paths) if w is not None), None)
        with _lock:
            before = _checked.get(key)
            fresh = before is None or before[0] != why
            got = _checked[key] = (why, seen) if again or before is None else before
    else:
        fresh = False
    why, seen = got
    if strict:
        for path, st in seen:
            basis.note(path, st)
    if not fresh:
        return why
    if why is not None:
        events.emit(events.Event.UNSAFE_DIRECTORY, path=key, what=what, reason=why, strict=strict)
        if not strict:
            warnings.warn(f"kernelcache: the {what} {key} can be written by other users: {why}; whatever they "
                          f"put there is loaded into this process. {fix}", UnsafeDirectoryWarning, stacklevel=3)
    return why


def refusal(path: Path | str, what: str, why: str, fix: str) -> str:
    """The line a refusal under ``KERNELCACHE_STRICT_DIRS`` says (an error, a skipped root)."""
    return (f"the {what} {path} can be written by other users: {why}; refused (KERNELCACHE_STRICT_DIRS is set). "
            f"{fix}")
