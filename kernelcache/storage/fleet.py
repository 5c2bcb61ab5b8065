"""The fleet cache seen from one load: fetch into local staging, validate, publish locally; upload.

Why entries never run from the remote: a binary is trusted only after the same checks as a
local entry (installation rule, size, sha256, ELF, identity, exported schemas), and those run
on a local file. So a fetch streams blobs into a private directory of the local cache,
publishes it atomically under ``fetched/``, and hands it to the loader's acceptance step.

Any remote failure is a miss with a reason code (``remote_unavailable``, ``remote_corrupt``,
``remote_refused``, ``remote_missing``) and the load continues locally; the client marks the
remote down after the first connection error, so an outage costs one timeout per process.
"""
from __future__ import annotations

import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import events, toolchain, validate
from .. import manifest as manifest_mod
from ..errors import KernelCacheError
from ..manifest import Manifest
from ..settings import Settings
from .entry import Entry

MAX_CANDIDATES = 8  # entries tried per load (newest first): a handful of requests, never one per sibling
_clients: dict[tuple, Any] = {}
_clients_lock = threading.Lock()
_warned: set[str] = set()


def client(s: Settings):
    """One client per remote configuration and process (it carries the marked-down state)."""
    from .remote import open_remote

    ident = (s.remote, s.remote_mode, s.remote_signing_key, s.remote_verify_keys, s.remote_timeout)
    with _clients_lock:
        rc = _clients.get(ident)
        if rc is None:
            rc = _clients[ident] = open_remote(s)
    return rc


def reset_clients() -> None:
    """Forget clients and their marked-down state (tests)."""
    with _clients_lock:
        _clients.clear()
    _warned.clear()


def _failed(name: str, s: Settings, rc: Any, err: Exception) -> None:
    code = getattr(err, "reason", "remote_error")
    url = getattr(rc, "url", "<remote>")
    events.emit("remote_error", name=name, reason_code=code, remote=url, error=str(err)[:300])
    if getattr(rc, "down_reason", None) and url not in _warned:
        _warned.add(url)
        events.emit("remote_down", name=name, remote=url, reason=rc.down_reason)


def _open(ctx) -> Any:
    try:
        return client(ctx.s)
    except KernelCacheError as e:  # e.g. the [remote] extra is missing: say so once, build locally
        key = f"open:{ctx.s.remote}"
        if key not in _warned:
            _warned.add(key)
            warnings.warn(f"kernelcache: fleet cache disabled for this process: {e}", RuntimeWarning, stacklevel=4)
        events.emit("remote_error", name=ctx.spec.name, reason_code="remote_unavailable", error=str(e)[:300])
        return None


# -- reading -------------------------------------------------------------------------------------
def obtain(ctx, foreign: Callable[[Any, Iterator[Entry], bool], tuple[Any, Entry | None]],
           can_build: bool) -> tuple[Any, Any] | None:
    """A validated module from the fleet, or None (build locally; ``ctx.lease`` may then be held).

    Writers that find nothing take the key's compile lease; if another host holds it, they wait
    (bounded) for its entry instead of compiling the same kernel again.
    """
    from .remote import Lease, RemoteError

    rc = _open(ctx)
    skey = ctx.skey()
    if rc is None or skey is None:
        return None
    name, s = ctx.spec.name, ctx.s
    try:
        got = _fetch_first(ctx, rc, skey, foreign)
        if got is not None or not (rc.writable and can_build):
            return got if got is not None else _wait_as_reader(ctx, rc, skey, foreign, can_build)
        deadline = time.monotonic() + s.remote_wait
        while True:  # bounded: each round ends with an entry, our lease, or the holder's expiry
            lease = rc.acquire_lease(name, skey, s.remote_lease_ttl)
            if isinstance(lease, Lease):
                ctx.lease = lease
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None  # waited long enough for other hosts: build here
            if _wait(ctx, rc, skey, lease, remaining):
                got = _fetch_first(ctx, rc, skey, foreign)
                if got is not None:
                    return got
    except RemoteError as e:
        _failed(name, s, rc, e)
        ctx.refused.append(f"remote {rc.url}: {getattr(e, 'reason', 'remote_error')}: {e}")
        return None


@contextmanager
def lease_kept(ctx) -> Iterator[None]:
    """Renew the compile lease this load holds every third of its TTL while the build runs, so a
    long CUDA build is not taken over; a killed builder stops renewing and its lease expires."""
    lease, ttl = ctx.lease, ctx.s.remote_lease_ttl
    if lease is None:
        yield
        return
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(max(0.5, ttl / 3)):
            try:
                if not lease.renew(ttl):
                    events.emit("remote_lease_lost", name=ctx.spec.name)
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


def _wait_as_reader(ctx, rc, skey: str, foreign, can_build: bool):
    """A host that may not build (no toolchain, no_build) waits for a compile that is under way."""
    if can_build:
        return None
    holder = rc.lease_holder(ctx.spec.name, skey) if hasattr(rc, "lease_holder") else None
    if holder is None:
        return None
    return _fetch_first(ctx, rc, skey, foreign) if _wait(ctx, rc, skey, holder, ctx.s.remote_wait) else None


def _wait(ctx, rc, skey: str, holder, deadline_s: float) -> list:
    t0 = time.monotonic()
    events.emit("remote_lease_wait", name=ctx.spec.name, holder=_who(holder), waited=0.0)

    def on_wait(info, waited: float) -> None:
        events.emit("remote_lease_wait_progress", name=ctx.spec.name, holder=_who(info or holder), waited=waited)

    refs = rc.wait_for_entries(ctx.spec.name, skey, deadline_s, on_wait)
    events.emit("remote_lease_wait_done", name=ctx.spec.name, waited=round(time.monotonic() - t0, 3),
                found=bool(refs))
    return refs


def _who(info) -> str:
    if info is None:
        return "another host"
    return f"pid {getattr(info, 'pid', '?')} on {getattr(info, 'host', '?')}"


def _fetch_first(ctx, rc, skey: str, foreign) -> tuple[Any, Any] | None:
    """Try the newest entries under the source key; the first that validates here wins."""
    from .remote import RemoteError, RemoteUnavailable

    name, store = ctx.spec.name, ctx.store
    refs = rc.list_entries(name, skey)
    if not refs:
        events.emit("remote_miss", name=name, reason_code="remote_no_entry", remote=rc.url)
        ctx.refused.append(f"remote {rc.url}: no entry for this kernel and source key {skey[:16]}")
        return None
    inst = ctx.installation()
    t0 = time.monotonic()
    for ref in refs[:MAX_CANDIDATES]:
        why, code = "", "remote_refused"
        try:
            remote_entry = rc.read_entry(ref)
            m = Manifest.from_dict(remote_entry.manifest)
            if m is None or m.entry_id != ref.entry_id or m.name != name or m.skey != skey:
                why = "manifest does not describe this entry (another kernel or key)"
            elif m.so_name not in remote_entry.files:
                why = f"entry lists no blob for {m.so_name}"
            else:
                rej = validate.installation_refusal(ctx.spec, m, inst, _cuda_loadable, strict_external=True)
                why = str(rej) if rej else ""
            if not why:
                entry = _download(ctx, rc, remote_entry, m, skey)
                mod, local = foreign(ctx, iter([entry]), True)
                if mod is not None:
                    local.touch_used()
                    store.remember_hit(local)
                    events.emit("remote_hit", name=name, entry=m.entry_id, remote=rc.url,
                                seconds=time.monotonic() - t0)
                    return mod, ctx.result("remote", local, f"fetched from {rc.url}")
                why = ctx.refused[-1] if ctx.refused else "rejected after download"
        except RemoteUnavailable:
            raise
        except RemoteError as e:
            why, code = str(e), getattr(e, "reason", "remote_error")
        ctx.refused.append(f"remote {rc.url} {ref.entry_id}: {code}: {why}")
        events.emit("remote_miss", name=name, reason_code=code, remote=rc.url, entry=ref.entry_id, reason=why)
    return None


def _download(ctx, rc, remote_entry, m: Manifest, skey: str) -> Entry:
    """Blobs into a private dir of the local cache, manifest last, then one rename into place."""
    tmp = ctx.store.new_tmp_dir("fetch." + skey)
    try:
        rc.fetch_files(remote_entry, tmp)
        m.origin = f"remote:{rc.url}"
        manifest_mod.write(tmp, m)
        dest, _ = ctx.store.publish_fetched(tmp, m.name, skey, m.entry_id)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Entry(dest, manifest_mod.read(dest) or m, "fetched")


def _cuda_loadable(major: str) -> bool:
    from .prebuilt import cuda_runtime_loadable

    return cuda_runtime_loadable(major)


# -- writing -------------------------------------------------------------------------------------
def fleet_manifest(m: Manifest, is_cuda: bool) -> Manifest:
    """What is published: the full record (dependencies kept: readers re-hash what they have),
    plus the facts a host without this toolchain checks (tvm-ffi version, CUDA major)."""
    out = Manifest.from_dict(m.to_dict())
    assert out is not None
    out.prebuilt = {"tvm_ffi_version": m.tvm_ffi_version, "cuda_major": toolchain.nvcc_major() if is_cuda else None,
                    "built": m.created}
    out.origin = ""
    return out


def upload(ctx, entry: Entry) -> str:
    """Publish a locally built entry (readwrite): blobs first, manifest last, never overwrite.

    Returns "uploaded", "exists" (another writer won) or "failed"/"skipped".
    """
    from .remote import RemoteError

    rc = _open(ctx)
    skey = ctx.skey()
    if rc is None or skey is None or entry.origin != "local":
        return "skipped"
    m = fleet_manifest(entry.manifest, ctx.spec.is_cuda)
    m.skey = skey
    try:
        won = rc.publish(m.name, skey, m.entry_id, m.to_dict(), {m.so_name: Path(entry.so_path)})
    except RemoteError as e:
        _failed(ctx.spec.name, ctx.s, rc, e)
        return "failed"
    events.emit("remote_upload" if won else "remote_upload_exists", name=ctx.spec.name, entry=m.entry_id,
                remote=rc.url)
    return "uploaded" if won else "exists"
