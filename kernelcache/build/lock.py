"""Single-flight build lock: one flock per level-1 key, classified errors, bounded waits.

The lock only de-duplicates work; correctness comes from atomic publish. So any error other
than contention (EACCES, EROFS, EISDIR, ENOLCK, ...) never spins: the caller builds privately
without the lock. Lock files live in a node-local dir and are never unlinked (unlinking a
flock'd file lets two processes hold "the same" lock). The kernel releases a flock when its
holder dies, so a SIGKILLed builder never leaves a stale lock.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import filelock

from ..base import bounded, events, interrupt
from ..base.errors import LockTimeout
from ..base.settings import Settings
from ..host import lockdir

HOLDER_MAX = 4096  # a holder file is ~150 bytes of JSON
POLL_S = 0.01  # flock polls are cheap; waiters should see a published entry promptly
LOG_EVERY_S = 5.0


def lock_path_for(key1: str, settings: Settings) -> Path:
    tag = hashlib.sha256(f"{settings.cache_dir}\0{key1}".encode()).hexdigest()[:32]
    return settings.lock_dir / f"{tag}.lock"


def _holder_info(lock_path: Path) -> str:
    try:  # a regular file of at most HOLDER_MAX bytes, never through a symlink
        info = bounded.loads(bounded.read_regular(str(lock_path) + ".holder", HOLDER_MAX)[0], "holder file")
        age = time.time() - float(info.get("since", time.time()))
        return f"pid {info.get('pid')} on {info.get('host')} (for {age:.0f}s)"
    except (OSError, ValueError):
        return "unknown holder"


def _probe(lock_path: Path) -> OSError | None:
    """Open the lock file the way filelock will; return the error if it is not contention."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | lockdir.NOFOLLOW, 0o600)
        os.close(fd)
    except OSError as e:
        return e
    return None


@contextmanager
def single_flight(key1: str, name: str, settings: Settings,
                  ready: Callable[[], bool] | None = None) -> Iterator[bool | None]:
    """Hold the build lock for ``key1``. Yields True if held, False if unusable (build privately),
    None if ``ready()`` turned true while waiting (the holder published what we wait for; the
    lock was not taken, so waiters load side by side instead of one after another).

    Raises LockTimeout when another builder holds it past ``Settings.lock_timeout``.
    """
    path = lock_path_for(key1, settings)
    unsafe = lockdir.prepare(settings.lock_dir)  # private: 0700, this user's (kernelcache.host.lockdir)
    if unsafe is not None:
        events.emit(events.Event.LOCK_UNUSABLE, name=name, lock=str(path), error=unsafe)
        yield False
        return
    err = _probe(path)
    if err is not None:
        events.emit(events.Event.LOCK_UNUSABLE, name=name, lock=str(path), error=f"{type(err).__name__}: {err}")
        yield False
        return
    lk = filelock.FileLock(str(path), timeout=0)
    deadline_s = settings.lock_timeout
    t0 = time.monotonic()
    next_log = t0 + LOG_EVERY_S
    waited_logged = published = False
    while True:
        try:
            lk.acquire(timeout=0)
            break
        except filelock.Timeout:
            pass
        except OSError as e:  # not contention: never spin
            events.emit(events.Event.LOCK_UNUSABLE, name=name, lock=str(path), error=f"{type(e).__name__}: {e}")
            yield False
            return
        now = time.monotonic()
        if not waited_logged:
            events.emit(events.Event.LOCK_WAIT_START, name=name, lock=str(path), holder=_holder_info(path))
            waited_logged = True
        if now >= next_log:
            events.emit(events.Event.LOCK_WAIT, name=name, waited=now - t0, holder=_holder_info(path))
            next_log = now + LOG_EVERY_S
        if deadline_s > 0 and now - t0 >= deadline_s:
            raise LockTimeout(name, str(path), now - t0, _holder_info(path))
        if ready is not None and ready():
            published = True
            break
        interrupt.sleep(POLL_S)  # a parallel warm's Ctrl-C ends this wait in its worker threads too
    waited = time.monotonic() - t0
    if not published and waited_logged and ready is not None and ready():  # published, then released
        lk.release()
        published = True
    if published:
        events.emit(events.Event.LOCK_WAIT_PUBLISHED, name=name, waited=round(waited, 3))
        yield None
        return
    events.emit(events.Event.LOCK_ACQUIRED, name=name, waited=round(waited, 3))
    holder = Path(str(path) + ".holder")
    try:
        lockdir.write_holder(holder, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                 "since": time.time(), "name": name, "key": key1}))
    except OSError:
        pass
    try:
        yield True
    finally:
        lk.release()
