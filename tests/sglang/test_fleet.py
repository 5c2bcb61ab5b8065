"""Issue 41: a host with no compiler loads SGLang's n-gram module from the fleet (SeaweedFS on
127.0.0.1): the entry the route built is pushed, and a fresh host (its own kernelcache cache, a
fresh ``SGLANG_JIT_CACHE_DIR``, no C/C++ compiler on PATH, ``CXX`` naming none) gets it without
compiling. Before the route, SGLang's own JIT on that host fails to build it."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.remote.servers import S3Server
from tests.support import compilerless_path

from .conftest import MODULE, SgEnv

PUSH = f"import kernelcache as kc; print(len(kc.push([{MODULE!r}])))"


@pytest.fixture(scope="module")
def seaweed_sg(tmp_path_factory: pytest.TempPathFactory):
    server = S3Server("seaweed", tmp_path_factory.mktemp("seaweed-sg"))
    try:
        server.start()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    yield server
    server.stop()


def test_a_host_without_compilers_loads_the_module_from_the_fleet(sg: SgEnv, seaweed_sg: S3Server,
                                                                  tmp_path: Path) -> None:
    remote = {**seaweed_sg.env, "KERNELCACHE_REMOTE": seaweed_sg.url("sglang-route")}
    pushed = sg.run(code=PUSH, KERNELCACHE_REMOTE_MODE="readwrite", **remote)
    assert int(pushed.stdout.split()[-1]) >= 1, pushed.stdout + pushed.stderr[-2000:]
    before = sg.links()
    host = tmp_path / "host-b"
    bare = {"KERNELCACHE_DIR": str(host / "cache"), "KERNELCACHE_LOCK_DIR": str(host / "locks"),
            "KERNELCACHE_REMOTE_MODE": "read", "CXX": str(host / "no-such-compiler"),
            "PATH": compilerless_path(tmp_path / "bin"), "SGLANG_JIT_CACHE_DIR": str(host / "sglang-jit"), **remote}
    out = sg.probe(**bare)
    assert out["routed"] and out["so"].startswith(str(host / "cache")), out
    assert sg.links() == before and out["BFS"] == sg.routed_answer["BFS"]  # type: ignore[attr-defined]
    assert not (host / "sglang-jit").exists()
