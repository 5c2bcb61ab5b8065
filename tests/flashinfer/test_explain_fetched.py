"""Issue 46.5: ``kernelcache explain silu_and_mul`` on a host with no compiler, after its load
fetched the module from the fleet (a ``file://`` store): the status is the load's (``fetched``,
the entry it used), with no "why miss" and no request for a KernelSpec (before: ``status: miss``
with "no toolchain")."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import compilerless_path

from .conftest import FiEnv

PUSH = "import kernelcache as kc; print(len(kc.push(['silu_and_mul'])))"
EXPLAIN = "import sys; from kernelcache.cli import main; raise SystemExit(main(sys.argv[1:]))"


def test_explain_after_a_fetch_on_a_compilerless_host(fi: FiEnv, tmp_path: Path) -> None:
    remote = {"KERNELCACHE_REMOTE": f"file://{tmp_path / 'fleet'}"}
    (tmp_path / "fleet").mkdir()
    pushed = fi.run(fi.tmp / "ws-a", code=PUSH, KERNELCACHE_REMOTE_MODE="readwrite", **remote)
    assert int(pushed.stdout.split()[-1]) >= 1
    before = fi.links()
    host = tmp_path / "host-b"
    bare = {"KERNELCACHE_DIR": str(host / "cache"), "KERNELCACHE_LOCK_DIR": str(host / "locks"),
            "KERNELCACHE_REMOTE_MODE": "read", "CXX": "", "PATH": compilerless_path(tmp_path / "bin"),
            "FLASHINFER_DISABLE_JIT": "1", "KERNELCACHE_NO_BUILD": "1", **remote}
    out = fi.probe(host / "ws", **bare)
    assert out["fn"] and out["library"].startswith(str(host / "cache")) and fi.links() == before
    for extra in ([], ["--json"]):
        p = subprocess.run([sys.executable, "-c", EXPLAIN, "explain", "silu_and_mul", *extra],
                           env=fi.env(host / "ws", **bare), capture_output=True, text=True, timeout=600,
                           cwd=fi.tmp)
        assert p.returncode == 0, p.stdout + p.stderr[-3000:]
        if extra:
            info = json.loads(p.stdout)
            assert info["status"] == "fetched" and info["reason"] == "", info
            assert info["entry"].startswith(str(host / "cache" / "v1" / "fetched")), info
        else:
            assert "status:  fetched" in p.stdout and "why miss" not in p.stdout, p.stdout
            assert "KernelSpec" not in p.stdout + p.stderr and "--spec" not in p.stderr, p.stdout + p.stderr
