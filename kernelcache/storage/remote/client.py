"""The fleet-cache client: envelopes, blobs, leases over one backend, with outage rules.

Layout under the remote prefix (see docs/fleet_cache.md):
    blobs/<sha256>                          immutable file contents, named by their sha256
    entries/<name>/<skey>/<entry_id>.json   the envelope; created last, create-if-absent: the commit
    leases/<name>/<skey>/<gen>.json         compile leases (lease.py)

Outage rule: the first :class:`RemoteUnavailable` (connection refused, DNS, timeout, 401/403)
marks the remote down for the whole process (one warning); every later call raises
``RemoteUnavailable`` at once, without a request. Everything else is about one entry (missing,
corrupt, refused) and leaves the remote up.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import socket
import threading
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Collection, Iterator

from ...base import bounded, interrupt, process_state
from ...base.events import Upload
from . import blobs, lease as lease_mod
from .backend import ObjectInfo, RemoteCorrupt, RemoteReadOnly, RemoteRefused, RemoteUnavailable
from .lease import Lease, LeaseInfo
from .refs import (
    ENTRIES,
    ENTRY_RE,
    FILE_RE,
    FORMAT,
    NAME_RE,
    SHA_RE,
    RemoteEntry,
    RemoteRef,
    blob_key,
    check_ids,
    entry_key,
    file_digest,
)
from .signing import Signer, Verifier, canonical

__all__ = ["RemoteCache", "RemoteDownWarning", "RemoteEntry", "RemoteRef", "blob_key", "entry_key", "file_digest",
           "check_ids", "reset_down_state", "SHA_RE"]

OPS = ("list", "get", "put", "head", "delete")

_state_lock = threading.Lock()
_down: dict[str, str] = {}  # remote identity -> reason (process-wide)
_warned: set[str] = set()
_held: "set[Lease]" = set()


class RemoteDownWarning(UserWarning):
    """The fleet cache became unreachable; this process goes on with its local cache."""


def reset_down_state() -> None:
    """Forget which remotes were marked down (tests; a long-lived process after an outage)."""
    with _state_lock:
        _down.clear()
        _warned.clear()


process_state.register("remote.down_state", reset_down_state)


@atexit.register
def _release_held() -> None:
    """A process that exits holding a lease frees it for the fleet (quietly, best effort)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for held in list(_held):
            held.release()


interrupt.add_cleanup(_release_held)  # SIGTERM frees them too (interrupt.sigterm_cleanup)


class _Guarded:
    """The backend behind the outage rule and the request counters (what lease.py talks to)."""

    def __init__(self, rc: "RemoteCache"):
        self._rc = rc

    def __getattr__(self, op: str) -> Callable[..., Any]:
        kind = {"list": "list", "get": "get", "stream": "get", "head": "head", "put_if_absent": "put",
                "put_file": "put", "delete": "delete"}[op]
        fn = getattr(self._rc._backend, op)

        def call(*args: Any, **kw: Any) -> Any:
            self._rc._check_up()
            self._rc._count(kind)
            try:
                out = fn(*args, **kw)
            except RemoteUnavailable as e:
                self._rc._mark_down(str(e))
                raise
            return self._watch(out) if op == "stream" else out

        return call

    def _watch(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        try:
            yield from chunks
        except RemoteUnavailable as e:
            self._rc._mark_down(str(e))
            raise


class RemoteCache:
    """One fleet-cache remote. Thread-safe; cheap to create (down state is process-wide)."""

    def __init__(self, backend: Any, url: str, writable: bool, identity: str | None = None,
                 signer: Signer | None = None, verifier: Verifier | None = None, lease_ttl: float = 600.0,
                 scheme: str = "", on_down: Callable[[str, str], None] | None = None):
        self._backend = backend
        self.url = url
        self.scheme = scheme
        self.writable = writable
        self.identity = identity or url
        self.signer = signer
        self.verifier = verifier
        self.lease_ttl = lease_ttl
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(OPS, 0)
        self.store = _Guarded(self)
        self._on_down = on_down  # (url, reason): the caller reports the outage; else one warning

    def __repr__(self) -> str:
        mode = "readwrite" if self.writable else "read"
        return f"RemoteCache({self.url}, {mode}{', down' if self.down_reason else ''})"

    # -- outage state and counters -----------------------------------------------------------
    @property
    def down_reason(self) -> str | None:
        return _down.get(self.identity)

    def _check_up(self) -> None:
        reason = _down.get(self.identity)
        if reason is not None:
            raise RemoteUnavailable(f"fleet cache {self.url} is marked down for this process: {reason}")

    def _mark_down(self, reason: str) -> None:
        with _state_lock:
            _down.setdefault(self.identity, reason)
            first = self.identity not in _warned
            _warned.add(self.identity)
        if first and self._on_down is not None:
            self._on_down(self.url, reason)
        elif first:
            warnings.warn(f"kernelcache: fleet cache {self.url} is unavailable ({reason}); this process goes on "
                          "with its local cache only", RemoteDownWarning, stacklevel=4)

    def _count(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1

    def request_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def need_writable(self, what: str) -> None:
        """RemoteReadOnly before any request unless this remote was opened ``readwrite``."""
        if not self.writable:
            raise RemoteReadOnly(f"{what}: fleet cache {self.url} is read-only here (KERNELCACHE_REMOTE_MODE=read)")

    # -- reading -----------------------------------------------------------------------------
    def list_entries(self, name: str, skey: str) -> list[RemoteRef]:
        """Entries of (name, skey), newest first. One list request."""
        check_ids(name, skey)
        refs = []
        for o in self.store.list(f"{ENTRIES}{name}/{skey}/"):
            ref = self._ref(o, name, skey)
            if ref is not None:
                refs.append(ref)
        refs.sort(key=lambda r: (r.last_modified, r.entry_id), reverse=True)
        return refs

    def kernel_entries(self, name: str) -> list[RemoteRef]:
        """Entries of ``name`` under every source key, newest first (a miss that says what the
        fleet holds under other keys). One list request."""
        if not NAME_RE.match(name or ""):
            raise ValueError(f"bad kernel name for the remote: {name!r}")
        refs = [r for o in self.store.list(f"{ENTRIES}{name}/") if (r := self._ref(o, name)) is not None]
        return sorted(refs, key=lambda r: (r.last_modified, r.entry_id), reverse=True)

    @staticmethod
    def _ref(o: ObjectInfo, name: str | None = None, skey: str | None = None) -> RemoteRef | None:
        parts = o.key.split("/")
        if len(parts) != 4 or parts[0] + "/" != ENTRIES or not parts[3].endswith(".json"):
            return None
        n, s, eid = parts[1], parts[2], parts[3][:-5]
        if (name is not None and n != name) or (skey is not None and s != skey) or not ENTRY_RE.match(eid):
            return None
        return RemoteRef(n, s, eid, o.key, o.size, o.last_modified)

    def all_entries(self) -> list[RemoteRef]:
        """Every entry on the remote (ls, verify, trim): one listing of ``entries/``."""
        refs = [r for o in self.store.list(ENTRIES) if (r := self._ref(o)) is not None]
        refs.sort(key=lambda r: (r.name, r.skey, r.last_modified), reverse=False)
        return refs

    def read_entry(self, ref: RemoteRef) -> RemoteEntry:
        """Fetch and check the envelope: format, path fields, files, signature (per settings)."""
        where = f"{self.url}/{ref.key}"
        cap = bounded.MAX_JSON  # the listing's size first (no request), then the read stops at it
        if ref.size > cap:
            raise RemoteCorrupt(f"{where}: envelope of {ref.size} bytes is larger than any manifest (> {cap})")
        raw = self.store.get(ref.key, cap)
        try:
            env = bounded.loads(raw, f"{where}: envelope")
        except bounded.Refused as e:
            raise RemoteCorrupt(str(e)) from None
        except (ValueError, UnicodeDecodeError):
            raise RemoteCorrupt(f"{where}: envelope is not JSON") from None
        if not isinstance(env, dict):
            raise RemoteCorrupt(f"{where}: envelope is not a JSON object")
        if env.get("format") != FORMAT:
            raise RemoteRefused(f"{where}: envelope format {env.get('format')!r}, this kernelcache reads {FORMAT}")
        for k in ("name", "skey", "entry_id"):
            if env.get(k) != getattr(ref, k):
                raise RemoteRefused(f"{where}: envelope says {k}={env.get(k)!r}, its path says {getattr(ref, k)!r}")
        files = env.get("files")
        manifest = env.get("manifest")
        if not isinstance(files, dict) or not files or not isinstance(manifest, dict):
            raise RemoteRefused(f"{where}: envelope lacks files or manifest")
        checked: dict[str, tuple[str, int]] = {}
        for fname, meta in files.items():
            if not isinstance(fname, str) or not FILE_RE.match(fname) or not isinstance(meta, dict):
                raise RemoteRefused(f"{where}: bad file entry {fname!r}")
            sha, size = meta.get("sha256"), meta.get("size")
            if not isinstance(sha, str) or not SHA_RE.match(sha) or not isinstance(size, int) or size < 0 \
                    or isinstance(size, bool):
                raise RemoteRefused(f"{where}: bad sha256/size for {fname!r}")
            checked[fname] = (sha, size)
        signed_by = self.verifier.verify(env, where) if self.verifier is not None else None
        return RemoteEntry(ref, manifest, checked, signed_by, str(env.get("created", "")), str(env.get("host", "")),
                           env)

    def fetch_files(self, entry: RemoteEntry, dest_dir: Path) -> None:
        """Stream each blob into ``dest_dir/<file name>`` while hashing; size and sha256 must match.

        A mismatch deletes what this call wrote and raises RemoteCorrupt; a missing blob (trimmed)
        raises RemoteMissing; an outage mid-download raises RemoteUnavailable (and marks down).
        """
        dest_dir = Path(dest_dir)
        dest_dir.mkdir(parents=True, exist_ok=True)
        written: list[Path] = []
        try:
            for fname, (sha, size) in sorted(entry.files.items()):
                target = dest_dir / fname
                written.append(target)
                self._fetch_one(entry, fname, sha, size, target)
        except BaseException:
            for p in written:
                try:
                    p.unlink()
                except OSError:
                    pass
            raise

    def _fetch_one(self, entry: RemoteEntry, fname: str, sha: str, size: int, target: Path) -> None:
        where = f"{self.url}/{blob_key(sha)} ({fname} of {entry.ref.name}/{entry.ref.entry_id})"
        h, n = hashlib.sha256(), 0
        with open(target, "wb") as f:
            for chunk in self.store.stream(blob_key(sha)):
                n += len(chunk)
                if n > size:
                    raise RemoteCorrupt(f"{where}: larger than the recorded {size} bytes")
                h.update(chunk)
                f.write(chunk)
        if n != size:
            raise RemoteCorrupt(f"{where}: {n} bytes, the envelope records {size}")
        if h.hexdigest() != sha:
            raise RemoteCorrupt(f"{where}: sha256 {h.hexdigest()[:16]}… does not match its name")

    # -- writing -----------------------------------------------------------------------------
    def publish(self, name: str, skey: str, entry_id: str, manifest: dict, files: dict[str, Path]) -> Upload:
        """Upload missing blobs, then create the envelope (the commit point).

        Returns ``UPLOADED`` (our envelope is the entry), ``EXISTS`` (an intact entry was
        there: nothing written), ``REPAIRED`` (it was there, a damaged or missing blob of it was
        re-uploaded from our bytes: content-addressed, so never different bytes) or
        ``REPLACED`` (its envelope was unreadable or named blobs we do not hold and that are
        gone or damaged: that broken envelope was swapped for ours). An intact entry is never
        overwritten.
        """
        self.need_writable("publish")
        check_ids(name, skey, entry_id)
        if not files:
            raise ValueError("publish: an entry needs at least one file")
        for fname in files:
            if not FILE_RE.match(fname):
                raise ValueError(f"publish: bad file name {fname!r}")
        canonical(manifest)  # JSON-serialisable, no NaN: fail before any request
        key = entry_key(name, skey, entry_id)
        digests = {fname: file_digest(Path(p)) for fname, p in files.items()}
        ours = {sha: Path(files[fname]) for fname, (sha, _) in digests.items()}
        if self.store.head(key) is not None:
            status = blobs.heal(self.store, key, ours)
            if status is not None:
                return status
            self.store.delete(key)  # unreadable, or names blobs nobody here can restore
            replaced = True
        else:
            replaced = False
        for fname, (sha, size) in sorted(digests.items()):
            blobs.ensure_blob(self.store, sha, size, ours[sha])
        env = {"format": FORMAT, "name": name, "skey": skey, "entry_id": entry_id,
               "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": socket.gethostname(),
               "files": {f: {"sha256": s, "size": n} for f, (s, n) in sorted(digests.items())},
               "manifest": manifest}
        if self.signer is not None:
            env = self.signer.sign(env)
        won = self.store.put_if_absent(key, json.dumps(env, sort_keys=True, separators=(",", ":")).encode())
        return (Upload.REPLACED if replaced else Upload.UPLOADED) if won else Upload.EXISTS

    def acquire_lease(self, name: str, skey: str, ttl: float | None = None) -> Lease | LeaseInfo:
        """Take the compile lease (a Lease; release it) or get its live holder (a LeaseInfo)."""
        self.need_writable("acquire_lease")
        check_ids(name, skey)
        got = lease_mod.acquire(self.store, name, skey, self.lease_ttl if ttl is None else ttl)
        if isinstance(got, Lease):
            with _state_lock:
                _held.add(got)
            got._on_release = lambda: _held.discard(got)
        return got

    def lease_holder(self, name: str, skey: str, seen: LeaseInfo | None = None) -> LeaseInfo | None:
        """The live holder of the compile lease, if any (readers may call this). ``seen``: the
        holder a poll read before (not read again while its generation is the newest)."""
        check_ids(name, skey)
        return lease_mod.live_holder(self.store, name, skey, self.lease_ttl, seen)

    def wait_for_entries(self, name: str, skey: str, deadline_s: float,
                         on_wait: Callable[[LeaseInfo | None, float], None] | None = None,
                         known: Collection[str] = ()) -> list[RemoteRef]:
        """Sleep while another host holds the compile lease; the entries (all of them) once one
        whose id is not in ``known`` appears, else [] when the lease ends or disappears without
        one, or ``deadline_s`` passes. ``on_wait(holder, waited_s)`` per poll.

        Why ``known``: entries of the same source key built against other headers (a sibling
        refused here) are already listed; waking on them made a waiter spin, then build the
        kernel the holder was about to upload. Each poll is one LIST of the entries and one LIST
        of the lease (its object is read again only when its generation changes). Polls every
        0.2 s for the first 10 s (most kernels build in seconds, and a waiter's wall time is the
        build plus up to one poll interval), then back off to 0.5 s until 30 s and to 2 s for
        long CUDA builds. The sleep ends at once when the process is interrupted
        (``interrupt.Interrupted``: a parallel warm's Ctrl-C, SIGTERM).
        """
        known = set(known)
        start = time.monotonic()
        delay = 0.2
        holder: LeaseInfo | None = None
        while True:
            refs = self.list_entries(name, skey)
            if any(r.entry_id not in known for r in refs):
                return refs
            holder = self.lease_holder(name, skey, holder)
            waited = time.monotonic() - start
            if holder is None:  # the holder may have committed, then released
                refs = self.list_entries(name, skey)
                return refs if any(r.entry_id not in known for r in refs) else []
            if on_wait is not None:
                on_wait(holder, waited)
            remaining = deadline_s - waited
            if remaining <= 0:
                return []
            interrupt.sleep(max(0.05, min(delay, remaining, holder.expires - time.time())))
            delay = 0.2 if waited < 10 else min(delay * 1.5, 0.5 if waited < 30 else 2.0)
