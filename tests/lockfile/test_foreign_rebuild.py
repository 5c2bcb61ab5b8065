"""Issue 39 follow-ups: drop-in kernels (tvm-ffi ``load_inline``, FlashInfer's generated module)
rebuilt from the lock alone, and preloaded at the arch their lock block recorded.

An app loads a tvm-ffi inline kernel and FlashInfer 0.7.4's ``silu_and_mul`` (sm_90a, nvcc on this
CPU machine) while recording a lock in cache A. Then, with caches that never saw the recording:
``build --lock --arch 9.0 --out ROOT`` in an empty cache B (the lock's ``.sources`` sidecar is all
it has of the generated sources), the app served from ROOT with an empty cache and no building,
and ``warm --lock`` under ``KERNELCACHE_CUDA_ARCH=9.0`` (FlashInfer's block is locked for 9.0a).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import HANG_S

APP = '''
import json, os
import kernelcache as kc
from kernelcache import tvm_ffi as jit
out = {}
mod = jit.load_inline("kc_inl_lock", cpp_sources="int64_t seven() { return 7; }", functions=["seven"])
out["seven"] = mod.seven()
from flashinfer.jit import activation  # routed by KERNELCACHE_PATCH=flashinfer
out["silu"] = activation.gen_act_and_mul_module("silu").build_and_load().silu_and_mul is not None
out["builds"] = kc.stats()["builds"]
print("RESULT " + json.dumps(out))
'''
FOREIGN = {"kc_inl_lock", "silu_and_mul"}


def _problem() -> str | None:
    if not shutil.which("nvcc") and not Path("/usr/local/cuda/bin/nvcc").exists():
        return "nvcc not found"
    p = subprocess.run([sys.executable, "-c", "import flashinfer.jit.activation"], capture_output=True, text=True,
                       timeout=HANG_S)
    return None if p.returncode == 0 else "flashinfer not importable"


class Rec:
    def __init__(self, tmp: Path) -> None:
        self.tmp, self.app, self.lock = tmp, tmp / "app", tmp / "app" / "kernels.lock"
        self.stub = tmp / "stub"

    def env(self, cache: str, **extra: str) -> dict[str, str]:
        e = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "FLASHINFER_"))}
        e.update({"KERNELCACHE_DIR": str(self.tmp / cache), "KERNELCACHE_LOCK_DIR": str(self.tmp / "locks"),
                  "KERNELCACHE_LOG": "0", "KERNELCACHE_CUDA_ARCH": "9.0", "CUDA_HOME": "/usr/local/cuda",
                  "KERNELCACHE_PATCH": "flashinfer", "FLASHINFER_WORKSPACE_BASE": str(self.tmp / f"ws-{cache}"),
                  "FLASHINFER_CUDA_ARCH_LIST": "9.0a", "FLASHINFER_EXTRA_LDFLAGS": f"-L{self.stub}"})
        e.update(extra)
        return e

    def run(self, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=env, cwd=self.app, capture_output=True, text=True, timeout=HANG_S,
                              stdin=subprocess.DEVNULL)

    def app_run(self, env: dict[str, str]) -> dict:
        p = self.run([sys.executable, str(self.app / "app.py")], env)
        assert p.returncode == 0, p.stderr[-4000:]
        line = next(ln for ln in reversed(p.stdout.splitlines()) if ln.startswith("RESULT "))
        return json.loads(line[len("RESULT "):])

    def kc(self, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
        return self.run([sys.executable, "-m", "kernelcache", *argv], env)


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> Rec:
    why = _problem()
    if why:
        pytest.skip(why)
    r = Rec(tmp_path_factory.mktemp("lock-foreign"))
    r.stub.mkdir()
    (r.stub / "empty.c").write_text("int kc_libcuda_stub;\n")
    subprocess.run(["gcc", "-shared", "-o", str(r.stub / "libcuda.so"), "-Wl,-soname,libcuda.so.1",
                    str(r.stub / "empty.c")], check=True, timeout=HANG_S)
    r.app.mkdir()
    (r.app / "app.py").write_text(APP)
    out = r.app_run(r.env("cache-rec", KERNELCACHE_LOCK_RECORD=str(r.lock)))
    assert out["seven"] == 7 and out["silu"]
    return r


def test_lock_carries_generated_sources(rec: Rec) -> None:
    kernels = json.loads(rec.lock.read_text())["kernels"]
    assert FOREIGN <= set(kernels)
    side = rec.lock.with_name("kernels.lock.sources")
    for name in FOREIGN:
        gen = kernels[name]["rebuild"]["generated"]
        assert gen and kernels[name]["root"].startswith("${KERNELCACHE_DIR}/")
        for digest in gen.values():  # content-addressed, committed with the lock
            assert (side / digest.split(":", 1)[1]).is_file()
    before = rec.lock.read_bytes()  # re-recording (all hits) leaves the lock and its sidecar as they were
    names = sorted(p.name for p in side.iterdir())
    rec.app_run(rec.env("cache-rec", KERNELCACHE_LOCK_RECORD=str(rec.lock)))
    assert rec.lock.read_bytes() == before and sorted(p.name for p in side.iterdir()) == names


@pytest.fixture(scope="module")
def root(rec: Rec) -> Path:
    """``build --lock`` on a runner whose cache never saw the recording."""
    out = rec.tmp / "root"
    p = rec.kc(rec.env("cache-empty-build"), "build", "--lock", str(rec.lock), "--arch", "9.0", "--out", str(out))
    rows = [ln.split() for ln in p.stdout.splitlines() if ln.strip()]
    assert p.returncode == 0 and {r[0] for r in rows} >= FOREIGN and not [r for r in rows if r[1] == "failed"], \
        p.stdout + p.stderr[-3000:]
    return out


def _warm_lock(rec: Rec, cache: str, **extra: str) -> None:
    p = rec.kc(rec.env(cache, KERNELCACHE_NO_BUILD="1", **extra), "warm", "--lock", str(rec.lock), "--json")
    assert p.returncode == 0, (cache, p.stdout[-2000:], p.stderr[-3000:])
    assert "silu_and_mul" in p.stdout and "kc_inl_lock" in p.stdout


def test_build_lock_from_an_empty_cache_and_the_root_serves_it(rec: Rec, root: Path) -> None:
    entries = {p.name for p in (root / "v1" / "entries").iterdir() if p.is_dir()}
    assert FOREIGN <= entries
    node = rec.env("cache-node", KERNELCACHE_PREBUILT=str(root), KERNELCACHE_NO_BUILD="1",
                   KERNELCACHE_LOCK=str(rec.lock))
    assert rec.app_run(node) == {"seven": 7, "silu": True, "builds": 0}
    # a server's startup on a node: the locked set from the root, generated sources from the sidecar
    _warm_lock(rec, "cache-node-warm", KERNELCACHE_PREBUILT=str(root))


def test_warm_lock_loads_flashinfer_at_its_locked_arch(rec: Rec) -> None:
    lock = json.loads(rec.lock.read_text())["kernels"]
    assert list(lock["silu_and_mul"]["archs"]) == ["9.0a"]  # and this host says KERNELCACHE_CUDA_ARCH=9.0
    _warm_lock(rec, "cache-rec")
