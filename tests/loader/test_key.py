"""Acceptance 1 (key): what must hit and what must miss, provoked on real files and compilers."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from kernelcache.host import toolchain

import kernelcache as kc
from tests.support import make_project, project_spec, spec_code


def test_key_is_identical_across_hash_seeds(kc_env, project):
    code = spec_code(project) + "print(kc.explain(spec)['key1'])"
    keys = {kc_env.run_py(code, PYTHONHASHSEED=seed).stdout.strip() for seed in ("0", "1", "12345")}
    assert len(keys) == 1 and len(next(iter(keys))) == 64


def test_moved_checkout_hits_without_compiling(kc_env, tmp_path):
    a = make_project(tmp_path / "checkout_a", offset=7)
    assert kc.load(project_spec(a)).add(1, 2) == 10
    kc_env.reset_counts()
    b = tmp_path / "elsewhere" / "checkout_b"
    shutil.copytree(a, b)  # same bytes, new absolute path, new inodes and ctimes
    shutil.rmtree(a)
    code = spec_code(b) + "m = kc.load(spec); print(m.add(1, 2), kc.stats()['hits'])"
    out = kc_env.run_py(code).stdout.split()
    assert out == ["10", "1"]
    assert kc_env.compiles() == 0


def test_touch_every_input_hits_with_zero_compiler_runs(kc_env, project):
    kc.load(project_spec(project))
    kc_env.reset_counts()
    future = time.time() + 3600
    for p in project.rglob("*"):
        if p.is_file():
            os.utime(p, (future, future))
    out = kc_env.run_py(spec_code(project) + "m = kc.load(spec); print(kc.stats()['hits'], m.add(2, 2))").stdout.split()
    assert out == ["1", "4"]
    assert kc_env.compiles() == 0 and kc_env.compiles("link") == 0


def test_header_edit_with_restored_mtime_misses(kc_env, project):
    hdr = project / "include" / "kc_add.h"
    assert kc.load(project_spec(project)).add(1, 1) == 2
    st = hdr.stat()
    hdr.write_text("#define KC_OFFSET 5\n")  # same size as "#define KC_OFFSET 0\n"
    os.utime(hdr, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert hdr.stat().st_mtime_ns == st.st_mtime_ns and hdr.stat().st_size == st.st_size
    kc_env.reset_counts()
    assert kc.load(project_spec(project)).add(1, 1) == 7
    assert kc_env.compiles() == 1


def test_isystem_and_angle_include_headers_are_tracked(kc_env, tmp_path):
    base = tmp_path / "sysproj"
    (base / "sysinc").mkdir(parents=True)
    (base / "add.cc").write_text(
        "#include <tvm/ffi/function.h>\n#include <kc_sys.h>\n"
        "int64_t add(int64_t a, int64_t b) { return a + b + KC_SYS; }\n"
        "TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add);\n")
    (base / "sysinc" / "kc_sys.h").write_text("#define KC_SYS 1\n")
    spec = lambda: project_spec(base, include_dirs=[], system_include_dirs=["sysinc"])  # noqa: E731
    assert kc.load(spec()).add(0, 0) == 1
    (base / "sysinc" / "kc_sys.h").write_text("#define KC_SYS 2\n")
    kc_env.reset_counts()
    assert kc.load(spec()).add(0, 0) == 2
    assert kc_env.compiles() == 1


def test_new_header_shadowing_a_later_include_dir_misses(kc_env, tmp_path):
    base = make_project(tmp_path / "shadow", offset=1)
    (base / "first").mkdir()
    spec = lambda: project_spec(base, include_dirs=["first", "include"])  # noqa: E731
    assert kc.load(spec()).add(0, 0) == 1
    (base / "first" / "kc_add.h").write_text("#define KC_OFFSET 100\n")
    info = kc.explain(spec())
    assert info["status"] == "miss" and "shadows" in info["reason"]
    assert kc.load(spec()).add(0, 0) == 100


def _key(spec) -> str:
    return kc.explain(spec)["key1"]


def test_compiler_flags_env_and_abi_changes_miss(kc_env, project, monkeypatch, tmp_path):
    base_key = _key(project_spec(project))
    assert _key(project_spec(project, cflags=["-O3"])) != base_key
    monkeypatch.setenv("CPATH", str(tmp_path))
    assert _key(project_spec(project)) != base_key
    monkeypatch.delenv("CPATH")
    assert _key(project_spec(project)) == base_key
    # another compiler binary (a different wrapper file) -> different tool identity
    other = tmp_path / "bin" / "other-cxx"
    other.write_text(kc_env.cxx.read_text().replace("g++", "g++-12"))
    other.chmod(0o755)
    monkeypatch.setenv("CXX", str(other))
    assert _key(project_spec(project)) != base_key
    monkeypatch.setenv("CXX", str(kc_env.cxx))
    # MAX_JOBS is parallelism only: never part of the key
    monkeypatch.setenv("MAX_JOBS", "1")
    assert _key(project_spec(project)) == base_key


def test_tvm_ffi_version_is_part_of_the_key(kc_env, project, monkeypatch):
    base_key = _key(project_spec(project))
    real = toolchain.tvm_ffi_paths()
    other = toolchain.TvmFfiPaths(real.package_dir, real.include_dir, real.lib_path, real.version + ".post99")
    monkeypatch.setattr(toolchain, "tvm_ffi_paths", lambda memo_dir=None: other)
    assert _key(project_spec(project)) != base_key


def test_cuda_arch_is_part_of_the_key(kc_env, tmp_path, monkeypatch):
    if not Path(toolchain.find_cuda_home(), "bin", "nvcc").exists():
        import pytest
        pytest.skip("nvcc not installed")
    (tmp_path / "k.cu").write_text("// empty\n")
    spec = kc.KernelSpec(name="cu", sources=["k.cu"], root=tmp_path)
    monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "9.0")
    k90 = _key(spec)
    monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "10.0")
    assert _key(spec) != k90
    monkeypatch.delenv("KERNELCACHE_CUDA_ARCH")
    monkeypatch.setenv("TVM_FFI_CUDA_ARCH_LIST", "9.0")
    assert _key(spec) == k90  # falls back to tvm-ffi's variable, same normalised arch


def test_source_bytes_not_paths_define_the_key(kc_env, tmp_path):
    a = make_project(tmp_path / "a")
    b = make_project(tmp_path / "b")
    assert _key(project_spec(a)) == _key(project_spec(b))
    (b / "add.cc").write_text((b / "add.cc").read_text() + "\n// edit\n")
    assert _key(project_spec(a)) != _key(project_spec(b))
