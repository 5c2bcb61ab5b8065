"""Fleet-cache URLs: parse ``s3://bucket/prefix``, ``gs://``, ``az://``, ``file:///path``; redact.

The redacted form is the only one that may appear in a message, an event or a log line: no
userinfo (``user:secret@``), no query string (pre-signed or SAS URLs carry secrets there).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ...base.errors import KernelCacheError

OBJECT_SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "azure": "az", "abfs": "az",
                  "abfss": "az"}
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


@dataclass(frozen=True)
class RemoteURL:
    scheme: str  # "file" | "s3" | "gs" | "az"
    bucket: str  # bucket / container ("" for file)
    prefix: str  # key prefix inside the bucket, no leading/trailing '/' ("" for file)
    path: Path | None  # file:// only: the shared directory
    redacted: str  # safe to log
    raw: str  # as given (may hold secrets: never log)

    @property
    def is_file(self) -> bool:
        return self.scheme == "file"


def redact(url: str) -> str:
    """``url`` without userinfo and query/fragment; anything unparsable becomes '<remote>'."""
    try:
        p = urlsplit(url.strip())
    except ValueError:
        return "<remote>"
    if not p.scheme:
        return "<remote>"
    host = p.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    try:
        port = f":{p.port}" if p.port else ""
    except ValueError:
        port = ""
    return f"{p.scheme}://{host}{port}{p.path}"


def parse(url: str) -> RemoteURL:
    """Parse a fleet-cache URL; KernelCacheError (redacted) when it is not one we serve."""
    raw = url.strip()
    safe = redact(raw)
    try:
        p = urlsplit(raw)
    except ValueError:
        raise KernelCacheError(f"KERNELCACHE_REMOTE is not a URL: {safe}") from None
    scheme = p.scheme.lower()
    if scheme == "file":
        if p.netloc not in ("", "localhost"):
            raise KernelCacheError(f"KERNELCACHE_REMOTE file URL must be file:///absolute/path, got {safe}")
        path = unquote(p.path)
        if not path.startswith("/"):
            raise KernelCacheError(f"KERNELCACHE_REMOTE file URL needs an absolute path, got {safe}")
        return RemoteURL("file", "", "", Path(path), f"file://{path}", raw)
    if scheme not in OBJECT_SCHEMES:
        raise KernelCacheError(
            f"KERNELCACHE_REMOTE scheme {p.scheme!r} is not supported (use s3://bucket/prefix, gs://, az:// "
            f"or file:///shared/path): {safe}")
    if p.username or p.password:
        raise KernelCacheError(
            f"KERNELCACHE_REMOTE must not carry credentials in the URL ({safe}); use the store's standard "
            "environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ...)")
    bucket = p.hostname or ""
    if not bucket:
        raise KernelCacheError(f"KERNELCACHE_REMOTE needs a bucket: {scheme}://BUCKET/prefix, got {safe}")
    prefix = unquote(p.path).strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise KernelCacheError(f"KERNELCACHE_REMOTE prefix has empty or dot segments: {safe}")
    shown = f"{scheme}://{bucket}" + (f"/{prefix}" if prefix else "")
    return RemoteURL(OBJECT_SCHEMES[scheme], bucket, prefix, None, shown, raw)


def is_loopback_endpoint(endpoint: str) -> bool:
    """True for http(s)://127.x / ::1 / localhost endpoints (the only ones plain http may use)."""
    try:
        host = urlsplit(endpoint).hostname or ""
    except ValueError:
        return False
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
