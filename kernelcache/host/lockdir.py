"""The build-lock directory is private to its user: created 0700, its owner and mode checked.

Why: the default lock dir lives under the shared temp dir (``/tmp/kernelcache-<uid>/locks``).
Another local user who creates that directory first owns everything in it: a symlink planted
for a lock's holder file made the victim's next build write through it (any file the victim can
write), and a lock file the squatter holds blocked the victim's builds for the whole lock
timeout. So a lock dir is used only when it, and the per-user directory above the default one,
is a real directory (not a symlink) owned by this user and writable by no one else; otherwise
the caller builds without the lock (the lock only de-duplicates work; atomic publish keeps
the cache correct) and says why. Files inside are opened ``O_NOFOLLOW``; the holder file is
written to a fresh ``O_EXCL`` temp file and renamed over (a rename replaces a symlink, never
follows it).

A leaf: ``kernelcache.build.lock`` and the drop-ins ask it (they may not import each other).
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_PER_USER = "kernelcache-"  # the default's per-user directory: <tmp>/kernelcache-<uid>


def _problem(path: Path, follow: bool) -> str | None:
    """Why ``path`` is not a private directory of this user (None: it is)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as e:
        return f"cannot stat {path}: {e.strerror or e}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    me = os.geteuid()
    if st.st_uid != me:
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {me})"
    if st.st_mode & 0o022:
        return f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _make(path: Path) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass


def is_default(lock_dir: Path) -> bool:
    """Is ``lock_dir`` the default one, ``<tmp>/kernelcache-<uid>/locks``?"""
    return lock_dir == Path(tempfile.gettempdir()) / f"{_PER_USER}{os.getuid()}" / "locks"


def prepare(lock_dir: Path) -> str | None:
    """Create ``lock_dir`` (mode 0700) where missing and check it is private; the reason it may
    not be used (a sentence naming the fix), or None.

    The default dir's per-user parent is created 0700 too and checked without following a
    symlink (anyone can create names in the shared temp dir); an explicitly configured dir may
    be reached through a symlink of its user's choosing, but must be this user's and writable
    by no one else.
    """
    lock_dir = Path(lock_dir)
    default = is_default(lock_dir)
    chain = [lock_dir.parent, lock_dir] if default else [lock_dir]
    try:
        if not default:
            lock_dir.parent.mkdir(parents=True, exist_ok=True)
        for d in chain:
            _make(d)
    except OSError as e:
        return f"cannot create lock dir {lock_dir}: {e.strerror or e}"
    for d in chain:
        why = _problem(d, follow=not default)
        if why is not None:
            return (f"lock dir {lock_dir} is not private ({why}); another user could plant files in it. "
                    "Building without the lock; remove it or set KERNELCACHE_LOCK_DIR to a directory of yours")
    return None


def write_holder(path: Path, text: str) -> None:
    """Write a lock's holder file without ever following a symlink at ``path`` (OSError on failure)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
