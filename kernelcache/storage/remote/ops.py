"""Maintenance of a fleet-cache remote, for the CLI: ls, verify (and fix), trim (file:// only), ping, keygen.

Object stores trim themselves (lifecycle rules on ``entries/``, ``blobs/`` and ``leases/``; see
docs/fleet_cache.md); ``remote_trim`` exists for shared filesystems, which have none.
"""
from __future__ import annotations

import functools
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from ...base import bounded
from ...base.errors import KernelCacheError
from .backend import RemoteCorrupt, RemoteError, RemoteMissing, RemoteRefused, RemoteUnavailable
from .blobs import hash_blob, heal
from .client import RemoteCache
from .filestore import FileBackend
from .refs import BLOBS, ENTRIES, LEASES, SHA_RE, blob_key
from .signing import keygen as _keygen

TEMP_GRACE_S = 3600.0  # a writer's temp file / unreferenced blob younger than this may be in flight


def remote_ls(rc: RemoteCache) -> list[dict]:
    """Every entry: name, skey, entry_id, size (of the envelope), last_modified. One listing."""
    return [{"name": r.name, "skey": r.skey, "entry_id": r.entry_id, "size": r.size,
             "last_modified": r.last_modified.isoformat(timespec="seconds"), "key": r.key}
            for r in rc.all_entries()]


def _blobs(rc: RemoteCache) -> dict[str, Any]:
    return {o.key.split("/", 1)[1]: o for o in rc.store.list(BLOBS) if SHA_RE.match(o.key.split("/", 1)[-1])}


def remote_verify(rc: RemoteCache) -> list[dict]:
    """Re-hash every blob the remote holds and check every envelope against them.

    One row per entry (``ok``, ``reason`` code, ``detail``, ``key``), plus one row per
    unreferenced blob whose bytes do not match its name. An outage aborts with RemoteUnavailable.
    """
    blobs = _blobs(rc)
    hashed: dict[str, tuple[str, int] | str] = {}

    def blob_state(sha: str) -> tuple[str, int] | str:
        if sha not in hashed:
            if sha not in blobs:
                hashed[sha] = "remote_missing"
            else:
                try:
                    hashed[sha] = hash_blob(rc.store, sha)
                except RemoteMissing:
                    hashed[sha] = "remote_missing"
        return hashed[sha]

    rows: list[dict] = []
    referenced: set[str] = set()
    for ref in rc.all_entries():
        row: dict[str, Any] = {"kind": "entry", "name": ref.name, "skey": ref.skey, "entry_id": ref.entry_id,
                               "key": ref.key, "ok": True, "reason": "", "detail": "", "signed_by": None}
        try:
            entry = rc.read_entry(ref)
            row["signed_by"] = entry.signed_by
            referenced.update(sha for sha, _ in entry.files.values())
            for fname, (sha, size) in sorted(entry.files.items()):
                st = blob_state(sha)
                if isinstance(st, str):
                    raise RemoteMissing(f"{fname}: blob {sha[:16]}… is missing (trimmed?)")
                if st != (sha, size):
                    raise RemoteCorrupt(f"{fname}: blob {sha[:16]}… holds {st[1]} bytes with sha256 {st[0][:16]}…, "
                                        f"the envelope records {size} bytes")
        except RemoteUnavailable:
            raise
        except (RemoteMissing, RemoteCorrupt, RemoteRefused) as e:
            row.update(ok=False, reason=e.reason, detail=str(e))
        rows.append(row)
    for sha in sorted(set(blobs) - referenced):  # a referenced one is reported with its entry
        st = blob_state(sha)
        if isinstance(st, tuple) and st[0] != sha:
            rows.append({"kind": "blob", "name": "<blob>", "skey": "", "entry_id": sha, "key": blob_key(sha), "ok": False,
                         "reason": "remote_corrupt", "detail": f"blob {sha} holds bytes with sha256 {st[0]}"})
    return rows


def _referenced(rc: RemoteCache, refs: list) -> set[str]:
    """Blob names referenced by these envelopes (parsed without verifying: trim keeps them)."""
    out: set[str] = set()
    for ref in refs:
        try:
            env = bounded.loads(rc.store.get(ref.key), ref.key)
            out.update(str(m.get("sha256")) for m in env.get("files", {}).values() if isinstance(m, dict))
        except (RemoteMissing, RemoteCorrupt, ValueError, AttributeError, TypeError):
            continue
    return out


def remote_trim(rc: RemoteCache, max_age_s: float, dry_run: bool = False,
                on_remove: Callable[[str], None] | None = None) -> list[str]:
    """file:// only: delete envelopes older than ``max_age_s``, then unreferenced blobs, then
    expired leases and dead writers' temp files. Returns what was (``dry_run``: would be)
    removed; ``on_remove(key)`` is called before each deletion, so a caller can say what goes.

    Destructive, so ``readwrite`` only (``RemoteReadOnly`` before any request), except a dry
    run. Readers racing a trim see a missing envelope or blob: a miss, never a wrong load. Blobs
    younger than min(max_age, 1 h) are kept even when unreferenced: a writer may be between
    uploading them and committing its envelope.
    """
    backend = rc._backend
    if not isinstance(backend, FileBackend):
        raise KernelCacheError(f"{rc.url}: object stores trim themselves; configure a lifecycle rule "
                               "(docs/fleet_cache.md, 'Trimming') instead of `kernelcache remote trim`")
    if not dry_run:
        rc.need_writable("trim")
    now = time.time()
    plan: list[tuple[str, Callable[[], None]]] = []
    keep = []

    def deleter(key: str) -> Callable[[], None]:
        return lambda: rc.store.delete(key)

    for ref in rc.all_entries():
        if ref.last_modified.timestamp() < now - max_age_s:
            plan.append((ref.key, deleter(ref.key)))
        else:
            keep.append(ref)
    referenced = _referenced(rc, keep)
    grace = min(max_age_s, TEMP_GRACE_S)
    for sha, obj in sorted(_blobs(rc).items()):
        if sha not in referenced and obj.last_modified.timestamp() < now - grace:
            plan.append((blob_key(sha), deleter(blob_key(sha))))
    for obj in rc.store.list(LEASES):
        expired = obj.last_modified.timestamp() < now - rc.lease_ttl
        try:
            expired = float(bounded.loads(rc.store.get(obj.key), obj.key)["expires"]) < now
        except (RemoteMissing, RemoteCorrupt, ValueError, KeyError, TypeError):
            pass
        if expired:
            plan.append((obj.key, deleter(obj.key)))
    for p in backend.stale_temp_files(TEMP_GRACE_S):
        plan.append((str(p.relative_to(backend.root)), functools.partial(_unlink_quiet, p)))
    if dry_run:
        return [key for key, _ in plan]
    removed: list[str] = []
    for key, delete in plan:
        if on_remove is not None:
            on_remove(key)
        delete()
        removed.append(key)
    for prefix in (ENTRIES, LEASES):
        backend.remove_empty_dirs(prefix)
    return removed


def _unlink_quiet(p: Path) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


def remote_fix(rc: RemoteCache, rows: list[dict], ours: dict[str, Path]) -> list[dict]:
    """Repair what :func:`remote_verify` found (``readwrite``): a damaged or missing blob is
    re-uploaded from ``ours`` (sha256 -> a local file with exactly those bytes); an envelope
    whose bad blob nobody here holds is deleted (readers stop trying it, and the next build or
    push publishes the entry afresh); a damaged unreferenced blob is deleted. Refused envelopes
    (signatures) are left alone. One row per action: key, action, detail."""
    rc.need_writable("verify --fix")
    out: list[dict] = []
    for row in rows:
        if row.get("ok"):
            continue
        if row["kind"] == "blob":
            rc.store.delete(blob_key(row["entry_id"]))
            out.append({"key": blob_key(row["entry_id"]), "action": "deleted", "detail": row["detail"]})
            continue
        if row["reason"] not in ("remote_corrupt", "remote_missing"):
            out.append({"key": row["key"], "action": "left", "detail": f"{row['reason']}: not a damage kind --fix "
                                                                     "repairs"})
            continue
        status = heal(rc.store, row["key"], ours)
        if status is None:
            rc.store.delete(row["key"])
            out.append({"key": row["key"], "action": "deleted", "detail": "its damaged blob is held by no local "
                                                                        "entry here; the next build re-publishes it"})
        else:
            out.append({"key": row["key"], "action": status, "detail": row["detail"]})
    return out


def remote_ping(rc: RemoteCache | None) -> tuple[bool, str]:
    """For ``doctor``: is the remote reachable with these credentials (and writable, in readwrite)?
    (ok, "URL (mode): what was found"): the URL is named once."""
    if rc is None:
        return True, "off"
    mode = "readwrite" if rc.writable else "read"
    t0 = time.monotonic()
    try:
        rc.store.list("ping/")
        extra = ""
        if rc.writable:
            key = f"ping/{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            rc.store.put_if_absent(key, b"kernelcache write probe\n")
            rc.store.delete(key)
            extra = ", write probe ok"
    except RemoteError as e:
        detail = str(e)
        for prefix in (rc.url, getattr(rc._backend, "description", None)):
            if prefix and detail.startswith(f"{prefix}: "):
                detail = detail[len(prefix) + 2:]
        return False, f"{rc.url} ({mode}): {e.reason}: {detail}"
    ms = (time.monotonic() - t0) * 1000
    signed = f", signing as {rc.signer.key_id}" if rc.signer else ""
    verify = f", {len(rc.verifier.keys)} verify key(s)" if rc.verifier else ""
    return True, f"{rc.url} ({mode}): reachable in {ms:.0f} ms{extra}{signed}{verify}"


def keygen(private_path: Path | str, public_path: Path | str) -> str:
    """Write an Ed25519 key pair for signed manifests; returns the key id."""
    return _keygen(private_path, public_path)
