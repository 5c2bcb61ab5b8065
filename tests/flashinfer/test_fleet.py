"""A host without compilers loads the FlashInfer module from an S3-compatible store (SeaweedFS)."""
from __future__ import annotations

import pytest

from tests.remote.servers import S3Server

from .conftest import FiEnv

PUSH = "import kernelcache as kc; print(len(kc.push(['silu_and_mul'])))"


@pytest.fixture(scope="module")
def seaweed_fi(tmp_path_factory: pytest.TempPathFactory):
    server = S3Server("seaweed", tmp_path_factory.mktemp("seaweed-fi"))
    try:
        server.start()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    yield server
    server.stop()


def test_a_host_without_compilers_loads_the_module_from_the_fleet(fi: FiEnv, seaweed_fi: S3Server) -> None:
    url = seaweed_fi.url("flashinfer-route")
    remote = {**seaweed_fi.env, "KERNELCACHE_REMOTE": url}
    pushed = fi.run(fi.tmp / "ws-a", code=PUSH, KERNELCACHE_REMOTE_MODE="readwrite", **remote)
    assert int(pushed.stdout.split()[-1]) >= 1
    before = fi.links()
    host_b = fi.tmp / "host-b"
    path = ":".join(d for d in fi.env(host_b)["PATH"].split(":") if "cuda" not in d)
    out = fi.probe(host_b / "ws", KERNELCACHE_DIR=str(host_b / "cache"), KERNELCACHE_LOCK_DIR=str(host_b / "locks"),
                   KERNELCACHE_REMOTE_MODE="read", CXX=str(host_b / "no-such-compiler"), PATH=path,
                   FLASHINFER_DISABLE_JIT="1", **remote)
    assert out["fn"] and out["library"].startswith(str(host_b / "cache")) and fi.links() == before
