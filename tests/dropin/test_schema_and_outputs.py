"""Learned schemas end to end, BuildError compatibility, and the build_directory/output choices."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tvm_ffi

from kernelcache import BuildError, KernelCacheError
from kernelcache import tvm_ffi as dropin

ADD2 = "int64_t f(int64_t a, int64_t b) { return a + b; }"
ADD1 = "int64_t f(int64_t a) { return a * 1000; }"  # the edited source: a parameter is gone


def _entry_of(so_path: str) -> Path:
    return Path(so_path).parent


def test_first_good_build_records_schemas_and_a_swapped_stale_binary_is_refused(dropin_env) -> None:
    """The seed failure: a binary for the same key that lacks a parameter must never be called."""
    so = dropin.build_inline("seed", cpp_sources=ADD2, functions=["f"])
    entry = _entry_of(so)
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["schemas"]["f"].replace(" ", "") == "Callable[[int,int],int]"  # learned, recorded

    stale = Path(dropin.build_inline("seed_edited", cpp_sources=ADD1, functions=["f"])).read_bytes()
    # Swap the entry's binary for the edited one and make the manifest agree with it byte-wise
    # (a botched copy / deploy): only identity and schema validation stand between it and a call.
    tmp = Path(so).with_name("swap.tmp")
    tmp.write_bytes(stale)
    os.replace(tmp, so)
    import hashlib

    manifest["so_sha256"] = hashlib.sha256(stale).hexdigest()
    manifest["so_size"] = len(stale)
    (entry / "manifest.json").write_text(json.dumps(manifest))

    code = f"""
from kernelcache import tvm_ffi as dropin
mod = dropin.load_inline("seed", cpp_sources={ADD2!r}, functions=["f"])
print(mod.f(2, 3))
"""
    before = dropin_env.compiles()
    proc = dropin_env.run_py(code, KERNELCACHE_LOG="1")
    assert proc.stdout.split()[-1] == "5"  # the stale binary (f(a) -> a*1000) was never called
    assert dropin_env.compiles() - before == 1  # rejected, quarantined, rebuilt once
    events = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert any(e["event"] == "quarantine" and e.get("name") == "seed" for e in events), proc.stderr
    assert any((dropin_env.cache / "v1" / "quarantine").iterdir())


def test_failed_build_is_a_runtime_error_with_the_compiler_output(dropin_env) -> None:
    with pytest.raises(RuntimeError) as e:
        dropin.load_inline("broken", cpp_sources="int64_t f( { }", functions=["f"])
    err = e.value
    assert isinstance(err, BuildError) and isinstance(err, KernelCacheError)
    assert err.spec_name == "broken" and err.returncode not in (0, None)
    assert "main.cpp" in err.output and "error" in err.output and err.command
    assert not list((dropin_env.cache / "v1" / "entries").glob("broken/*/*"))  # nothing cached


def test_default_build_returns_the_immutable_entry_and_hits(dropin_env) -> None:
    p1 = dropin.build_inline("plain", cpp_sources=ADD2, functions=["f"])
    n = dropin_env.compiles()
    p2 = dropin.build_inline("plain", cpp_sources=ADD2, functions=["f"])
    assert p1 == p2 and dropin_env.compiles() == n
    assert Path(p1).is_relative_to(dropin_env.cache) and Path(p1).name == "plain.so"
    p3 = dropin.build_inline("plain", cpp_sources=ADD2.replace("a + b", "a - b"), functions=["f"])
    assert p3 != p1  # a changed kernel gets a new path: an in-process reload runs new code
    assert tvm_ffi.load_module(p3).f(5, 3) == 2 and tvm_ffi.load_module(p1).f(5, 3) == 8


def test_build_directory_gets_an_atomic_copy_of_the_validated_library(dropin_env, tmp_path: Path) -> None:
    bdir = tmp_path / "user_build"
    path = dropin.build_inline("copied", cpp_sources=ADD2, functions=["f"], build_directory=str(bdir))
    assert path == str((bdir / "copied.so").resolve())
    ino = os.stat(path).st_ino
    assert dropin.build_inline("copied", cpp_sources=ADD2, functions=["f"], build_directory=str(bdir)) == path
    assert os.stat(path).st_ino == ino  # same bytes: left alone
    new = dropin.build_inline("copied", cpp_sources=ADD2.replace("a + b", "a * b"), functions=["f"],
                              build_directory=str(bdir), output="renamed.so")
    assert new == str((bdir / "renamed.so").resolve())
    assert tvm_ffi.load_module(new).f(6, 7) == 42
    assert [p.name for p in bdir.iterdir() if p.name.startswith(".")] == []  # no temp files left
    # output without build_directory: a copy under the cache, never the entry itself renamed
    alone = dropin.build_inline("copied", cpp_sources=ADD2, functions=["f"], output="alone.so")
    assert Path(alone).name == "alone.so" and Path(alone).is_relative_to(dropin_env.cache)


def test_load_inline_ignores_build_directory_and_loads_the_entry(dropin_env, tmp_path: Path) -> None:
    bdir = tmp_path / "ignored"
    mod = dropin.load_inline("ignored_bd", cpp_sources=ADD2, functions=["f"], build_directory=str(bdir),
                             keep_module_alive=False)
    assert mod.f(1, 2) == 3
    assert not bdir.exists() or not any(bdir.iterdir())


def test_object_output_is_built_fresh_not_cached(dropin_env, tmp_path: Path) -> None:
    bdir = tmp_path / "objs"
    src = "#include <tvm/ffi/function.h>\nint64_t f(int64_t a) { return a; }"
    path = dropin.build_inline("as_object", cpp_sources=src, output="as_object.o", build_directory=str(bdir))
    assert path == str(bdir / "as_object.o")
    data = Path(path).read_bytes()
    assert data[:4] == b"\x7fELF" and int.from_bytes(data[16:18], "little") == 1  # ET_REL
    n = dropin_env.compiles()
    dropin.build_inline("as_object", cpp_sources=src, output="as_object.o", build_directory=str(bdir))
    assert dropin_env.compiles() == n + 1  # an object cannot be validated: compiled each call


def test_object_inputs_are_keyed_by_their_bytes(dropin_env, tmp_path: Path) -> None:
    """A pre-compiled ``.o`` replaced at the same path with the same mtime is picked up."""
    impl = tmp_path / "impl.cc"
    obj = tmp_path / "impl.o"
    user = tmp_path / "user.cc"
    user.write_text('#include <tvm/ffi/function.h>\nint64_t impl_value();\n'
                    "int64_t v() { return impl_value(); }\nTVM_FFI_DLL_EXPORT_TYPED_FUNC(v, v);\n")

    def make_obj(value: int) -> None:
        impl.write_text(f"#include <cstdint>\nint64_t impl_value() {{ return {value}; }}\n")
        subprocess.run(["g++", "-fPIC", "-O1", "-c", str(impl), "-o", str(obj)], check=True)

    make_obj(11)
    st = obj.stat()
    code = f"""
from kernelcache import tvm_ffi as dropin
print(dropin.load("with_obj", sources=[{str(user)!r}, {str(obj)!r}]).v())
"""
    assert dropin_env.run_py(code).stdout.split()[-1] == "11"
    make_obj(22)
    os.utime(obj, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert dropin_env.run_py(code).stdout.split()[-1] == "22"


def test_names_outside_the_spec_alphabet_work(dropin_env) -> None:
    mod = dropin.load_inline("my-kernel.v2", cpp_sources=ADD2, functions=["f"])
    assert mod.f(1, 1) == 2
    path = dropin.build_inline("my-kernel.v2", cpp_sources=ADD2, functions=["f"])
    assert Path(path).name.startswith("my_kernel_v2_")


def test_importing_the_dropin_neither_patches_nor_imports_tvm_ffi() -> None:
    code = ("import sys, kernelcache, kernelcache.tvm_ffi as d\n"
            "assert 'tvm_ffi' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)\n"
            "assert not d.is_installed()\n"
            "import tvm_ffi.cpp\nassert not getattr(tvm_ffi.cpp.load_inline, '__kernelcache_dropin__', False)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "KERNELCACHE_PATCH_TVM_FFI"})
    assert proc.returncode == 0, proc.stderr
