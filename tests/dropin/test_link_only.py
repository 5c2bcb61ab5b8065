"""Link-only builds, object outputs and refusals of the drop-in, provoked for real.

tvm-ffi documents compile-to-object then link (``build(name, sources=["x.o"])``); through the
drop-in such a module is a normal cache entry keyed by the objects' bytes. Object outputs are
compiled fresh by tvm-ffi's builder and leave one directory per distinct call, none with
``build_directory``. Inputs that cannot be built name the reason, never "exit None".
"""
from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

import pytest

import kernelcache
from kernelcache import tvm_ffi as jit

FN_SRC = """#include <tvm/ffi/function.h>
int64_t {fn}(int64_t a) {{ return a + {k}; }}
TVM_FFI_DLL_EXPORT_TYPED_FUNC({fn}, {fn});
"""


def _objects(src_dir: Path, k_b: int) -> list[str]:
    (src_dir / "a.cc").write_text(FN_SRC.format(fn="plus_a", k=1))
    (src_dir / "b.cc").write_text(FN_SRC.format(fn="plus_b", k=k_b))
    return [jit.build(f"obj_{n}", sources=[str(src_dir / f"{n}.cc")], output=f"{n}.o") for n in ("a", "b")]


def test_link_only_from_two_objects_loads_runs_and_rebuilds_once_per_edit(dropin_env, tmp_path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    mod = jit.load("linked", sources=_objects(src, 10))
    assert (mod.plus_a(1), mod.plus_b(1)) == (2, 11)
    assert dropin_env.compiles("link") == 1
    lib = jit.build("linked", sources=_objects(src, 10))  # same sources again: same object bytes -> hit
    assert dropin_env.compiles("link") == 1 and Path(lib).is_file()
    objs = _objects(src, 20)  # edit b's source: one object changes
    mod2 = jit.load("linked", sources=objs)
    assert mod2.plus_b(1) == 21 and mod2.plus_a(1) == 2
    assert dropin_env.compiles("link") == 2  # exactly one rebuild
    assert len(dropin_env.entries("linked")) == 2  # two entries, each validated like any other
    assert len(list((dropin_env.cache / "v1" / "dropin" / "objects").iterdir())) == 2  # one dir per object call


def test_static_archive_is_linked_whole(dropin_env, tmp_path) -> None:
    (tmp_path / "c.cc").write_text(FN_SRC.format(fn="plus_c", k=5))
    obj = jit.build("obj_c", sources=[str(tmp_path / "c.cc")], output="c.o", build_directory=str(tmp_path / "out"))
    assert Path(obj) == (tmp_path / "out" / "c.o").resolve()
    assert not list((dropin_env.cache / "v1" / "dropin" / "objects").iterdir())  # moved out, nothing left
    archive = tmp_path / "libc.a"
    subprocess.run(["ar", "rcs", str(archive), obj], check=True)
    assert jit.load("from_archive", sources=[str(archive)]).plus_c(1) == 6


def test_opting_out_of_the_metadata_define_warns_once_and_keeps_the_other_checks(dropin_env) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = jit.load_inline("no_meta", cpp_sources="int64_t twice(int64_t a) { return 2 * a; }",
                              functions=["twice"], extra_cflags=["-UTVM_FFI_DLL_EXPORT_INCLUDE_METADATA"])
    assert mod.twice(21) == 42 and mod.get_function_metadata("twice") is None
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "\n" not in msgs[0] and "TVM_FFI_DLL_EXPORT_INCLUDE_METADATA" in msgs[0]
    (entry,) = dropin_env.entries("no_meta")
    assert (entry / "manifest.json").is_file()  # a normal entry: size, checksum and identity still checked


@pytest.mark.parametrize("sources, reason", [
    (["missing.cc"], "source file(s) not found"),
    (["notes.txt"], "unsupported source type(s)"),
])
def test_unbuildable_inputs_name_the_reason(dropin_env, tmp_path, sources, reason) -> None:
    (tmp_path / "notes.txt").write_text("not a source")
    with pytest.raises(kernelcache.BuildError) as err:
        jit.build("bad_inputs", sources=[str(tmp_path / s) for s in sources])
    msg = str(err.value)
    assert reason in msg and "exit None" not in msg and "<sources>" not in msg and isinstance(err.value, RuntimeError)
    assert dropin_env.compiles() == 0


def _inline_dirs(env, name: str) -> list[Path]:
    return [p for p in (env.cache / "v1" / "inline").glob(f"{name}/*") if p.is_dir()]


def test_failed_and_no_build_calls_leave_no_generated_sources(dropin_env, monkeypatch) -> None:
    with pytest.raises(kernelcache.BuildError):
        jit.load_inline("broken_inline", cpp_sources="int64_t f( { return 1; }", functions=["f"])
    assert _inline_dirs(dropin_env, "broken_inline") == []
    monkeypatch.setenv("KERNELCACHE_NO_BUILD", "1")
    with pytest.raises(kernelcache.CacheMissError):
        jit.load_inline("never_built", cpp_sources="int64_t g() { return 1; }", functions=["g"])
    assert _inline_dirs(dropin_env, "never_built") == []
    assert dropin_env.compiles() == 1  # the broken one only


def test_a_build_error_without_a_tool_run_shows_neither_exit_none_nor_a_placeholder_command() -> None:
    msg = str(kernelcache.BuildError("k", "<depfile>", "compiler wrote no depfile for a.cc"))
    assert "exit None" not in msg and "<depfile>" not in msg and "compiler wrote no depfile" in msg
    real = str(kernelcache.BuildError("k", "g++ -c a.cc", "a.cc:1: error", 1))
    assert "(exit 1)" in real and "command: g++ -c a.cc" in real
