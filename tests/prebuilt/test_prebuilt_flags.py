"""Issue 45, item 1: a prebuilt root (or companion wheel) serves a kernel only when the whole build
matches: its flags, defines, include dirs and link line included, by the same source key the
fleet indexes by.

A real tvm-ffi kernel returns the ``FACTOR`` it was compiled with; ``kernelcache build --spec
--out`` exports it built with ``-DFACTOR=2`` into an artifact root, and it is loaded with
``-DFACTOR=3``: with a compiler the load builds (3, never the root's 2); without one
(``KERNELCACHE_NO_BUILD``, or no compiler on the host) the error names both define lists;
unchanged flags are still served from the root.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from kernelcache.host import toolchain

import kernelcache as kc
from kernelcache.export import roots as export
from tests.support import HANG_S, REPO, compilerless_path

SRC = """\
#include <tvm/ffi/function.h>
#include "factor_base.h"
int64_t factor() { return FACTOR + FACTOR_BASE; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(factor, factor);
"""
SPECS = """\
from pathlib import Path
import kernelcache as kc

HERE = Path(__file__).parent


def specs():
    return [kc.KernelSpec(name="factor", sources=["factor.cc"], root=HERE, include_dirs=["include"],
                          cflags=["-DFACTOR=2"], functions={"factor": "Callable[[], int]"})]


def cuda_specs():
    return [kc.KernelSpec(name="cufactor", sources=["k.cu"], root=HERE, cuda_cflags=["-DFACTOR=2"],
                          functions={"factor": "Callable[[], int]"})]
"""
SPEC = """
import json, sys
from pathlib import Path
import kernelcache as kc
from kernelcache.lookup import loader
spec = kc.KernelSpec(name="factor", sources=["factor.cc"], root=Path({root!r}), include_dirs={inc!r},
                     cflags={cflags!r}, functions={{"factor": "Callable[[], int]"}})
"""
LOAD = SPEC + """
try:
    mod, res = loader.load_with_result(spec)
    print(json.dumps({{"value": mod.factor(), "status": str(res.status), "so": res.so_path}}))
except Exception as e:
    print(json.dumps({{"error": type(e).__name__, "message": str(e)}}))
"""


def _project(base: Path) -> Path:
    (base / "include").mkdir(parents=True)
    (base / "other").mkdir()
    (base / "factor.cc").write_text(SRC)
    (base / "include" / "factor_base.h").write_text("#define FACTOR_BASE 0\n")
    (base / "other" / "factor_base.h").write_text("#define FACTOR_BASE 0\n")  # same bytes, another dir
    (base / "kcspecs.py").write_text(SPECS)
    return base


def _spec(root: Path, factor: int = 2, inc: str = "include", extra: tuple[str, ...] = ()) -> kc.KernelSpec:
    return kc.KernelSpec(name="factor", sources=["factor.cc"], root=root, include_dirs=[inc],
                         cflags=[f"-DFACTOR={factor}", *extra], functions={"factor": "Callable[[], int]"})


def _build_root(kc_env, proj: Path, root: Path, *args: str) -> str:
    """``kernelcache build --spec kcspecs:FUNC --out ROOT`` in the project, as a deployment runs it."""
    p = subprocess.run([sys.executable, "-m", "kernelcache", "build", *args, "--out", str(root)], cwd=proj,
                       env=kc_env.env(PYTHONPATH=f"{REPO}{os.pathsep}{proj}"), capture_output=True, text=True,
                       timeout=HANG_S, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    return p.stdout


@pytest.fixture
def factor_root(kc_env, tmp_path, monkeypatch):
    """The kernel built with -DFACTOR=2 and exported into an artifact root; the cache emptied."""
    proj = _project(tmp_path / "proj")
    root = tmp_path / "artifacts"
    out = _build_root(kc_env, proj, root, "--spec", "kcspecs:specs")
    assert out.split()[:2] == ["factor", "built"], out
    shutil.rmtree(kc_env.cache)
    monkeypatch.setenv("KERNELCACHE_PREBUILT", str(root))
    kc.reset_process_state()
    kc_env.reset_counts()
    return proj, root


def _manifest_path(root: Path) -> Path:
    [found] = root.glob("v1/entries/factor/*/*/manifest.json")
    return found


def test_the_root_records_the_source_key_and_its_inputs_in_clear(factor_root):
    _, root = factor_root
    m = json.loads(_manifest_path(root).read_text())
    assert len(m["skey"]) == 64
    assert m["skey_inputs"]["flags"][0] == ["-DFACTOR=2"]
    assert m["skey_inputs"]["include_dirs"] == ["${ROOT}/include"]
    from kernelcache.key.level1 import canonical_hash

    assert canonical_hash(m["skey_inputs"]) == m["skey"]  # exactly what the key hashes


def test_unchanged_flags_are_still_served_from_the_root(kc_env, factor_root):
    proj, root = factor_root
    mod, res = kc.load_with_result(_spec(proj), settings=kc.Settings.from_env().replace(no_build=True))
    assert (mod.factor(), res.status) == (2, "prebuilt") and res.so_path.startswith(str(root))
    assert kc.explain(_spec(proj))["status"] == "prebuilt"
    assert kc_env.compiles() == 0


def test_another_define_with_a_compiler_is_built_here_never_the_roots_answer(kc_env, factor_root):
    proj, root = factor_root
    mod, res = kc.load_with_result(_spec(proj, 3))
    assert (mod.factor(), res.status) == (3, "built") and kc_env.compiles() == 1
    assert not res.so_path.startswith(str(root))
    kc.reset_process_state()
    mod, res = kc.load_with_result(_spec(proj, 3))
    assert (mod.factor(), res.status) == (3, "hit")  # the local build, the root still refused
    kc.reset_process_state()
    mod, res = kc.load_with_result(_spec(proj, 2))
    assert (mod.factor(), res.status) == (2, "prebuilt")  # the root's flags: the root again


def test_another_define_without_building_names_both_flag_lists(kc_env, factor_root):
    proj, root = factor_root
    s = kc.Settings.from_env().replace(no_build=True)
    with pytest.raises(kc.CacheMissError) as ei:
        kc.load(_spec(proj, 3), settings=s)
    msg = str(ei.value)
    assert f"prebuilt {root}" in msg, msg
    assert "cflags: built with ['-DFACTOR=2'], this spec has ['-DFACTOR=3']" in msg, msg
    info = kc.explain(_spec(proj, 3), settings=s)
    [pre] = info["prebuilt"]
    assert info["status"] != "prebuilt" and not pre["usable"]
    assert "['-DFACTOR=2'], this spec has ['-DFACTOR=3']" in pre["reason"]
    assert kc_env.compiles() == 0


@pytest.mark.parametrize("change, words", [
    (dict(extra=("-O0",)), "cflags: built with [], this spec has ['-O0']"),
    (dict(inc="other"), "include dirs: built with ['${ROOT}/include'], this spec has ['${ROOT}/other']"),
])
def test_other_flags_and_include_dirs_are_refused_too(kc_env, factor_root, change, words):
    """An added flag, another include dir holding a header of the same bytes: another build."""
    proj, _ = factor_root
    with pytest.raises(kc.CacheMissError) as ei:
        kc.load(_spec(proj, **change), settings=kc.Settings.from_env().replace(no_build=True))
    assert words in str(ei.value), str(ei.value)


def test_a_host_without_a_compiler_gets_an_error_naming_the_flags(kc_env, factor_root):
    """No compiler anywhere (CXX names none, PATH empty), building not forbidden: the error says
    which root was found and why it is not this build; with KERNELCACHE_NO_BUILD, a cache miss."""
    proj, root = factor_root
    bare = dict(CXX="", PATH=compilerless_path(kc_env.tmp / "bare-bin"), KERNELCACHE_PREBUILT=str(root))
    code = LOAD.format(root=str(proj), inc=["include"], cflags=["-DFACTOR=3"])
    out = json.loads(kc_env.run_py(code, **bare).stdout.splitlines()[-1])
    assert out["error"] == "ToolchainError", out
    assert "refused: prebuilt" in out["message"] and "['-DFACTOR=2'], this spec has ['-DFACTOR=3']" in out["message"]
    out = json.loads(kc_env.run_py(code, KERNELCACHE_NO_BUILD="1", **bare).stdout.splitlines()[-1])
    assert out["error"] == "CacheMissError" and "this spec has ['-DFACTOR=3']" in out["message"], out
    same = LOAD.format(root=str(proj), inc=["include"], cflags=["-DFACTOR=2"])
    out = json.loads(kc_env.run_py(same, **bare).stdout.splitlines()[-1])
    assert (out["value"], out["status"]) == (2, "prebuilt"), out
    assert kc_env.compiles() == 0


def test_a_companion_wheel_is_admitted_by_the_same_key(kc_env, factor_root, tmp_path):
    proj, root = factor_root
    whl = export.pack_wheel(root, tmp_path / "dist", "factor_test")
    site = tmp_path / "site"  # the wheel "installed": unpacked onto the host's path
    with zipfile.ZipFile(whl) as z:
        z.extractall(site)
    env = dict(CXX="", PATH=compilerless_path(tmp_path / "bare-bin"), PYTHONPATH=f"{kc_env.env()['PYTHONPATH']}{os.pathsep}{site}",
               KERNELCACHE_PREBUILT="")
    served = json.loads(kc_env.run_py(LOAD.format(root=str(proj), inc=["include"], cflags=["-DFACTOR=2"]),
                                      cwd=tmp_path, **env).stdout.splitlines()[-1])
    assert (served["value"], served["status"]) == (2, "prebuilt") and "kernelcache_prebuilt_factor_test" in served["so"]
    for factor in (3, 5):
        out = json.loads(kc_env.run_py(LOAD.format(root=str(proj), inc=["include"], cflags=[f"-DFACTOR={factor}"]),
                                       cwd=tmp_path, KERNELCACHE_NO_BUILD="1", **env).stdout.splitlines()[-1])
        assert out["error"] == "CacheMissError", out
        assert f"built with ['-DFACTOR=2'], this spec has ['-DFACTOR={factor}']" in out["message"], out
    assert kc_env.compiles() == 0


def test_a_root_without_a_recorded_source_key_is_refused_with_what_to_do(kc_env, factor_root):
    proj, root = factor_root
    path = _manifest_path(root)
    m = json.loads(path.read_text())
    s = kc.Settings.from_env().replace(no_build=True)
    del m["skey_inputs"]  # written before the inputs were kept: admitted by the key alone
    path.write_text(json.dumps(m))
    assert kc.load_with_result(_spec(proj), settings=s)[1].status == "prebuilt"
    kc.reset_process_state()
    with pytest.raises(kc.CacheMissError, match="other inputs than this spec .*rebuild it"):
        kc.load(_spec(proj, 3), settings=s)
    m["skey"] = ""
    path.write_text(json.dumps(m))
    kc.reset_process_state()
    with pytest.raises(kc.CacheMissError, match="records no source key .*rebuild it"):
        kc.load(_spec(proj), settings=s)


def _cuda_or_skip() -> None:
    try:
        toolchain.find_cuda_home()
    except kc.ToolchainError:
        pytest.skip("no CUDA toolkit to build the CUDA artifact")


CU = """\
#include <tvm/ffi/function.h>
__global__ void k() {}
int64_t factor() { return FACTOR; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(factor, factor);
"""


def test_a_multi_arch_root_serves_each_arch_and_only_its_own_flags(kc_env, tmp_path, monkeypatch):
    """``kernelcache build --arch 9.0,10.0``: one binary for both, its source key naming both; a
    host targeting 9.0 (or 10.0) is served by it (its arch is among the entry's), with the same
    flags only; a host targeting another arch is refused for its arch."""
    try:
        toolchain.find_cuda_home()
    except kc.ToolchainError:
        pytest.skip("no CUDA toolkit to build the CUDA artifact")
    proj = _project(tmp_path / "proj")
    (proj / "k.cu").write_text(CU)
    root = tmp_path / "cuda_artifacts"
    _build_root(kc_env, proj, root, "--spec", "kcspecs:cuda_specs", "--arch", "9.0,10.0")
    [m] = root.glob("v1/entries/cufactor/*/*/manifest.json")
    assert json.loads(m.read_text())["skey_inputs"]["arch"] == ["10.0", "9.0"]

    def spec(factor: int) -> kc.KernelSpec:
        return kc.KernelSpec(name="cufactor", sources=["k.cu"], root=proj, cuda_cflags=[f"-DFACTOR={factor}"],
                             functions={"factor": "Callable[[], int]"})

    shutil.rmtree(kc_env.cache)
    monkeypatch.setenv("KERNELCACHE_PREBUILT", str(root))
    monkeypatch.setenv("KERNELCACHE_NO_BUILD", "1")
    for arch in ("9.0", "10.0"):
        monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", arch)
        kc.reset_process_state()
        info = kc.explain(spec(2))
        assert info["status"] == "prebuilt", info
        if arch == "9.0":  # loading a CUDA module needs no GPU; its code for 10.0 is never run here
            mod, res = kc.load_with_result(spec(2))
            assert res.status == "prebuilt" and mod.factor() == 2
        kc.reset_process_state()
        with pytest.raises(kc.CacheMissError) as ei:
            kc.load(spec(3))
        msg = str(ei.value)
        assert "cuda_cflags: built with ['-DFACTOR=2'], this spec has ['-DFACTOR=3']" in msg and "arch:" not in msg, msg
    monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "8.0")
    kc.reset_process_state()
    with pytest.raises(kc.CacheMissError, match=r"built for arch \['10.0', '9.0'\], this machine needs \['8.0'\]"):
        kc.load(spec(2))


def test_a_compiler_environment_variable_is_part_of_the_build_a_root_must_match(kc_env, tmp_path, monkeypatch):
    """``NVCC_APPEND_FLAGS`` (like ``CPATH`` ...) changes every compile of this host, as the local key
    says: a root built without it is not this host's build. With a compiler the kernel is built
    here (the appended define wins: 7, never the root's 2); without, the error names the variable."""
    try:
        toolchain.find_cuda_home()
    except kc.ToolchainError:
        pytest.skip("no CUDA toolkit to build the CUDA artifact")
    proj = _project(tmp_path / "proj")
    (proj / "k.cu").write_text(CU)
    root = tmp_path / "cuda_artifacts"
    _build_root(kc_env, proj, root, "--spec", "kcspecs:cuda_specs", "--arch", "9.0")
    spec = kc.KernelSpec(name="cufactor", sources=["k.cu"], root=proj, cuda_cflags=["-DFACTOR=2"],
                         functions={"factor": "Callable[[], int]"})
    shutil.rmtree(kc_env.cache)
    monkeypatch.setenv("KERNELCACHE_PREBUILT", str(root))
    monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "9.0")
    kc.reset_process_state()
    mod, res = kc.load_with_result(spec)
    assert res.status == "prebuilt" and mod.factor() == 2  # nothing set: the root's build is this one
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-UFACTOR -DFACTOR=7")
    monkeypatch.setenv("KERNELCACHE_NO_BUILD", "1")
    kc.reset_process_state()
    with pytest.raises(kc.CacheMissError) as ei:
        kc.load(spec)
    assert "compiler environment (CPATH, NVCC_APPEND_FLAGS, ...)" in str(ei.value), str(ei.value)
    assert "NVCC_APPEND_FLAGS" in str(ei.value)
    monkeypatch.delenv("KERNELCACHE_NO_BUILD")
    kc.reset_process_state()
    mod, res = kc.load_with_result(spec)
    assert res.status == "built" and mod.factor() == 7, res.status
