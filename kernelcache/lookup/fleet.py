"""The fleet stage of a load: fetch a shared entry into the local cache, or hold the compile lease.

Why a stage beside the loader (not a storage module): a fleet hit needs the loader's acceptance
step (validation before dlopen, dlopen, identity, exported schemas), and a fleet miss may hand
the loader a compile lease to hold while it builds. Both cross a small typed interface: the loader
sends a :class:`FleetRequest` (spec, settings, source key, installation facts, its local store
and an ``accept(entry) -> module | Rejection`` door) and gets a :class:`FleetOutcome` back
(a module and its entry, or a lease, plus every miss with its reason). Nothing of the loader's
own state crosses; storage never imports this module.

Why entries never run from the remote: a binary is trusted only after the same checks as a
local entry, and those run on a local file. So a fetch streams blobs into a private directory of
the local cache, publishes it atomically under ``fetched/``, and hands it to the door.

Any remote failure is a miss with a reason code (``remote_unavailable``, ``remote_corrupt``,
``remote_refused``, ``remote_missing``) and the load continues locally; the client marks the
remote down after the first connection error, so an outage costs one timeout per process and
one progress line.
"""
from __future__ import annotations

import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..base import events, process_state
from ..base.errors import KernelCacheError
from ..base.events import Place
from ..base.settings import Settings
from ..base.spec import KernelSpec
from ..entry import manifest as manifest_mod, validate
from ..entry.manifest import Manifest
from ..host import toolchain
from ..storage.entry import Entry
from ..storage.local import LocalStore
from . import search

# Entries whose manifests one listing vets (newest first; one small GET each, no download). Header
# edits leave the source key alone, so a key collects siblings (every PR build in readwrite CI):
# all are tried, up to this guard against a runaway key, and entries left untried are said so.
MAX_CANDIDATES = 256
_clients: dict[tuple, Any] = {}
_clients_lock = threading.Lock()
_announced: set[str] = set()

Accept = Callable[[Entry], "Any | validate.Rejection"]


@dataclass(frozen=True)
class FleetRequest:
    """What the loader hands the fleet stage for one load."""

    spec: KernelSpec
    settings: Settings
    skey: str  # the toolchain-free source key the remote is indexed by
    installation: validate.Installation  # this host's facts, checked against each remote manifest
    store: LocalStore  # where fetched entries are published (``fetched/``) or quarantined
    accept: Accept  # the loader's door: a validated module, or the Rejection
    can_build: bool  # False: a host without a toolchain or with no_build (never takes a lease)


@dataclass
class FleetOutcome:
    """What the fleet stage found: a module (and its fetched entry), or a lease, or neither."""

    remote: str = ""  # the redacted URL
    module: Any = None
    entry: Entry | None = None
    lease: Any = None  # a compile lease this load now holds: build, upload, then release it
    misses: list[str] = field(default_factory=list)  # every refusal, for CacheMissError / explain
    listed: int = 0  # entries the last listing found
    tried: set[str] = field(default_factory=set)  # entry ids vetted in this load (never read twice)
    # refusals not yet reported, (entry id, reason code, why): misses only if the load ends
    # without a remote module; a hit reports them as one count on its remote_hit line
    refused: list[tuple[str, str, str]] = field(default_factory=list)


def client(s: Settings):
    """One client per remote configuration and process (it carries the marked-down state)."""
    from ..storage.remote import open_remote

    r = s.remote
    ident = (r.url, r.mode, r.signing_key, r.verify_keys, r.timeout, r.lease_ttl)
    with _clients_lock:
        rc = _clients.get(ident)
        if rc is None:
            rc = _clients[ident] = open_remote(s, on_down=_announce_down)
    return rc


def reset_clients() -> None:
    """Forget clients and the outages this process announced (tests; a long-lived process)."""
    with _clients_lock:
        _clients.clear()
        _announced.clear()
    from ..storage.remote.client import reset_down_state

    reset_down_state()


process_state.register("fleet.clients", reset_clients)


def _announce_down(url: str, reason: str) -> None:
    """Once per remote and process: the one line a user sees about an outage (no warning too)."""
    with _clients_lock:
        if url in _announced:
            return
        _announced.add(url)
    events.emit(events.Event.REMOTE_DOWN, remote=url, reason=reason)


def open_client(s: Settings, name: str = ""):
    """The client, or None when the remote cannot even be configured (e.g. the [remote] extra is
    missing): announced once, and the load builds locally."""
    try:
        return client(s)
    except KernelCacheError as e:
        from ..storage.remote.url import redact

        _announce_down(redact(s.remote.url or ""), str(e))
        events.emit(events.Event.REMOTE_ERROR, name=name, reason_code="remote_unavailable", error=str(e)[:300])
        return None


def _failed(name: str, rc: Any, err: Exception) -> None:
    events.emit(events.Event.REMOTE_ERROR, name=name, reason_code=getattr(err, "reason", "remote_error"), remote=rc.url,
                error=str(err)[:300])


# -- reading -------------------------------------------------------------------------------------
def obtain(req: FleetRequest) -> FleetOutcome:
    """A validated module from the fleet, or a lease to build under, or misses with reasons.

    Writers that find nothing take the key's compile lease; if another host holds it, they wait
    (bounded, sleeping) for a new entry instead of compiling the same kernel again. Readers that
    may not build wait for a compile under way.
    """
    rc = open_client(req.settings, req.spec.name)
    if rc is None:
        return FleetOutcome(misses=["remote: not configured usably (see the remote_down line)"])
    out = FleetOutcome(remote=rc.url)
    try:
        _obtain(req, rc, out)
    finally:
        if out.module is None:  # the refusals were misses after all: one event each
            for eid, code, why in out.refused:
                events.emit(events.Event.REMOTE_MISS, name=req.spec.name, reason_code=code, remote=rc.url,
                            **({"entry": eid, "reason": why} if eid else {}))
    return out


def _obtain(req: FleetRequest, rc: Any, out: FleetOutcome) -> None:
    from ..storage.remote import Lease, RemoteError

    r = req.settings.remote
    try:
        if _fetch_first(req, rc, out):
            return
        if not (rc.writable and req.can_build):
            holder = None if req.can_build else rc.lease_holder(req.spec.name, req.skey)
            if holder is not None and _wait(req, rc, holder, r.wait, out):
                _fetch_first(req, rc, out)
            return
        deadline = time.monotonic() + r.wait
        while True:  # bounded: each round ends with a new entry, our lease, or the holder's end
            lease = rc.acquire_lease(req.spec.name, req.skey, r.lease_ttl)
            if isinstance(lease, Lease):
                # Another host may have published and released its lease between our list and
                # our create: one more list before compiling again what it just built.
                if _fetch_first(req, rc, out):
                    lease.release()
                    return
                out.lease = lease
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return  # waited long enough for other hosts: build here
            if _wait(req, rc, lease, remaining, out) and _fetch_first(req, rc, out):
                return
    except RemoteError as e:
        _failed(req.spec.name, rc, e)
        out.misses.append(f"remote {rc.url}: {getattr(e, 'reason', 'remote_error')}: {e}")


@contextmanager
def lease_kept(lease: Any, ttl: float, name: str) -> Iterator[None]:
    """Renew a compile lease every third of its TTL while the build runs, so a long CUDA build
    is not taken over; a killed builder stops renewing and its lease expires."""
    if lease is None:
        yield
        return
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(max(0.5, ttl / 3)):
            try:
                if not lease.renew(ttl):
                    events.emit(events.Event.REMOTE_LEASE_LOST, name=name)
                    return
            except Exception:  # noqa: BLE001 - an outage mid-build: the lease just expires
                return

    t = threading.Thread(target=renew, name="kernelcache-lease", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=5)


def _wait(req: FleetRequest, rc: Any, holder: Any, deadline_s: float, out: FleetOutcome) -> list:
    """Sleep on the holder's lease until an entry not tried yet appears: one progress line."""
    name = req.spec.name
    t0 = time.monotonic()
    events.emit(events.Event.REMOTE_LEASE_WAIT, name=name, holder=_who(holder), waited=0.0)

    def on_wait(info: Any, waited: float) -> None:
        events.emit(events.Event.REMOTE_LEASE_WAIT_PROGRESS, name=name, holder=_who(info or holder), waited=waited)

    refs: list = []
    interrupted = True
    try:
        refs = rc.wait_for_entries(name, req.skey, deadline_s, on_wait, known=out.tried)
        interrupted = False
    finally:
        events.emit(events.Event.REMOTE_LEASE_WAIT_DONE, name=name, waited=round(time.monotonic() - t0, 3),
                    found=bool(refs), **({"interrupted": True} if interrupted else {}))
    return refs


def _who(info: Any) -> str:
    if info is None:
        return "another host"
    return f"pid {getattr(info, 'pid', '?')} on {getattr(info, 'host', '?')}"


def _fetch_first(req: FleetRequest, rc: Any, out: FleetOutcome) -> bool:
    """Vet the entries under the source key not tried yet in this load, newest first, on their
    manifests (no download); the first that passes is fetched, and wins if the door accepts it."""
    from ..storage.remote import RemoteError, RemoteUnavailable

    name, skey = req.spec.name, req.skey
    refs = rc.list_entries(name, skey)
    out.listed = len(refs)
    if not refs:
        if not any(code == "remote_no_entry" for _, code, _ in out.refused):
            out.refused.append(("", "remote_no_entry", ""))
            out.misses.append(f"remote {rc.url}: no entry for this kernel and source key {skey[:16]}"
                              + ("" if req.can_build else _other_keys(req, rc)))
        return False
    fresh = [ref for ref in refs if ref.entry_id not in out.tried]
    t0 = time.monotonic()
    for ref in fresh[:MAX_CANDIDATES]:
        out.tried.add(ref.entry_id)
        why, code = "", "remote_refused"
        try:
            remote_entry = rc.read_entry(ref)
            m = Manifest.from_dict(remote_entry.manifest)
            if m is None or m.entry_id != ref.entry_id or m.name != name or m.skey != skey:
                why = "manifest does not describe this entry (another kernel or key)"
            elif m.so_name not in remote_entry.files:
                why = f"entry lists no blob for {m.so_name}"
            else:  # the lookup loop's vetting of a fetched entry: on the manifest, before any download
                rej = search.vet_manifest(req.spec, m, req.installation, Place.FETCHED)
                why = str(rej) if rej else ""
            if not why:
                assert m is not None  # every other case has set why
                entry = _download(req.store, rc, remote_entry, m, skey)
                got = req.accept(entry)
                if not isinstance(got, validate.Rejection):
                    _hit(out, req, entry, rc.url, time.monotonic() - t0)
                    out.module, out.entry = got, entry
                    return True
                req.store.quarantine(entry, str(got))
                why = f"rejected after download: {got}"
        except RemoteUnavailable:
            raise
        except RemoteError as e:
            why, code = str(e), getattr(e, "reason", "remote_error")
        out.misses.append(f"remote {rc.url} {ref.entry_id}: {code}: {why}")
        out.refused.append((ref.entry_id, code, why))
    untried = len(fresh) - MAX_CANDIDATES
    if untried > 0:
        why = f"{untried} more of {len(refs)} entries under this key were not tried (at most {MAX_CANDIDATES} a listing)"
        out.misses.append(f"remote {rc.url}: remote_not_tried: {why}")
        out.refused.append(("", "remote_not_tried", why))
    return False


def _other_keys(req: FleetRequest, rc: Any) -> str:
    """For a miss this host cannot build past: the entries of this kernel under other source keys,
    and what the newest was built from that this spec is not (its recorded ``skey_inputs`` against
    this spec's). One list and one envelope read; nothing when the fleet holds none."""
    from ..key.source_key import diff
    from ..storage.remote import RemoteUnavailable

    said = ""
    try:
        others = [r for r in rc.kernel_entries(req.spec.name) if r.skey != req.skey]
        if not others:
            return ""
        said = f"; {len(others)} entr{'y' if len(others) == 1 else 'ies'} of it under " \
               f"{len({r.skey for r in others})} other source key(s)"
        rec = Manifest.from_dict(rc.read_entry(others[0]).manifest)
        here = req.installation.source(None, None) if req.installation.source is not None else None
        if rec is None or not isinstance(rec.skey_inputs, dict) or here is None:
            return said
        return said + f", the newest ({others[0].skey[:16]}) built from other inputs: " + "; ".join(
            diff(rec.skey_inputs, here[1]) or ["the same recorded inputs"])
    except RemoteUnavailable:
        raise
    except Exception as e:  # noqa: BLE001 - (RemoteError, a malformed manifest) words of a miss never fail it
        return said + f"; other source keys not read ({type(e).__name__}: {e})"


def _hit(out: FleetOutcome, req: FleetRequest, entry: Entry, remote: str, seconds: float) -> None:
    """The hit's one line; the siblings refused before it (other headers) are a count on it. Like
    every load event it names the answering entry, the spec's root and kind (test impact, reports)."""
    fields: dict[str, Any] = {}
    refused = [(code, why) for eid, code, why in out.refused if eid]
    if refused:
        fields = {"refused": len(refused), "refused_reason": refused[0][1][:160]}
    out.refused.clear()
    spec = req.spec
    events.emit(events.Event.REMOTE_HIT, name=spec.name, entry=entry.entry_id, remote=remote, seconds=seconds,
                entry_dir=str(entry.path), root=str(spec.root), kind=spec.kind, **fields)


def _download(store: LocalStore, rc: Any, remote_entry: Any, m: Manifest, skey: str) -> Entry:
    """Blobs into a private dir of the local cache, manifest last, then one rename into place."""
    tmp = store.new_tmp_dir("fetch." + skey)
    try:
        rc.fetch_files(remote_entry, tmp)
        m.origin = f"remote:{rc.url}"
        manifest_mod.write(tmp, m)
        dest, _ = store.publish_fetched(tmp, m.name, skey, m.entry_id)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Entry(dest, manifest_mod.read(dest) or m, Place.FETCHED)


# -- writing -------------------------------------------------------------------------------------
def fleet_manifest(m: Manifest) -> Manifest:
    """What is published: the full record (dependencies kept: readers re-hash what they have),
    plus the facts a host without this toolchain checks (tvm-ffi version, CUDA major)."""
    out = Manifest.from_dict(m.to_dict())
    assert out is not None
    out.prebuilt = {"tvm_ffi_version": m.tvm_ffi_version, "cuda_major": toolchain.nvcc_major() if m.archs else None,
                    "built": m.created}
    out.origin = ""
    return out


def upload(s: Settings, entry: Entry) -> tuple[events.Upload, str]:
    """Publish an entry built on this host (readwrite), under the source key its manifest records.

    Blobs first, the envelope last, never overwriting a whole entry; an entry already there has
    its blobs checked (size and sha256) and a damaged or missing one re-uploaded from these bytes.
    Returns (status, detail): the status an ``Upload`` (detail: why it failed or was skipped).
    """
    from ..storage.remote import RemoteError

    m = entry.manifest
    if entry.origin != Place.LOCAL or m.origin or not m.skey:
        return events.Upload.SKIPPED, "not built here, or no source key recorded"
    rc = open_client(s, m.name)
    if rc is None:
        return events.Upload.FAILED, "the remote cannot be opened (see the remote_down line)"
    pub = fleet_manifest(m)
    try:
        status = rc.publish(m.name, m.skey, m.entry_id, pub.to_dict(), {m.so_name: Path(entry.so_path)})
    except RemoteError as e:
        _failed(m.name, rc, e)
        return events.Upload.FAILED, f"{getattr(e, 'reason', 'remote_error')}: {e}"
    kind = {events.Upload.UPLOADED: events.Event.REMOTE_UPLOAD,
            events.Upload.EXISTS: events.Event.REMOTE_UPLOAD_EXISTS}.get(status, events.Event.REMOTE_REPAIR)
    events.emit(kind, name=m.name, entry=m.entry_id, remote=rc.url, status=status)
    return status, ""
