"""Object-store backend (S3 and compatibles, GCS, Azure) through obstore, the optional extra.

Credentials and endpoint come from the store's standard environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL`` ...; GCS and
Azure: their own variables, read by obstore). Plain http is allowed only for loopback endpoints.

Time bounds: ~2 s connect timeout; small requests (list, envelope, lease, head, put) end within
``timeout``; blob downloads may take longer but a stall longer than ``timeout`` between two reads
ends them. Retries are few and bounded by the same deadline, so a dead endpoint costs seconds.
"""
from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator, Mapping

from ...base import bounded
from ...base.errors import KernelCacheError
from .backend import ObjectInfo, RemoteCorrupt, RemoteError, RemoteMissing, RemoteUnavailable
from .url import RemoteURL, is_loopback_endpoint

INSTALL_HINT = "pip install 'kernelcache[remote]'"
CHUNK = 1 << 20
_S3_ENV = {  # standard variable -> obstore S3 config key (explicit, so a given environ is the one used)
    "AWS_ACCESS_KEY_ID": "access_key_id",
    "AWS_SECRET_ACCESS_KEY": "secret_access_key",
    "AWS_SESSION_TOKEN": "session_token",
    "AWS_REGION": "region",
    "AWS_DEFAULT_REGION": "region",
}
_S3_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
_GCS_ENDPOINT_ENV = ("GOOGLE_STORAGE_ENDPOINT", "STORAGE_EMULATOR_HOST")
_AZ_ENDPOINT_ENV = ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT")
_USERINFO = re.compile(r"(//)[^/@\s]+@")
_AUTH_STATUS = re.compile(r"status code: (401|403)\b")
_QUERY = re.compile(r"(https?://[^\s?]+)\?\S*")


def import_obstore() -> Any:
    try:
        import obstore  # noqa: F401
        import obstore.store  # noqa: F401
    except ImportError:
        raise KernelCacheError(
            f"the fleet cache for s3://, gs:// and az:// URLs needs obstore: {INSTALL_HINT}") from None
    return obstore


def endpoint_of(scheme: str, environ: Mapping[str, str]) -> str | None:
    names = {"s3": _S3_ENDPOINT_ENV, "gs": _GCS_ENDPOINT_ENV, "az": _AZ_ENDPOINT_ENV}[scheme]
    for n in names:
        v = (environ.get(n) or "").strip()
        if v:
            return v
    return None


def _clean(msg: str) -> str:
    """First line of a library message, without userinfo or query strings, capped."""
    line = (msg.strip().splitlines() or [""])[0]
    line = _USERINFO.sub(r"\1", line)
    line = _QUERY.sub(r"\1?…", line)
    return line[:300]


class ObjectBackend:
    def __init__(self, url: RemoteURL, timeout: float = 10.0, environ: Mapping[str, str] | None = None):
        import os

        obstore = import_obstore()
        env = os.environ if environ is None else environ
        self.description = url.redacted
        self.timeout = max(0.5, float(timeout))
        endpoint = endpoint_of(url.scheme, env)
        allow_http = bool(endpoint) and is_loopback_endpoint(endpoint or "")
        if endpoint and endpoint.lower().startswith("http://") and not allow_http:
            raise KernelCacheError(
                f"the fleet-cache endpoint {_clean(endpoint)} uses plain http; only loopback endpoints may "
                "(use https)")
        config: dict[str, Any] = {}
        if url.scheme == "s3":
            for var, key in _S3_ENV.items():
                v = (env.get(var) or "").strip()
                if v and key not in config:
                    config[key] = v
            if endpoint:
                config["endpoint"] = endpoint
                config.setdefault("virtual_hosted_style_request", False)
        connect = timedelta(seconds=min(2.0, self.timeout))
        retry = {"max_retries": 2, "retry_timeout": timedelta(seconds=self.timeout),
                 "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=1),
                             "base": 2}}
        small = {"allow_http": allow_http, "connect_timeout": connect, "timeout": timedelta(seconds=self.timeout)}
        large = {"allow_http": allow_http, "connect_timeout": connect,
                 "read_timeout": timedelta(seconds=self.timeout),
                 "timeout": timedelta(seconds=max(120.0, 20 * self.timeout))}
        make = obstore.store.from_url
        try:
            self._small = make(url.raw, config=config or None, client_options=small, retry_config=retry)
            self._large = make(url.raw, config=config or None, client_options=large, retry_config=retry)
        except Exception as e:  # bad configuration: say what, never the secret
            raise KernelCacheError(f"cannot configure the fleet cache {url.redacted}: {_clean(str(e))}") from None
        self._obs = obstore
        from obstore import exceptions as ex

        self._ex = ex

    # -- error translation -------------------------------------------------------------------
    def _translate(self, err: BaseException, what: str) -> RemoteError:
        ex = self._ex
        msg = f"{self.description}: {what}: {_clean(str(err)) or type(err).__name__}"
        if isinstance(err, (FileNotFoundError, ex.NotFoundError)):
            return RemoteMissing(msg)
        if isinstance(err, (ex.PermissionDeniedError, ex.UnauthenticatedError)) or _AUTH_STATUS.search(str(err)):
            return RemoteUnavailable(msg + " (check the store's credentials)")
        return RemoteUnavailable(msg)

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except RemoteError:
            raise
        except Exception as e:
            raise self._translate(e, what) from None

    @staticmethod
    def _info(meta: Mapping[str, Any]) -> ObjectInfo:
        return ObjectInfo(str(meta["path"]), int(meta["size"]), meta["last_modified"])

    # -- protocol ----------------------------------------------------------------------------
    def list(self, prefix: str) -> list[ObjectInfo]:
        p = prefix.strip("/")

        def run() -> list[ObjectInfo]:
            out: list[ObjectInfo] = []
            for batch in self._obs.list(self._small, p or None, chunk_size=1000):
                out.extend(self._info(m) for m in batch)
            return out

        return self._call(f"list {p}/", run)

    def get(self, key: str, limit: int | None = None) -> bytes:
        cap = bounded.MAX_JSON if limit is None else limit

        def run() -> bytes:
            res = self._obs.get(self._small, key)
            size = int(res.meta["size"])
            if size > cap:  # known from the response's headers: its body is never read
                raise RemoteCorrupt(f"{self.description}: {key}: {size} bytes, more than the {cap} read of one")
            try:
                return bounded.capped(res.stream(min_chunk_size=min(CHUNK, cap + 1)), cap, f"{self.description}: {key}")
            except bounded.Refused as e:  # grew past its announced size
                raise RemoteCorrupt(str(e)) from None

        return self._call(f"get {key}", run)

    def stream(self, key: str) -> Iterator[bytes]:
        res = self._call(f"get {key}", self._obs.get, self._large, key)
        it = iter(self._call(f"get {key}", res.stream, min_chunk_size=CHUNK))
        while True:
            try:
                chunk = next(it)
            except StopIteration:
                return
            except Exception as e:
                raise self._translate(e, f"download {key}") from None
            yield bytes(chunk)

    def head(self, key: str) -> ObjectInfo | None:
        try:
            return self._info(self._call(f"head {key}", self._obs.head, self._small, key))
        except RemoteMissing:
            return None

    def put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            self._obs.put(self._small, key, data, mode="create", use_multipart=False)
            return True
        except (self._ex.AlreadyExistsError, self._ex.PreconditionError):
            return False
        except Exception as e:
            err = self._translate(e, f"create {key}")
            if isinstance(e, (self._ex.PermissionDeniedError, self._ex.UnauthenticatedError)):
                raise err from None
        return self._settle(key, data, err)

    def _settle(self, key: str, data: bytes, err: RemoteError) -> bool:
        """A create that timed out or failed in transit may have lost a race the server was still
        arbitrating (SeaweedFS answers the creates of one key a second apart, so the eighth of eight
        writers waits ~7 s; S3 answers 409 to a conflicting one): contention is not an outage.
        What the key holds decides: our bytes -> we won, other bytes -> we lost, nothing -> the
        store really did fail, and ``err`` stands. Creates carry unique bytes (leases a token)."""
        try:
            return self.get(key) == data
        except RemoteMissing:
            raise err from None

    def put_file(self, key: str, path: Path, replace: bool = False) -> None:
        # Blobs are named by their sha256: an upload racing another writer's upload of the same
        # name writes the same bytes, so a plain (possibly multipart) put is safe here.
        self._call(f"upload {key}", self._obs.put, self._large, key, Path(path), mode="overwrite")

    def delete(self, key: str) -> None:
        try:
            self._call(f"delete {key}", self._obs.delete, self._small, key)
        except RemoteMissing:
            pass
