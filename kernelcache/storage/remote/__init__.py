"""The fleet cache's remote layer: content-addressed blobs, create-if-absent envelopes, leases.

``open_remote(settings)`` gives a :class:`RemoteCache` (or None when no remote is configured).
This layer guarantees bytes (size + sha256 of every file), signatures (when verify keys are
set), the atomic commit (an envelope created last, never overwritten) and bounded time (an
outage marks the remote down for the process). Whether a fetched entry may be *loaded* is the
loader's validation, exactly as for a local entry. Protocol: docs/fleet_cache.md.

Nothing heavy is imported here: obstore and cryptography load only when a remote needs them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from .backend import RemoteCorrupt, RemoteError, RemoteMissing, RemoteReadOnly, RemoteRefused, RemoteUnavailable

if TYPE_CHECKING:
    from ...base.settings import Settings
    from .client import RemoteCache, RemoteEntry, RemoteRef
    from .lease import Lease, LeaseInfo

__all__ = ["open_remote", "RemoteCache", "RemoteRef", "RemoteEntry", "Lease", "LeaseInfo", "RemoteError",
           "RemoteUnavailable", "RemoteMissing", "RemoteCorrupt", "RemoteRefused", "RemoteReadOnly",
           "RemoteDownWarning"]

_LAZY = {"RemoteCache": "client", "RemoteRef": "refs", "RemoteEntry": "refs", "RemoteDownWarning": "client",
         "Lease": "lease", "LeaseInfo": "lease"}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)


def _file_store(u: Any, timeout: float, env: Mapping[str, str]) -> tuple[Any, str]:
    from .filestore import FileBackend

    return FileBackend(u.path, timeout), u.redacted


def _object_store(u: Any, timeout: float, env: Mapping[str, str]) -> tuple[Any, str]:
    from .objstore import ObjectBackend, endpoint_of

    return ObjectBackend(u, timeout, env), f"{u.redacted}@{endpoint_of(u.scheme, env) or 'default'}"


# A parsed URL's scheme (``url.parse`` names each store once; its aliases live there) -> how to
# open that store: (url, timeout, environment) -> (backend, identity). A new store is one row here
# and its URL shape in ``url``; tests/remote/test_url.py holds the two tables equal.
STORES: dict[str, Callable[[Any, float, Mapping[str, str]], tuple[Any, str]]] = {
    "file": _file_store, "s3": _object_store, "gs": _object_store, "az": _object_store,
}


def open_remote(settings: "Settings", environ: Mapping[str, str] | None = None,
                on_down: "Callable[[str, str], None] | None" = None) -> "RemoteCache | None":
    """The configured remote, or None when it is unset or ``off``.

    ``environ`` (default: the process environment, read only) supplies the store's standard
    variables (``AWS_*``). Configuration errors (a bad URL, plain http to a non-loopback
    endpoint, unreadable keys, obstore missing for s3/gs/az) raise KernelCacheError with the
    fix; reachability is not checked here (the first request finds out, and an outage is a miss).
    ``on_down(url, reason)`` reports the first outage of this remote in the process (the loader
    prints one progress line); without it, one :class:`RemoteDownWarning` is issued.
    """
    r = settings.remote
    if not r.enabled:
        return None
    from . import url as url_mod
    from .client import RemoteCache

    u = url_mod.parse(r.url or "")
    import os

    backend, identity = STORES[u.scheme](u, r.timeout, os.environ if environ is None else environ)
    signer = verifier = None
    if r.writable and r.signing_key is not None:
        from .signing import load_signer

        signer = load_signer(r.signing_key)
    if r.verify_keys:
        from .signing import Verifier, load_public_keys

        verifier = Verifier(load_public_keys(r.verify_keys))
    return RemoteCache(backend, u.redacted, r.writable, identity=identity, signer=signer,
                       verifier=verifier, lease_ttl=r.lease_ttl, scheme=u.scheme, on_down=on_down)
