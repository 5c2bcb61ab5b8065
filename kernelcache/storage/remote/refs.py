"""How entries are named on the remote: ids, keys, the listed ref and the checked envelope.

Kept apart from the client because the names are the protocol (docs/fleet_cache.md, "Layout"):
the client, maintenance (ops) and tests all spell ``blobs/<sha256>`` and
``entries/<name>/<skey>/<entry_id>.json`` through these functions only.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

FORMAT = 1
NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
SKEY_RE = re.compile(r"^[0-9a-f]{16,128}$")
ENTRY_RE = re.compile(r"^[0-9a-f]{32}$")
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
FILE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]*$")


@dataclass(frozen=True)
class RemoteRef:
    """One listed entry (no request made for its envelope yet)."""

    name: str
    skey: str
    entry_id: str
    key: str
    size: int
    last_modified: datetime

    @property
    def created(self) -> datetime:
        return self.last_modified


@dataclass(frozen=True)
class RemoteEntry:
    """A fetched, checked envelope. ``files``: file name -> (sha256, size)."""

    ref: RemoteRef
    manifest: dict
    files: dict[str, tuple[str, int]]
    signed_by: str | None  # verified key id; None when unsigned or no verify keys configured
    created: str
    host: str
    envelope: dict = field(repr=False, default_factory=dict)


def check_ids(name: str, skey: str, entry_id: str | None = None) -> None:
    if not NAME_RE.match(name or ""):
        raise ValueError(f"bad kernel name for the remote: {name!r}")
    if not SKEY_RE.match(skey or ""):
        raise ValueError(f"bad source key for the remote (lowercase hex): {skey!r}")
    if entry_id is not None and not ENTRY_RE.match(entry_id or ""):
        raise ValueError(f"bad entry id for the remote (32 lowercase hex): {entry_id!r}")


ENTRIES = "entries/"  # the remote layout: entries/<name>/<skey>/<entry_id>.json (envelopes)
BLOBS = "blobs/"  # blobs/<sha256> (content-addressed files)
LEASES = "leases/"  # leases/<name>/<skey>/<sequence>.json (compile leases)


def entry_key(name: str, skey: str, entry_id: str) -> str:
    return f"{ENTRIES}{name}/{skey}/{entry_id}.json"


def blob_key(sha256: str) -> str:
    return f"{BLOBS}{sha256}"


def file_digest(path: Path) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            n += len(chunk)
    return h.hexdigest(), n
