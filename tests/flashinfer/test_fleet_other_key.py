"""Issue 46: a FlashInfer miss on a host that cannot build, while the fleet holds the module built
from other inputs (another source key: here the serving host's ``FLASHINFER_EXTRA_CUDAFLAGS``
adds a define). The miss says that entries exist under another source key and which input differs,
as a prebuilt root's refusal does; before, it said only "no entry for this kernel and source key"."""
from __future__ import annotations

import json
from pathlib import Path

from tests.support import compilerless_path

from .conftest import FiEnv

PUSH = "import kernelcache as kc; print(len(kc.push(['silu_and_mul'])))"
PROBE = """
import json
from flashinfer.jit import activation
spec = activation.gen_act_and_mul_module("silu")
try:
    spec.build_and_load()
    print(json.dumps({"loaded": True}))
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}))
"""
FLAG = "-DKC_SERVING_HOST_FLAG=1"


def test_a_fleet_miss_names_the_other_source_key_and_the_flag(fi: FiEnv, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    remote = {"KERNELCACHE_REMOTE": f"file://{fleet}"}
    pushed = fi.run(fi.tmp / "ws-a", code=PUSH, KERNELCACHE_REMOTE_MODE="readwrite", **remote)
    assert int(pushed.stdout.split()[-1]) >= 1
    before = fi.links()
    host = tmp_path / "host"
    bare = {"KERNELCACHE_DIR": str(host / "cache"), "KERNELCACHE_LOCK_DIR": str(host / "locks"),
            "KERNELCACHE_REMOTE_MODE": "read", "CXX": "", "PATH": compilerless_path(tmp_path / "bin"),
            "FLASHINFER_DISABLE_JIT": "1", **remote}
    same = json.loads(fi.run(host / "ws", code=PROBE, **bare).stdout.splitlines()[-1])
    assert same == {"loaded": True}, same  # the fleet serves the same build
    other = json.loads(fi.run(host / "ws2", code=PROBE, extra_cuda=FLAG, **bare).stdout.splitlines()[-1])
    assert other.get("error") == "FlashInferCacheMiss", other
    msg = other["message"]
    assert "FLASHINFER_DISABLE_JIT is set" in msg and "no entry for this kernel and source key" in msg, msg
    assert "of it under 1 other source key(s)" in msg, msg
    assert f"cuda_cflags: built with [], this spec has ['{FLAG}']" in msg, msg
    assert fi.links() == before
