"""Fleet-wide single flight: a compile lease per (name, skey), made of create-if-absent objects.

``leases/<name>/<skey>/<generation:010d>.json`` holds the holder (host, pid, a random token),
when it was acquired and when it expires (the holder's clock, epoch seconds; hosts are assumed
NTP-synchronised, the TTL of minutes dwarfs any skew). The newest generation is the lease:

- free (no object) or expired -> create generation+1 with create-if-absent; winning that create
  is taking the lease (nothing is ever overwritten, so object stores without compare-and-swap
  and shared filesystems work alike); losing it means another host just took it;
- live -> its holder is returned, the caller waits for the manifest instead of compiling;
- release deletes our generation; renew creates generation+1 for ourselves (losing that create
  means the lease was taken over: we no longer hold it).

A holder that dies (SIGKILL, a lost pod) leaves its object; it blocks nobody beyond ``expires``.
A waiter never assumes the holder succeeded: it waits for the manifest, not for the lease.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from .backend import RemoteError, RemoteMissing
from .refs import LEASES

FORMAT = 1


def lease_prefix(name: str, skey: str) -> str:
    return f"{LEASES}{name}/{skey}/"


def _gen_of(key: str) -> int | None:
    base = key.rsplit("/", 1)[-1]
    if not base.endswith(".json"):
        return None
    stem = base[:-5]
    return int(stem) if stem.isdigit() else None


@dataclass(frozen=True)
class LeaseInfo:
    """The current holder of a lease (as recorded by it)."""

    name: str
    skey: str
    generation: int
    host: str
    pid: int
    acquired: float  # epoch seconds, holder's clock
    expires: float
    token: str = ""

    def live(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) < self.expires

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        return (f"{self.host} pid {self.pid}, compiling for {max(0.0, now - self.acquired):.0f}s, "
                f"lease expires in {max(0.0, self.expires - now):.0f}s")


def _record(name: str, skey: str, gen: int, ttl: float, token: str) -> dict:
    now = time.time()
    return {"format": FORMAT, "name": name, "skey": skey, "generation": gen, "host": socket.gethostname(),
            "pid": os.getpid(), "token": token, "acquired": now, "expires": now + ttl, "ttl": ttl}


def _parse(store: Any, name: str, skey: str, key: str, gen: int, last_modified: float | None,
           ttl: float) -> LeaseInfo | None:
    """The lease object at ``key``; None when it vanished. Unreadable -> expiry from its mtime."""
    try:
        d = json.loads(store.get(key))
        return LeaseInfo(name, skey, gen, str(d["host"]), int(d["pid"]), float(d["acquired"]),
                         float(d["expires"]), str(d.get("token", "")))
    except RemoteMissing:
        return None
    except RemoteError:
        raise
    except Exception:  # garbage in a lease object: it expires like any other
        t = last_modified if last_modified is not None else time.time()
        return LeaseInfo(name, skey, gen, "?", 0, t, t + ttl)


_RELISTS = 3  # the newest object vanished between list and get: look again this many times


def _newest(store: Any, name: str, skey: str, ttl: float, seen: LeaseInfo | None = None
            ) -> tuple[int, LeaseInfo | None]:
    """(the highest generation listed, the newest lease still readable).

    Why the generation travels apart from the lease: the newest object can vanish between our
    list and our get (its holder renewed or released it, or a taker removed the expired one).
    Whoever removed it created a higher generation first (or freed the lease), so the next
    create must be *above* every generation we saw: were it computed from "no lease" it would
    reuse a long-deleted generation 1 and win beside a live holder.

    ``seen``: a live lease read before; while its generation is still the newest, it is not read
    again (a waiter polls with one list, not a list and a get).
    """
    top = 0
    for _ in range(_RELISTS):
        objs = [(g, o) for o in store.list(lease_prefix(name, skey)) if (g := _gen_of(o.key)) is not None]
        if not objs:
            return top, None
        gen, obj = max(objs, key=lambda t: t[0])
        top = max(top, gen)
        if seen is not None and seen.generation == gen and seen.live():
            return top, seen
        info = _parse(store, name, skey, obj.key, gen, obj.last_modified.timestamp(), ttl)
        if info is not None:
            return top, info
    return top, None


def current(store: Any, name: str, skey: str, ttl: float) -> LeaseInfo | None:
    """The newest lease generation (live or not); one list request + one get (more only when
    the newest vanished while we read it)."""
    return _newest(store, name, skey, ttl)[1]


def live_holder(store: Any, name: str, skey: str, ttl: float, seen: LeaseInfo | None = None) -> LeaseInfo | None:
    info = _newest(store, name, skey, ttl, seen)[1]
    return info if info is not None and info.live() else None


class Lease:
    """A lease we hold. ``release()`` is idempotent; ``renew()`` False means it was lost."""

    def __init__(self, store: Any, info: LeaseInfo, ttl: float, on_release: Callable[[], None] | None = None):
        self._store = store
        self.info = info
        self.ttl = ttl
        self.released = False
        self._on_release = on_release
        # renew (the keeper thread) and release (the load's finally, or a SIGTERM handler in the
        # main thread) never interleave: a renewal landing after a release would leave a live object
        self._mutex = threading.RLock()

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def skey(self) -> str:
        return self.info.skey

    @property
    def generation(self) -> int:
        return self.info.generation

    @property
    def key(self) -> str:
        return f"{lease_prefix(self.name, self.skey)}{self.generation:010d}.json"

    def renew(self, ttl: float | None = None) -> bool:
        """Extend by writing the next generation for ourselves; False: someone took it over."""
        with self._mutex:
            return self._renew(ttl)

    def _renew(self, ttl: float | None) -> bool:
        if self.released:
            return False
        ttl = self.ttl if ttl is None else ttl
        cur = current(self._store, self.name, self.skey, ttl)
        if cur is None or cur.generation != self.generation or cur.token != self.info.token:
            self._lost()
            return False
        gen = self.generation + 1
        rec = _record(self.name, self.skey, gen, ttl, self.info.token)
        if not self._store.put_if_absent(f"{lease_prefix(self.name, self.skey)}{gen:010d}.json",
                                         json.dumps(rec).encode()):
            self._lost()
            return False
        old = self.key
        self.info = LeaseInfo(self.name, self.skey, gen, rec["host"], rec["pid"], rec["acquired"],
                              rec["expires"], rec["token"])
        self.ttl = ttl
        try:
            self._store.delete(old)
        except RemoteError:
            pass
        return True

    def _lost(self) -> None:
        self.released = True
        if self._on_release:
            self._on_release()

    def release(self) -> None:
        """Delete our generation (idempotent; a lease already expired or lost is left alone)."""
        with self._mutex:
            self._release()

    def _release(self) -> None:
        if self.released:
            return
        self.released = True
        if self.info.live():
            try:
                self._store.delete(self.key)
            except RemoteError:
                pass  # it expires on its own
        if self._on_release:
            self._on_release()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(store: Any, name: str, skey: str, ttl: float) -> Lease | LeaseInfo:
    """Take the lease (a :class:`Lease`) or report its live holder (a :class:`LeaseInfo`).

    Requests: one list, at most one get of the newest generation, one create, and on a lost
    create one get of the winner's object; plus one best-effort delete of the expired
    generation we took over.
    """
    top, cur = _newest(store, name, skey, ttl)
    if cur is not None and cur.live():
        return cur
    gen = top + 1
    token = uuid.uuid4().hex
    rec = _record(name, skey, gen, ttl, token)
    key = f"{lease_prefix(name, skey)}{gen:010d}.json"
    if store.put_if_absent(key, json.dumps(rec).encode()):
        if cur is not None:
            try:
                store.delete(f"{lease_prefix(name, skey)}{cur.generation:010d}.json")
            except RemoteError:
                pass
        return Lease(store, LeaseInfo(name, skey, gen, rec["host"], rec["pid"], rec["acquired"], rec["expires"],
                                      token), ttl)
    winner = _parse(store, name, skey, key, gen, None, ttl)
    if winner is not None and winner.token == token:  # our create landed, its answer was lost
        return Lease(store, winner, ttl)
    if winner is None:  # created and already released between our create and get
        winner = LeaseInfo(name, skey, gen, "?", 0, time.time(), time.time())
    return winner
