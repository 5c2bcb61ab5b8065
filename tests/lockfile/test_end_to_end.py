"""Issue 39, acceptance: the kernel lock end to end, on this CPU machine.

An app (written here) loads a user tvm-ffi kernel, a torch extension through the torch patch
(``KERNELCACHE_PATCH=torch``; a pybind11-only extension: seconds, not ``torch/extension.h``'s ~40 s),
FlashInfer 0.7.4's ``silu_and_mul`` (sm_90a, built by nvcc without a GPU, as tests/flashinfer do)
and the shipped n-gram corpus. Once per module (the suite's budget): record the lock, ``lock
check``, ``build --lock --arch 9.0 --out ROOT`` (from the recording's cache: nothing recompiles),
``pack`` and ``pack --oci``. Each test then runs real processes against that state: a "node"
(an environment built from nothing, no compiler on PATH, an empty cache, the OCI layer unpacked
read-only) serving under ``KERNELCACHE_LOCK``, and the three faults: a header edited with its
mtime restored, a kernel the lock lacks, warn mode. Slow-ish (~2 min alone, most of it nvcc).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import HANG_S, KERNEL_SRC, WRAPPER, compilerless_path

from . import oci_check

pytest.importorskip("torch")

EXT_SRC = """#include <pybind11/pybind11.h>
#include "param.h"
namespace py = pybind11;
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<Param>(m, "Param").def(py::init<>())
      .def_readwrite("min_match_window_size", &Param::min_match_window_size);
}
"""
APP = '''
"""A service: its kernels, loaded the way its code loads them."""
import json, os
from pathlib import Path
import kernelcache as kc

here = Path(__file__).resolve().parent
if os.environ.get("APP_PRELOAD"):  # a server's startup: the whole locked set, then ready
    from kernelcache import lockfile
    lockfile.preload(os.environ["KERNELCACHE_LOCK"])
out = {}
for name in ["adder"] + os.environ.get("APP_EXTRA", "").split():
    spec = kc.KernelSpec(name=name, sources=["add.cc"], root=here / "proj", include_dirs=["include"],
                         functions={"add": "Callable[[int, int], int]"})
    out[name] = kc.load(spec).add(2, 3)
from torch.utils.cpp_extension import load  # routed by KERNELCACHE_PATCH=torch
ext = load(name="kc_e2e_ext", sources=[str(here / "ext" / "ext.cpp")])
out["window"] = ext.Param().min_match_window_size
out["ext_file"] = ext.__file__
from kernelcache.kernels import NgramCorpus
c = NgramCorpus(max_trie_depth=4, draft_token_num=3, capacity=100)
c.batch_put([[1, 2, 3]]); c.synchronize()
out["ngram"] = c.batch_get(["r"], [[1]], [1])[0].tolist()
if os.environ.get("APP_FLASHINFER"):  # routed by KERNELCACHE_PATCH=flashinfer
    from flashinfer.jit import activation
    spec = activation.gen_act_and_mul_module("silu")
    out["silu"] = spec.build_and_load().silu_and_mul is not None
    out["silu_library"] = str(spec.get_library_path())
st = kc.stats()
out.update(builds=st["builds"], after_ready=st.get("compiles_after_ready"), ready=st.get("ready"))
print("RESULT " + json.dumps(out))
'''
CPU_KERNELS = {"adder", "kc_e2e_ext", "ngram_corpus"}
LOCKED = CPU_KERNELS | {"silu_and_mul"}


def _flashinfer_problem() -> str | None:
    if not shutil.which("nvcc") and not Path("/usr/local/cuda/bin/nvcc").exists():
        return "nvcc not found"
    p = subprocess.run([sys.executable, "-c", "import flashinfer.jit.activation"], capture_output=True, text=True,
                       timeout=HANG_S)
    return None if p.returncode == 0 else "flashinfer not importable: " + p.stderr.strip().splitlines()[-1]


@dataclass
class World:
    tmp: Path
    app: Path
    lock: Path
    cache: Path  # the recording and build machine's cache
    root: Path
    mount: Path  # the OCI layer unpacked, read-only: what the node mounts
    oci: Path
    wheel: Path
    count_log: Path
    cxx: Path
    stub: Path
    outputs: dict[str, str] = field(default_factory=dict)

    def ci_env(self, **extra: str) -> dict[str, str]:
        """The CI runner / build machine: compilers, nvcc, FlashInfer's knobs."""
        e = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "FLASHINFER_", "KC_"))}
        e.update({"KERNELCACHE_DIR": str(self.cache), "KERNELCACHE_LOCK_DIR": str(self.tmp / "locks"),
                  "KERNELCACHE_LOG": "0", "KERNELCACHE_CUDA_ARCH": "9.0", "KC_COUNT_LOG": str(self.count_log),
                  "CXX": str(self.cxx), "CUDA_HOME": "/usr/local/cuda", "KERNELCACHE_PATCH": "torch,flashinfer",
                  "FLASHINFER_WORKSPACE_BASE": str(self.tmp / "ws"), "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
                  "FLASHINFER_EXTRA_LDFLAGS": f"-L{self.stub}",
                  "TORCH_EXTENSIONS_DIR": str(self.tmp / "torch_extensions")})
        e.update(extra)
        return e

    def node_env(self, name: str, **extra: str) -> dict[str, str]:
        """A node from nothing (``env -i``): no compiler on PATH, an empty cache, the root mounted."""
        host = self.tmp / name
        host.mkdir(exist_ok=True)
        e = {"PATH": compilerless_path(self.tmp / "bin-nocc"), "HOME": str(host), "LANG": "C.UTF-8",
             "KERNELCACHE_DIR": str(host / "cache"), "KERNELCACHE_PREBUILT": str(self.mount),
             "KERNELCACHE_LOCK": str(self.lock), "KERNELCACHE_PATCH": "torch", "KERNELCACHE_LOG": "0",
             "TORCH_EXTENSIONS_DIR": str(host / "torch_extensions")}
        e.update(extra)
        return e

    def run(self, argv: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run(argv, env=env, cwd=self.app, capture_output=True, text=True, timeout=HANG_S,
                           stdin=subprocess.DEVNULL)
        if check and p.returncode != 0:
            raise AssertionError(f"{argv} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}")
        return p

    def kc(self, *argv: str, check: bool = True, **extra: str) -> subprocess.CompletedProcess:
        return self.run([sys.executable, "-m", "kernelcache", *argv], self.ci_env(**extra), check)

    def app_run(self, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
        return self.run([sys.executable, str(self.app / "app.py")], env, check)

    def compiles(self) -> int:
        text = self.count_log.read_text() if self.count_log.exists() else ""
        return sum(1 for line in text.splitlines() if line.split(" ", 1)[0] in ("compile", "link"))


def result(p: subprocess.CompletedProcess) -> dict:
    line = next(ln for ln in reversed(p.stdout.splitlines()) if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _write_app(app: Path) -> None:
    (app / "proj" / "include").mkdir(parents=True)
    (app / "proj" / "add.cc").write_text(KERNEL_SRC.format(fn="add", header="kc_add.h"))
    (app / "proj" / "include" / "kc_add.h").write_text("#define KC_OFFSET 0\n")
    (app / "ext").mkdir()
    (app / "ext" / "ext.cpp").write_text(EXT_SRC)
    (app / "ext" / "param.h").write_text("#pragma once\nstruct Param { int min_match_window_size = 4; };\n")
    (app / "app.py").write_text(APP)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    why = _flashinfer_problem()
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("lock-e2e")
    cxx = tmp / "bin" / "cxx-wrapper"
    cxx.parent.mkdir()
    cxx.write_text(WRAPPER)
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    stub = tmp / "stub"  # linking a CUDA module needs -lcuda; no driver on this machine
    stub.mkdir()
    (stub / "empty.c").write_text("int kc_libcuda_stub;\n")
    subprocess.run(["gcc", "-shared", "-o", str(stub / "libcuda.so"), "-Wl,-soname,libcuda.so.1",
                    str(stub / "empty.c")], check=True, timeout=HANG_S)
    app = tmp / "app"
    _write_app(app)
    w = World(tmp=tmp, app=app, lock=app / "kernels.lock", cache=tmp / "cache", root=tmp / "root",
              mount=tmp / "mount", oci=tmp / "oci", wheel=tmp / "dist", count_log=tmp / "compiles.log", cxx=cxx,
              stub=stub)
    # 1. record (CI or a staging run): the app as it runs, every route
    rec = w.app_run(w.ci_env(KERNELCACHE_LOCK_RECORD=str(w.lock), APP_FLASHINFER="1"))
    w.outputs["record"] = json.dumps(result(rec))
    w.outputs["record_compiles"] = str(w.compiles())
    # 2. the PR check, 3. the CPU runner's build (this cache: hits), 4. the wheel and the image
    w.outputs["check"] = w.kc("lock", "check", str(w.lock)).stdout
    w.outputs["build"] = w.kc("build", "--lock", str(w.lock), "--arch", "9.0", "--out", str(w.root)).stdout
    w.outputs["build_compiles"] = str(w.compiles())
    w.outputs["pack"] = w.kc("pack", str(w.root), "--tag", "e2e", "--out", str(w.wheel)).stdout
    w.outputs["pack_oci"] = w.kc("pack", "--oci", str(w.oci), str(w.root), "--tag", "sm90").stdout
    # 5. the node's mount: the image's layer, unpacked and made read-only
    oci_check.extract(oci_check.validate(w.oci)["sm90"]["layer_tar"], w.mount)
    subprocess.run(["chmod", "-R", "a-w", str(w.mount)], check=True)
    yield w
    subprocess.run(["chmod", "-R", "u+w", str(w.mount)], check=False)


def _entry_names(root: Path) -> set[str]:
    return {p.name for p in (root / "v1" / "entries").iterdir() if p.is_dir()}


def test_record_locks_every_route_and_check_passes(world: World) -> None:
    rec = json.loads(world.outputs["record"])
    assert rec["adder"] == 5 and rec["window"] == 4 and rec["ngram"] == [1, 2, 3] and rec["silu"]
    assert int(world.outputs["record_compiles"]) > 0  # the first run built its kernels
    lock = json.loads(world.lock.read_text())
    kernels = lock["kernels"]
    assert set(kernels) == LOCKED
    assert kernels["kc_e2e_ext"]["kind"] == "torch_python" and kernels["silu_and_mul"]["kind"] == "flashinfer"
    assert kernels["ngram_corpus"]["rebuild"]["route"] == "shipped"
    assert list(kernels["silu_and_mul"]["archs"]) == ["9.0a"]  # FlashInfer's own gencode set
    assert "include/kc_add.h" in kernels["adder"]["inputs"]
    assert "4 kernel(s) as locked" in world.outputs["check"]


def test_build_lock_builds_exactly_the_locked_set(world: World) -> None:
    rows = [line.split() for line in world.outputs["build"].splitlines() if line.strip()]
    assert {r[0] for r in rows} == LOCKED and not [r for r in rows if r[1] == "failed"], world.outputs["build"]
    assert int(world.outputs["build_compiles"]) == int(world.outputs["record_compiles"])  # exported, not rebuilt
    assert _entry_names(world.root) == LOCKED
    lock = json.loads(world.lock.read_text())["kernels"]
    for mf in world.root.glob("v1/entries/*/*/*/manifest.json"):
        m = json.loads(mf.read_text())
        (arch,) = lock[m["name"]]["archs"].values()
        assert m["so_sha256"] == arch["binary_sha256"], m["name"]  # the binary the lock names
    fi = json.loads(next(world.root.glob("v1/entries/silu_and_mul/*/*/manifest.json")).read_text())
    assert fi["prebuilt"]["flashinfer_version"]  # labelled as `build --flashinfer` labels it


def test_wheel_and_image_carry_the_root(world: World) -> None:
    whl = Path(world.outputs["pack"].strip().splitlines()[-1])
    files = {p.relative_to(world.root).as_posix(): p.read_bytes() for p in world.root.rglob("*") if p.is_file()}
    with zipfile.ZipFile(whl) as z:
        packed = {n.split("/root/", 1)[1]: z.read(n) for n in z.namelist() if "/root/" in n}
    assert packed == files
    images = oci_check.validate(world.oci)
    assert list(images) == ["sm90"] and world.outputs["pack_oci"].split()[1] in (world.oci / "index.json").read_text()
    unpacked = {p.relative_to(world.mount).as_posix(): p.read_bytes() for p in world.mount.rglob("*") if p.is_file()}
    assert unpacked == files


def test_node_serves_the_cpu_kernels_with_zero_compiles(world: World) -> None:
    env = world.node_env("node")
    assert shutil.which("c++", path=env["PATH"]) is None and shutil.which("gcc", path=env["PATH"]) is None
    before = world.compiles()
    out = result(world.app_run(env))
    assert out["adder"] == 5 and out["window"] == 4 and out["ngram"] == [1, 2, 3]
    assert out["builds"] == 0 and world.compiles() == before
    assert out["ext_file"].startswith(str(world.mount))  # the torch extension from the image
    node_cache = world.tmp / "node" / "cache"
    assert not list(node_cache.glob("v1/entries/*/*/*"))  # nothing built or copied on the node
    assert not (world.tmp / "node" / "torch_extensions").exists()  # torch's own JIT never ran


def test_node_with_the_toolkit_loads_the_flashinfer_module_from_the_root(world: World) -> None:
    # FlashInfer asks nvcc its CUDA version to spell its command lines: the toolkit is there, the
    # host compiler is not (a failed link would show), FlashInfer's own JIT is off
    env = world.node_env("node-fi", CUDA_HOME="/usr/local/cuda", CXX=str(world.tmp / "no-compiler"),
                         KERNELCACHE_PATCH="torch,flashinfer", KERNELCACHE_CUDA_ARCH="9.0", APP_FLASHINFER="1",
                         FLASHINFER_DISABLE_JIT="1", FLASHINFER_WORKSPACE_BASE=str(world.tmp / "node-fi" / "ws"),
                         FLASHINFER_CUDA_ARCH_LIST="9.0a", FLASHINFER_EXTRA_LDFLAGS=f"-L{world.stub}")
    out = result(world.app_run(env))
    assert out["silu"] and out["silu_library"].startswith(str(world.mount)), out
    assert out["builds"] == 0


def _edit_keep_mtime(path: Path, text: str) -> bytes:
    st, old = path.stat(), path.read_bytes()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return old


def test_header_edited_with_mtime_restored_is_drift_everywhere(world: World) -> None:
    header = world.app / "proj" / "include" / "kc_add.h"
    st = header.stat()
    old = _edit_keep_mtime(header, "#define KC_OFFSET 1\n")
    try:
        check = world.kc("lock", "check", str(world.lock), check=False)
        assert check.returncode == 1, check.stdout + check.stderr
        assert "adder: proj/include/kc_add.h changed" in check.stdout + check.stderr
        served = world.app_run(world.node_env("node-drift"), check=False)
        assert served.returncode != 0 and "RESULT" not in served.stdout
        assert "LockViolation" in served.stderr and "kc_add.h changed" in served.stderr, served.stderr[-3000:]
        assert "nothing was compiled" in served.stderr
        assert not list((world.tmp / "node-drift" / "cache").glob("v1/entries/*/*/*"))
    finally:
        header.write_bytes(old)
        os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_kernel_the_lock_lacks_is_refused_by_name(world: World) -> None:
    served = world.app_run(world.node_env("node-extra", APP_EXTRA="adder_unlocked"), check=False)
    assert served.returncode != 0 and "RESULT" not in served.stdout
    assert "LockViolation" in served.stderr and "'adder_unlocked'" in served.stderr, served.stderr[-3000:]
    assert "not in the kernel lock" in served.stderr
    assert not list((world.tmp / "node-extra" / "cache").glob("v1/entries/*/*/*"))


def test_warn_mode_logs_builds_and_counts_one_compile_after_ready(world: World) -> None:
    # A team trials the lock on its CPU service: the CPU kernels' blocks (a lock file is JSON; the
    # FlashInfer module needs nvcc on a host to even spell its flags, this host has none)
    cpu_lock = world.app / "cpu.lock"  # beside the app: a lock's paths are relative to its directory
    data = json.loads(world.lock.read_text())
    data["kernels"] = {k: v for k, v in data["kernels"].items() if k in CPU_KERNELS}
    cpu_lock.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    log = world.tmp / "warn-events.jsonl"
    env = world.node_env("node-warn", KERNELCACHE_LOCK=str(cpu_lock), KERNELCACHE_LOCK_MODE="warn",
                         KERNELCACHE_LOG=str(log), APP_PRELOAD="1", APP_EXTRA="adder_unlocked",
                         CXX=str(world.cxx), KC_COUNT_LOG=str(world.count_log),
                         PATH=os.environ["PATH"])  # warn mode builds: this host has a compiler
    before = world.compiles()
    out = result(world.app_run(env))
    assert out["adder_unlocked"] == 5 and out["ready"] is True
    assert out["builds"] == 1 and out["after_ready"] == 1, out
    assert world.compiles() - before == 2  # one compile + its link, the unlocked kernel's
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    drift = [e for e in events if e.get("event") == "lock_drift"]
    assert [e["name"] for e in drift] == ["adder_unlocked"] and "not in the kernel lock" in drift[0]["reason"]
