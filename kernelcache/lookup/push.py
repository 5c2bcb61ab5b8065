"""push: upload entries already in the local cache to the fleet cache. Never compiles.

Why from the cache's own records, not from specs: an entry built while the remote was down, a
user kernel or a drop-in kernel has no shipped spec to rebuild from, and a push must not cost a
compile. Each manifest records the source key a fetch looks under (``Manifest.skey``, written at
build time), so the entry is published under exactly the key other hosts will ask for. Only
binaries built here whose bytes still match their manifest are published; an entry already on
the remote has its blobs checked and a damaged one repaired (``fleet.upload``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..base import events
from ..base.errors import KernelCacheError, UnknownKernel
from ..base.settings import Settings, resolve
from ..base.spec import KernelSpec
from ..storage.entry import Entry
from ..storage.local import LocalStore


@dataclass(frozen=True)
class PushResult:
    """One local entry and what pushing it did."""

    name: str
    entry_id: str
    status: events.Upload
    reason: str = ""

    def as_dict(self) -> dict:
        return {"name": self.name, "entry_id": self.entry_id, "status": self.status, "reason": self.reason}


def push(names: Iterable[str | KernelSpec] | str | KernelSpec | None = None,
         settings: Settings | None = None) -> list[PushResult]:
    """Upload the local cache's entries (all, or those of ``names``) to the fleet cache.

    Needs a remote in ``readwrite`` mode (KernelCacheError otherwise); a name the cache holds no
    entry of raises :class:`UnknownKernel` listing the names it does hold.
    """
    s = resolve(settings)
    if not s.remote_writable:
        raise KernelCacheError("push needs a remote in readwrite mode (--remote URL --remote-mode readwrite, or "
                               "KERNELCACHE_REMOTE and KERNELCACHE_REMOTE_MODE=readwrite)")
    if isinstance(names, (str, KernelSpec)):
        names = [names]
    wanted = [n.name if isinstance(n, KernelSpec) else str(n) for n in (names or [])]
    store = LocalStore(s)
    entries = [e for e in store.entries() if e.origin == events.Place.LOCAL]
    held = sorted({e.manifest.name for e in entries})
    for n in wanted:
        if n not in held:
            raise UnknownKernel(n, held)
    from . import fleet

    with events.logging_to(s.log):
        return [_push_one(s, e, fleet) for e in sorted(entries, key=lambda e: (e.manifest.name, e.entry_id))
                if not wanted or e.manifest.name in wanted]


def _push_one(s: Settings, entry: Entry, fleet) -> PushResult:
    m = entry.manifest
    if m.origin:
        return PushResult(m.name, m.entry_id, events.Upload.SKIPPED, f"not built here ({m.origin})")
    if not m.skey:
        return PushResult(m.name, m.entry_id, events.Upload.SKIPPED, "no source key recorded (an entry of an older "
                                                         "kernelcache): rebuild it to share it")
    problem = _bytes_problem(entry)
    if problem:
        return PushResult(m.name, m.entry_id, events.Upload.SKIPPED, f"{problem} (kernelcache verify --fix quarantines it)")
    status, detail = fleet.upload(s, entry)
    return PushResult(m.name, m.entry_id, status, detail)


def _bytes_problem(entry: Entry) -> str:
    """Publish only the bytes the manifest describes (a damaged local copy must not spread)."""
    from ..storage.remote.refs import file_digest

    try:
        sha, size = file_digest(entry.so_path)
    except OSError as e:
        return f"binary unreadable: {e}"
    m = entry.manifest
    if (sha, size) != (m.so_sha256, m.so_size):
        return f"local binary does not match its manifest ({size} bytes, sha256 {sha[:16]}...)"
    return ""
