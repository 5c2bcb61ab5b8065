"""The schema-export header kernelcache pre-includes into exporting tvm-ffi sources.

It must export exactly what tvm-ffi's own ``TVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1`` macro
exports (the loader compares those schemas on every load), for every kind of parameter tvm-ffi
names; and a source that exports through a macro of its own header (where the pre-include is
not used) must still export tvm-ffi's metadata. Real builds, real modules: g++ (and nvcc where
installed) compile, tvm-ffi loads and answers ``get_function_metadata``.
"""
from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest
from kernelcache.base.errors import ToolchainError

import kernelcache as kc
from kernelcache import kinds
from kernelcache.build import compile as build
from kernelcache.key import plan as plan_mod

TYPES_SRC = r"""
#include <tvm/ffi/function.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/extra/stl.h>
using namespace tvm::ffi;
void views(TensorView a, int64_t b, double c, bool d) {}
Optional<String> objects(Array<int64_t> x, Optional<Tensor> t, String s) { return s; }
auto callables = [](Function f, Any a, Map<String, int64_t> m) -> Array<Tensor> { return {}; };
std::vector<std::string> stl(std::optional<int> x, const std::string& s, float y) { return {}; }
void nothing() {}
int32_t small(int32_t a, const char* name) { return a; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(views, views);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(objects, objects);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(callables, callables);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(stl, stl);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(nothing, nothing);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(small, small);
"""
FUNCTIONS = ["views", "objects", "callables", "stl", "nothing", "small"]


def _plan(spec: kc.KernelSpec) -> plan_mod.BuildPlan:
    return kinds.make_plan(spec, kc.Settings.from_env())


def _argv(spec: kc.KernelSpec) -> list[list[str]]:
    plan = _plan(spec)
    return [plan.compile_argv(step, "/build") for step in plan.sources]


def test_pre_included_export_is_tvm_ffis_metadata_for_every_kind_of_type(kc_env, tmp_path: Path) -> None:
    import tvm_ffi
    import tvm_ffi.cpp

    src = tmp_path / "src"
    src.mkdir()
    (src / "types.cc").write_text(TYPES_SRC)
    spec = kc.KernelSpec(name="schema_types", sources=["types.cc"], root=src, functions=dict.fromkeys(FUNCTIONS))
    assert all(["-include", plan_mod.SCHEMA_EXPORT_HEADER] == a[a.index("-include"):a.index("-include") + 2]
               for a in _argv(spec))
    ours = kc.load(spec)
    # tvm-ffi's own macro, same source, same define: the reference
    theirs_path = tvm_ffi.cpp.build("schema_types_ref", cpp_files=[str(src / "types.cc")],
                                    extra_cflags=["-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1"],
                                    build_directory=str(tmp_path / "ref"))
    theirs = tvm_ffi.load_module(theirs_path)
    for fn in FUNCTIONS:
        got, want = ours.get_function_metadata(fn), theirs.get_function_metadata(fn)
        assert want and "type_schema" in want, fn
        assert got == want, fn
    assert ours.nothing() is None  # and the functions themselves still run
    recorded = kc_env.entries("schema_types")
    assert len(recorded) == 1
    deps = [d["path"] for d in json.loads((recorded[0] / "manifest.json").read_text())["deps"]]
    assert "${KERNELCACHE}/csrc/tvm_ffi_schema_export.h" in deps  # a dependency like any header, anchored
    # the header's C half (the text builder) is compiled into the identity object, hidden: every
    # module binds to its own copy, and nothing of it is exported
    assert f'#include "{plan_mod.SCHEMA_EXPORT_HEADER}"' in build.identity_source(_plan(spec), "0" * 32)
    lib = ctypes.CDLL(str(recorded[0] / "schema_types.so"))
    for sym in ("__kernelcache_schema_part", "__kernelcache_schema_params", "__kernelcache_schema_json"):
        assert not hasattr(lib, sym), sym
    assert hasattr(lib, "__tvm_ffi__metadata_views") and hasattr(lib, plan_mod.IDENTITY_SYMBOL)


def test_a_source_exporting_through_its_own_header_keeps_tvm_ffis_macro(kc_env, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "exports.h").write_text("#include <tvm/ffi/function.h>\n"
                                   "#define EXPORT_ALL() TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add_impl)\n")
    (src / "add.cc").write_text('#include "exports.h"\n'
                                "int64_t add_impl(int64_t a, int64_t b) { return a + b; }\nEXPORT_ALL();\n")
    spec = kc.KernelSpec(name="own_macro", sources=["add.cc"], root=src, functions={"add": "Callable[[int, int], int]"})
    assert "-include" not in _argv(spec)[0]  # the source never spells the macro: no pre-include
    assert "#include" not in build.identity_source(_plan(spec), "0" * 32)  # nor its C half
    mod = kc.load(spec)  # exported schema checked against the declared one: tvm-ffi's macro exported it
    assert mod.add(2, 3) == 5
    assert "type_schema" in mod.get_function_metadata("add")


def test_a_wrong_declaration_is_still_refused_on_the_fresh_build(kc_env, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "add.cc").write_text("#include <tvm/ffi/function.h>\n"
                                "int64_t add(int64_t a, int64_t b) { return a + b; }\n"
                                "TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add);\n")
    spec = kc.KernelSpec(name="declared_wrong", sources=["add.cc"], root=src,
                         functions={"add": "Callable[[float, int], int]"})
    with pytest.raises(kc.SchemaMismatch) as err:
        kc.load(spec)
    assert "Callable[[int, int], int]" in str(err.value)
    assert not kc_env.entries("declared_wrong")  # nothing published


def test_a_cuda_source_gets_the_same_export_through_nvcc(kc_env, tmp_path: Path, monkeypatch) -> None:
    from kernelcache.host import toolchain

    try:
        toolchain.find_cuda_home()
    except ToolchainError as e:
        pytest.skip(f"no CUDA toolkit: {e}")
    monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "9.0")
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cu").write_text("#include <tvm/ffi/function.h>\n"
                              "__global__ void touch(int* p) { *p = 1; }\n"
                              "int64_t twice(int64_t a) { return 2 * a; }\n"
                              "TVM_FFI_DLL_EXPORT_TYPED_FUNC(twice, twice);\n")
    spec = kc.KernelSpec(name="cu_schema", sources=["k.cu"], root=src, functions={"twice": "Callable[[int], int]"})
    argv = _argv(spec)[0]
    assert argv[argv.index("-include") + 1] == plan_mod.SCHEMA_EXPORT_HEADER
    mod = kc.load(spec)  # compiled by nvcc, linked against cudart; no GPU needed to load it
    assert mod.twice(21) == 42
    assert mod.get_function_metadata("twice")["type_schema"].startswith('{"type":"ffi.Function"')
