"""The small protocol every fleet-cache backend speaks, and the errors it raises.

A backend knows keys relative to the remote's prefix (``blobs/<sha256>``, ``entries/...``) and
nothing about envelopes, signatures or leases; :mod:`.client` builds the fleet protocol on top.
Backends translate their library's failures into the few classes below, so the client can apply
one rule: :class:`RemoteUnavailable` marks the remote down for the process, everything else is a
miss for this one entry.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator, Protocol

from ...base.errors import KernelCacheError


class RemoteError(KernelCacheError):
    """A fleet-cache operation failed; ``reason`` is a short machine code (a miss reason)."""

    reason = "remote_error"

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class RemoteUnavailable(RemoteError):
    """Connection refused, DNS, timeout, authentication/authorization failure: the remote is down."""

    reason = "remote_unavailable"


class RemoteMissing(RemoteError):
    """The object is not there (never written, trimmed, or gone from a shared filesystem)."""

    reason = "remote_missing"


class RemoteCorrupt(RemoteError):
    """Bytes that do not match their recorded size or sha256, or an unreadable envelope."""

    reason = "remote_corrupt"


class RemoteRefused(RemoteError):
    """An envelope this host must not trust: bad signature, unknown key, wrong format or path."""

    reason = "remote_refused"


class RemoteReadOnly(RemoteError):
    """A write was asked of a remote opened in ``read`` mode."""

    reason = "remote_read_only"


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its key relative to the remote prefix, size and last-modified time."""

    key: str
    size: int
    last_modified: datetime


class Backend(Protocol):
    """What the client needs of a store. Every method raises only :class:`RemoteError` subclasses.

    ``op`` counters are kept by the client; a backend issues exactly one logical request per
    call (a listing may page, which only happens beyond ~1000 keys under one prefix).
    """

    description: str  # redacted, for messages

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (a directory-like prefix ending in '/')."""

    def get(self, key: str, limit: int | None = None) -> bytes:
        """The whole object (small objects: envelopes, leases). Missing -> RemoteMissing; larger
        than ``limit`` (default ``kernelcache.base.bounded.MAX_JSON``) -> RemoteCorrupt, found out from
        the object's size before its body is read, else one chunk past the limit (never whole)."""

    def stream(self, key: str) -> Iterator[bytes]:
        """The object in chunks (blobs). Missing -> RemoteMissing; a stall -> RemoteUnavailable."""

    def head(self, key: str) -> ObjectInfo | None:
        """The object's metadata, None when absent."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object atomically unless it exists: True created, False already there."""

    def put_file(self, key: str, path: Path) -> None:
        """Upload a content-addressed blob (the caller checked it was absent or wrong)."""

    def delete(self, key: str) -> None:
        """Remove the object; absent is not an error."""


def consume(chunks: Iterator[bytes], sink: Callable[[bytes], object]) -> int:
    """Feed every chunk to ``sink``; the number of bytes seen."""
    n = 0
    for c in chunks:
        n += len(c)
        sink(c)
    return n
