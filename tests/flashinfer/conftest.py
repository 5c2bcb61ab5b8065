"""FlashInfer's JIT through the route, on this CPU box (nvcc, arch forced to sm_90a, no GPU).

The module is FlashInfer's smallest real JIT module with a generated source:
``gen_act_and_mul_module("silu")`` (one rendered ``.cu`` in the workspace's ``generated/``).
It is built once per session by FlashInfer's own JIT (workspace ``ws-own``) and once through
the route (workspace ``ws-a``); every test then runs real subprocesses against that state.
Compiles are counted by the link steps of a counting ``CXX`` wrapper (both FlashInfer's ninja
and kernelcache link through ``$CXX``). Every compile also reads ``kc_probe.h`` (forced in by
``FLASHINFER_EXTRA_CUDAFLAGS=-include ...``), a header a test may edit with its mtime restored.
Loading a CUDA module needs no GPU (the CUDA runtime loads lazily); linking needs ``-lcuda``,
so a stub ``libcuda.so`` is built for the link (``FLASHINFER_EXTRA_LDFLAGS=-L<stub>``).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import REPO, WRAPPER

HANG_S = 1800
PROBE = """
import json, sys
from flashinfer.jit import activation
spec = activation.gen_act_and_mul_module("silu")
mod = spec.build_and_load()
print(json.dumps({"fn": mod.silu_and_mul is not None, "library": str(spec.get_library_path()),
                  "jit": str(spec.jit_library_path), "compiled": bool(spec.is_compiled),
                  "source": str(spec.sources[0])}))
"""


@dataclass
class FiEnv:
    tmp: Path
    cache: Path
    locks: Path
    count_log: Path
    cxx: Path
    stub: Path
    probe_h: Path

    def env(self, ws: Path, route: bool = True, extra_cuda: str = "", **extra: str) -> dict[str, str]:
        e = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "FLASHINFER_", "KC_"))}
        e.update({
            "KERNELCACHE_DIR": str(self.cache), "KERNELCACHE_LOCK_DIR": str(self.locks),
            "KERNELCACHE_LOG": "0", "KERNELCACHE_CUDA_ARCH": "9.0", "KC_COUNT_LOG": str(self.count_log),
            "CXX": str(self.cxx), "CUDA_HOME": "/usr/local/cuda",
            "FLASHINFER_WORKSPACE_BASE": str(ws), "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
            "FLASHINFER_EXTRA_LDFLAGS": f"-L{self.stub}",
            "FLASHINFER_EXTRA_CUDAFLAGS": f"-include {self.probe_h} {extra_cuda}".strip(),
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        })
        if route:
            e["KERNELCACHE_PATCH"] = "flashinfer"
        e.update(extra)
        return e

    def start(self, ws: Path, route: bool = True, code: str = PROBE, **kw: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", code], env=self.env(ws, route, **kw), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=self.tmp)

    def run(self, ws: Path, route: bool = True, code: str = PROBE, check: bool = True, **kw: str
            ) -> subprocess.CompletedProcess:
        # cwd: the session's dir, not this repository's (whose kernelcache.egg-info, rewritten by
        # tests that build a wheel, is part of what a recalled call witnesses)
        p = subprocess.run([sys.executable, "-c", code], env=self.env(ws, route, **kw), capture_output=True,
                           text=True, timeout=HANG_S, cwd=self.tmp)
        if check and p.returncode != 0:
            raise AssertionError(f"probe failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-4000:]}")
        return p

    def probe(self, ws: Path, route: bool = True, **kw: str) -> dict:
        return json.loads(self.run(ws, route, **kw).stdout.splitlines()[-1])

    def links(self) -> int:
        try:
            return sum(1 for line in self.count_log.read_text().splitlines() if line.startswith("link "))
        except FileNotFoundError:
            return 0

    def entries(self) -> list[Path]:
        return sorted(p for p in (self.cache / "v1" / "entries" / "silu_and_mul").glob("*/*") if p.is_dir())


def _flashinfer_usable() -> str | None:
    if not shutil.which("nvcc") and not Path("/usr/local/cuda/bin/nvcc").exists():
        return "nvcc not found"
    p = subprocess.run([sys.executable, "-c", "import flashinfer.jit.activation"], capture_output=True, text=True,
                       timeout=600)
    return None if p.returncode == 0 else "flashinfer not importable: " + p.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def fi(tmp_path_factory: pytest.TempPathFactory) -> FiEnv:
    """The session's FlashInfer state: one build by FlashInfer (ws-own), one through the route (ws-a)."""
    why = _flashinfer_usable()
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("fi")
    cxx = tmp / "bin" / "cxx-wrapper"
    cxx.parent.mkdir()
    cxx.write_text(WRAPPER)
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    stub = tmp / "stub"
    stub.mkdir()
    (stub / "empty.c").write_text("int kc_libcuda_stub;\n")
    subprocess.run(["gcc", "-shared", "-o", str(stub / "libcuda.so"), "-Wl,-soname,libcuda.so.1",
                    str(stub / "empty.c")], check=True, timeout=120)
    probe_h = tmp / "inc" / "kc_probe.h"
    probe_h.parent.mkdir()
    probe_h.write_text("#define KC_PROBE 1\n")
    env = FiEnv(tmp=tmp, cache=tmp / "cache", locks=tmp / "locks", count_log=tmp / "compiles.log", cxx=cxx,
                stub=stub, probe_h=probe_h)
    own = env.probe(tmp / "ws-own", route=False)
    assert env.links() == 1 and own["library"].startswith(str(tmp / "ws-own"))
    routed = env.probe(tmp / "ws-a")
    assert env.links() == 2 and routed["library"].startswith(str(env.cache)), routed
    return env


@dataclass
class Toolkits:
    """The CUDA toolkit again at other paths (copies with their sizes and mtimes: the same bytes
    at another real path, other inodes, as on a host whose toolkit was installed elsewhere);
    ``other`` has one header the module reads with other bytes (its mtime kept), and CUDA 13's
    layout whatever this machine's: headers under ``targets/x86_64-linux/include``, ``include`` a
    link to it (the H100 machine's toolkit; this one's is the other way round)."""

    real: Path
    same: Path
    other: Path
    changed: str  # the header of ``other`` that differs, relative to it, where it really lies
    real_header: str  # the same header in the real toolkit, relative to it, where it really lies
    real_stats: dict  # (size, mtime_ns, ctime_ns, inode) of real files before the copies were made


def _farm(src: Path, dst: Path) -> None:
    """Copies, never hard links: a hard link changes the ctime of the real toolkit's files (their
    link count), and every other test process that witnessed them by stat (hit records, recalled
    calls) would then see a toolkit that changed under it (~315 MB each, seconds)."""
    shutil.copytree(src, dst, symlinks=True)


@pytest.fixture(scope="session")
def toolkits(fi: FiEnv) -> Toolkits:
    real = Path(os.path.realpath("/usr/local/cuda"))
    base = fi.tmp / "toolkits"
    # where the header really lies in a toolkit: one whose include/ is a link to
    # targets/<arch>-linux/include (CUDA 13.0 on the H100 machine) records it there
    header = "include/cuda_runtime_api.h"
    real_header = os.path.relpath(os.path.realpath(real / header), real)
    real_stats = {rel: _stat(real / rel) for rel in ("bin/nvcc", real_header, "include/cuda.h")}
    same, other = base / "host-b" / "cuda", base / "host-c" / "cuda"
    _farm(real, same)
    _farm(real, other)
    _targets_layout(other)
    changed = os.path.relpath(os.path.realpath(other / header), other)
    assert changed == f"targets/{_TARGET}/{header}", changed
    f = other / changed
    st = f.stat()
    data = f.read_bytes()
    f.write_bytes(data.replace(b"#define", b"#define ", 1))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    return Toolkits(real=real, same=same, other=other, changed=changed, real_header=real_header,
                    real_stats=real_stats)


_TARGET = "x86_64-linux"


def _targets_layout(tk: Path) -> None:
    """CUDA 13's layout: the headers in ``targets/<arch>/include``, ``include`` a link to it (a
    toolkit already so is left as it is)."""
    inc, tgt = tk / "include", tk / "targets" / _TARGET / "include"
    if inc.is_symlink():
        return
    if tgt.is_symlink():
        tgt.unlink()
    tgt.parent.mkdir(parents=True, exist_ok=True)
    inc.rename(tgt)
    inc.symlink_to(Path("targets") / _TARGET / "include")


def _stat(p: Path) -> tuple[int, int, int, int]:
    st = p.stat()
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def without_cuda_on_path(env: dict[str, str]) -> str:
    return ":".join(d for d in env["PATH"].split(":") if "cuda" not in d)
