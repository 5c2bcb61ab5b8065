"""Acceptance 7: host A builds a torch extension through the drop-in and uploads it to a real S3
server (SeaweedFS on 127.0.0.1); host B, with no compiler on PATH and ``CXX=/bin/false``, loads
it from the fleet cache with status ``remote`` and compiles nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from .helpers import PARAM_V2, SEED_NAME, write_seed

from ..remote.hosts import Host, without_compilers_path
from ..remote.servers import S3Server

REPO = Path(__file__).resolve().parents[2]
LOAD = r"""
import json, sys
import torch
from kernelcache import cpp_extension
import kernelcache as kc
spec = cpp_extension.make_spec({name!r}, [{src!r}])
mod, res = kc.load_with_result(spec)
print("RESULT " + json.dumps({{"status": res.status, "window": mod.Param().min_match_window_size,
                               "file": mod.__file__, "stats": kc.stats()}}))
"""


@pytest.fixture(scope="module")
def seaweed_server(tmp_path_factory):
    pytest.importorskip("obstore")
    server = S3Server("seaweed", tmp_path_factory.mktemp("seaweed-torch"))
    try:
        server.start()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    yield server
    server.stop()


def _env(server: S3Server, url: str, mode: str, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KERNELCACHE_"))}
    env.update(server.env)
    env.update(KERNELCACHE_REMOTE=url, KERNELCACHE_REMOTE_MODE=mode,
               PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""))
    env.pop("TORCH_EXTENSIONS_DIR", None)
    env.update(extra)
    return env


def _load(host: Host, src: Path, **env: str) -> dict:
    code = LOAD.format(name=SEED_NAME, src=str(src))
    p = subprocess.run([sys.executable, "-c", code], env=host.env(**env), capture_output=True, text=True,
                       timeout=900, stdin=subprocess.DEVNULL)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"host {host.name} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")


def test_host_without_compiler_loads_the_extension_from_s3(seaweed_server, tmp_path):
    url = seaweed_server.url(f"t/torch-{uuid.uuid4().hex[:8]}")
    src = write_seed(tmp_path / "pkg", PARAM_V2)
    a = Host("a", tmp_path / "host_a", _env(seaweed_server, url, "readwrite"))
    built = _load(a, src)
    assert built["status"] == "built" and built["window"] == 4 and a.compiles() == 1
    assert len(a.events("remote_upload")) == 1
    b = Host("b", tmp_path / "host_b", _env(seaweed_server, url, "read", PATH=without_compilers_path()))
    got = _load(b, src, CXX="/bin/false")
    assert got["status"] == "remote" and got["window"] == 4
    assert b.compiles() == 0 and len(b.events("remote_hit")) == 1
    assert got["file"].startswith(str(b.cache))  # loaded from B's local disk after the fetch
    again = _load(b, src, CXX="/bin/false")
    assert again["status"] == "hit" and again["window"] == 4 and b.compiles() == 0
