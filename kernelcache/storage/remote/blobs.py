"""Blobs on the fleet cache: their state, their repair, and the repair of an entry's blobs.

Why apart from the client: publishing (``RemoteCache.publish``) and maintenance
(``remote verify --fix``, ``ops``) share these checks over one backend, and neither needs the
client's outage and lease machinery to ask them.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ...base import bounded
from ...base.events import Upload
from .backend import RemoteCorrupt, RemoteMissing
from .refs import SHA_RE, blob_key


def hash_blob(store: Any, sha: str) -> tuple[str, int]:
    """(sha256, size) of what ``store`` holds under blobs/<sha>."""
    h, n = hashlib.sha256(), 0
    for chunk in store.stream(blob_key(sha)):
        h.update(chunk)
        n += len(chunk)
    return h.hexdigest(), n


def blob_state(store: Any, sha: str, size: int) -> str:
    """``"ok"``, ``"missing"`` or ``"damaged"`` (size or sha256 differ): one HEAD, and a full
    read only when the size matches."""
    info = store.head(blob_key(sha))
    if info is None:
        return "missing"
    if info.size != size:
        return "damaged"
    try:
        return "ok" if hash_blob(store, sha) == (sha, size) else "damaged"
    except RemoteMissing:
        return "missing"


def ensure_blob(store: Any, sha: str, size: int, path: Path) -> None:
    """Upload ``path`` as blobs/<sha> unless an intact copy is there (a damaged one is replaced)."""
    state = blob_state(store, sha, size)
    if state != "ok":
        store.put_file(blob_key(sha), path, replace=state == "damaged")


def heal(store: Any, key: str, ours: dict[str, Path]) -> Upload | None:
    """Check an existing entry's blobs (size and sha256) and re-upload a damaged or missing
    one from ``ours`` (sha256 -> local file with those bytes).

    ``EXISTS``: intact; ``REPAIRED``: every damaged blob re-uploaded; None (broken): the envelope
    is unreadable or names a bad blob whose bytes we do not hold.
    """
    try:
        env = bounded.loads(store.get(key), key)
        recorded = {str(m["sha256"]): int(m["size"]) for m in env["files"].values()}
    except (RemoteMissing, RemoteCorrupt):
        return None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not recorded or not all(SHA_RE.match(sha) for sha in recorded):
        return None
    repaired = False
    for sha, size in sorted(recorded.items()):
        if blob_state(store, sha, size) == "ok":
            continue
        if sha not in ours:
            return None
        store.put_file(blob_key(sha), ours[sha], replace=True)
        repaired = True
    return Upload.REPAIRED if repaired else Upload.EXISTS
