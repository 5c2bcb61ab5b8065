"""Parity: the same kernels through ``tvm_ffi.cpp.*`` and through ``kernelcache.tvm_ffi.*`` give the
same functions and the same results; wrong arguments raise the same exception types.

Table-driven: every case is built by both (real compiler, isolated caches), then each call of the
case is made on both modules and compared. CUDA cases are compile-only here (no GPU): both sides
must produce a shared library exporting the same tvm-ffi functions.
"""
from __future__ import annotations

import inspect
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import tvm_ffi
import tvm_ffi.cpp

from kernelcache import BuildError, KernelCacheError
from kernelcache import tvm_ffi as dropin

CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
HAVE_NVCC = (CUDA_HOME / "bin" / "nvcc").exists()

ADD_SCALE = """
int64_t add(int64_t a, int64_t b) { return a + b; }
double scale(double x, int64_t k) { return x * k; }
"""
MUL = "int64_t mul(int64_t a, int64_t b) { return a * b; }"
NEG = "int64_t neg(int64_t a) { return -a; }"
OFFSET = """
#include "kc_offset.h"
int64_t offset_add(int64_t a) { return a + KC_OFFSET + KC_EXTRA; }
"""
ADD_ONE = """
void add_one(tvm::ffi::TensorView x, tvm::ffi::TensorView y) {
  TVM_FFI_ICHECK(x.ndim() == 1) << "x must be 1-D";
  for (int64_t i = 0; i < x.size(0); ++i)
    static_cast<float*>(y.data_ptr())[i] = static_cast<float*>(x.data_ptr())[i] + 1.0f;
}
"""
# Reads the two symbols TVM_FFI_EMBED_CUBIN(blob) declares, without needing a GPU.
CUBIN_READER = """
extern "C" const char __tvm_ffi__cubin_blob[];
extern "C" const char __tvm_ffi__cubin_blob_end[];
int64_t blob_size() { return __tvm_ffi__cubin_blob_end - __tvm_ffi__cubin_blob; }
int64_t blob_byte(int64_t i) { return static_cast<unsigned char>(__tvm_ffi__cubin_blob[i]); }
"""
BLOB = bytes(range(256)) * 3 + b"\x00\x7f\"\\\n?"
FILE_KERNEL = """
#include <tvm/ffi/function.h>
#include "kc_offset.h"
int64_t file_add(int64_t a, int64_t b) { return a + b + KC_OFFSET; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(file_add, file_add);
"""
C_KERNEL = "int kc_c_twice(int x) { return 2 * x; }\n"
CXX_IMPL = 'extern "C" int kc_c_twice(int x) { return 2 * x; }\n'
C_USER = """
#include <tvm/ffi/function.h>
extern "C" int kc_c_twice(int x);
int64_t twice(int64_t a) { return kc_c_twice(static_cast<int>(a)); }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(twice, twice);
"""
CUDA_KERNEL = """
__global__ void fill_kernel(float* out, float v, int64_t n) {
  int64_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = v;
}
void fill(tvm::ffi::TensorView out, double v) {
  int64_t n = out.size(0);
  fill_kernel<<<(n + 255) / 256, 256>>>(static_cast<float*>(out.data_ptr()), static_cast<float>(v), n);
}
"""
CUBIN_KERNEL = 'extern "C" __global__ void touch(int* p) { if (p) *p = 1; }\n'
CUBIN_LAUNCHER = """
#include <tvm/ffi/extra/cuda/cubin_launcher.h>
TVM_FFI_EMBED_CUBIN(kc_mod);
int64_t has_kernel() { static auto k = TVM_FFI_EMBED_CUBIN_GET_KERNEL(kc_mod, "touch"); (void)k; return 1; }
"""


def _np_to_ffi(a: np.ndarray) -> Any:
    return tvm_ffi.from_dlpack(a)


def _tensor_call(mod: Any) -> list[float]:
    x = np.arange(5, dtype=np.float32)
    y = np.zeros(5, dtype=np.float32)
    mod.add_one(_np_to_ffi(x), _np_to_ffi(y))
    return y.tolist()


@dataclass
class Case:
    id: str
    api: str  # "inline" or "files"
    kwargs: Callable[[Path], dict]  # project dir -> keyword arguments of the JIT call
    calls: list[tuple[str, tuple]] = field(default_factory=list)  # (function, args) to compare
    custom: Callable[[Any], Any] | None = None  # extra comparison on the module
    cuda: bool = False  # compile-only: build on both sides, compare exported functions


def _project(base: Path) -> Path:
    (base / "include").mkdir(parents=True, exist_ok=True)
    (base / "include" / "kc_offset.h").write_text("#define KC_OFFSET 100\n")
    (base / "src").mkdir(exist_ok=True)
    (base / "src" / "file_add.cc").write_text(FILE_KERNEL)
    (base / "src" / "twice_impl.c").write_text(C_KERNEL)
    (base / "src" / "twice_impl.cc").write_text(CXX_IMPL)
    (base / "src" / "twice.cc").write_text(C_USER)
    (base / "src" / "touch.cu").write_text(CUBIN_KERNEL)
    return base


CASES = [
    Case("inline-mapping-with-docs", "inline",
         lambda p: dict(cpp_sources=ADD_SCALE, functions={"add": "add two integers", "scale": ""}),
         calls=[("add", (2, 3)), ("add", (-7, 7)), ("scale", (1.5, 4))]),
    Case("inline-sequence-of-sources", "inline",
         lambda p: dict(cpp_sources=[MUL, NEG], functions=["mul", "neg"]),
         calls=[("mul", (6, 7)), ("neg", (5,))]),
    Case("inline-str-function-header-flags", "inline",
         lambda p: dict(cpp_sources=OFFSET, functions="offset_add", extra_include_paths=[str(p / "include")],
                        extra_cflags=["-DKC_EXTRA=7", "  -O1 "]),
         calls=[("offset_add", (1,))]),
    Case("inline-tensor", "inline", lambda p: dict(cpp_sources=ADD_ONE, functions=["add_one"]),
         custom=_tensor_call),
    Case("inline-embed-cubin", "inline",
         lambda p: dict(cpp_sources=CUBIN_READER, functions=["blob_size", "blob_byte"], embed_cubin={"blob": BLOB}),
         calls=[("blob_size", ()), ("blob_byte", (0,)), ("blob_byte", (255,)), ("blob_byte", (len(BLOB) - 2,))]),
    Case("files-sources", "files",
         lambda p: dict(sources=[str(p / "src" / "file_add.cc")], extra_include_paths=[str(p / "include")]),
         calls=[("file_add", (1, 2))]),
    Case("files-cpp_files-alias-two-sources", "files",
         lambda p: dict(cpp_files=[str(p / "src" / "twice.cc")], sources=str(p / "src" / "twice_impl.cc")),
         calls=[("twice", (21,))]),
    Case("cuda-inline-compile-only", "inline",
         lambda p: dict(cuda_sources=CUDA_KERNEL, functions=["fill"]), cuda=True),
    Case("cuda-embed-real-cubin-compile-only", "inline",
         lambda p: dict(cpp_sources=CUBIN_LAUNCHER, functions=["has_kernel"],
                        embed_cubin={"kc_mod": _cubin(p)},
                        extra_include_paths=[str(CUDA_HOME / "include")],
                        extra_ldflags=[f"-L{CUDA_HOME / 'lib64'}", "-lcudart"]), cuda=True),
]


def _cubin(p: Path) -> bytes:
    out = p / "touch.cubin"
    if not out.exists():
        subprocess.run([str(CUDA_HOME / "bin" / "nvcc"), "--cubin", "-arch=sm_90", str(p / "src" / "touch.cu"),
                        "-o", str(out)], check=True, capture_output=True)
    return out.read_bytes()


def _exported(so: str) -> list[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", so], check=True, capture_output=True, text=True).stdout
    return sorted(line.split()[-1] for line in out.splitlines()
                  if line.split()[-1].startswith("__tvm_ffi_") and not line.split()[-1].startswith(
                      ("__tvm_ffi__metadata_", "__tvm_ffi__doc_")))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_same_functions_and_results(case: Case, dropin_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if case.cuda:
        if not HAVE_NVCC:
            pytest.skip(f"no nvcc under {CUDA_HOME}")
        monkeypatch.setenv("TVM_FFI_CUDA_ARCH_LIST", "9.0")
        monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "9.0")
    proj = _project(tmp_path / "proj")
    kw = case.kwargs(proj)
    name = "parity_" + case.id.replace("-", "_")
    if case.cuda:  # compile + link only: nothing CUDA runs here
        fn = "build_inline" if case.api == "inline" else "build"
        theirs = getattr(tvm_ffi.cpp, fn)(name, **kw)
        ours = getattr(dropin, fn)(name, **kw)
        assert Path(ours).is_file() and Path(theirs).is_file()
        assert _exported(ours) == _exported(theirs) != []
        if "embed_cubin" in kw:
            image = next(iter(kw["embed_cubin"].values()))
            assert image in Path(ours).read_bytes() and image in Path(theirs).read_bytes()
        return
    fn = "load_inline" if case.api == "inline" else "load"
    theirs = getattr(tvm_ffi.cpp, fn)(name, **kw)
    ours = getattr(dropin, fn)(name, **kw)
    assert isinstance(ours, tvm_ffi.Module)
    for fname, args in case.calls:
        assert getattr(ours, fname)(*args) == getattr(theirs, fname)(*args), (fname, args)
    if case.custom:
        assert case.custom(ours) == case.custom(theirs)
    if case.api == "inline" and isinstance(kw.get("functions"), dict):
        for fname, doc in kw["functions"].items():  # kernelcache builds with metadata: docs readable
            assert (ours.get_function_doc(fname) or "") == doc


@pytest.mark.parametrize("fn", ["load_inline", "load", "build_inline", "build"])
def test_signatures_are_tvm_ffis(fn: str) -> None:
    """Every tvm-ffi parameter exists with the same kind and default (ours add `settings` only)."""
    theirs = inspect.signature(getattr(tvm_ffi.cpp, fn)).parameters
    ours = inspect.signature(getattr(dropin, fn)).parameters
    for pname, p in theirs.items():
        assert pname in ours, pname
        assert (ours[pname].kind, ours[pname].default) == (p.kind, p.default), pname
    assert set(ours) - set(theirs) <= {"settings"}


def _wrong_calls(proj: Path) -> list[tuple[str, str, tuple, dict]]:
    good = "int64_t one() { return 1; }"
    return [
        ("no-sources", "load_inline", ("w1",), {}),
        ("positional-source", "load_inline", ("w2", good), {}),
        ("functions-not-iterable", "load_inline", ("w3",), dict(cpp_sources=good, functions=5)),
        ("bad-backend-with-cuda", "load_inline", ("w4",), dict(cuda_sources="__global__ void k() {}", backend="metal")),
        ("compile-error", "load_inline", ("w5",), dict(cpp_sources="int64_t one( { return 1; }", functions="one")),
        ("files-no-sources", "load", ("w6",), {}),
        ("files-missing-source", "load", ("w7",), dict(sources=[str(proj / "nope.cc")])),
        ("build-compile-error", "build_inline", ("w8",), dict(cpp_sources="this is not C++", functions="x")),
    ]


def test_wrong_arguments_raise_the_same_exception_types(dropin_env, tmp_path: Path) -> None:
    proj = _project(tmp_path / "proj")
    for label, fn, args, kw in _wrong_calls(proj):
        with pytest.raises(Exception) as theirs:
            getattr(tvm_ffi.cpp, fn)(*args, **kw)
        with pytest.raises(Exception) as ours:
            getattr(dropin, fn)(*args, **kw)
        assert isinstance(ours.value, type(theirs.value)), (label, theirs.value, ours.value)
        if isinstance(theirs.value, RuntimeError) and "error" in label:
            # a failed build: caught as tvm-ffi's RuntimeError, with kernelcache's richer message
            assert isinstance(ours.value, BuildError) and isinstance(ours.value, KernelCacheError)
            assert ours.value.returncode not in (0, None) and ours.value.command and "error" in ours.value.output


def test_wrong_kernel_arguments_raise_the_same_exception_types(dropin_env) -> None:
    theirs = tvm_ffi.cpp.load_inline("wrong_args", cpp_sources=ADD_SCALE, functions=["add", "scale"])
    ours = dropin.load_inline("wrong_args", cpp_sources=ADD_SCALE, functions=["add", "scale"])
    for fname, args in [("add", ("a", 1)), ("add", (1,)), ("add", (1, 2, 3)), ("scale", (None, 1))]:
        with pytest.raises(Exception) as t:
            getattr(theirs, fname)(*args)
        with pytest.raises(Exception) as o:
            getattr(ours, fname)(*args)
        assert type(o.value) is type(t.value), (fname, args, t.value, o.value)
    for mod in (theirs, ours):
        with pytest.raises(AttributeError):
            mod.not_exported  # noqa: B018


def test_c_sources_are_compiled_as_c(dropin_env, tmp_path: Path) -> None:
    """tvm-ffi compiles ``.c`` with ``$CC``; a C function must keep its C symbol name.

    Run in a subprocess: a module whose C symbol was mangled dies on the first call with a
    dynamic-linker "symbol lookup error" (no Python exception to catch).
    """
    proj = _project(tmp_path / "proj")
    code = f"""
import tvm_ffi.cpp
from kernelcache import tvm_ffi as dropin
srcs = [{str(proj / "src" / "twice.cc")!r}, {str(proj / "src" / "twice_impl.c")!r}]
print(tvm_ffi.cpp.load("c_twice", cpp_files=srcs).twice(21), flush=True)
print(dropin.load("c_twice", cpp_files=srcs).twice(21), flush=True)
"""
    from .conftest import tvm_env

    proc = subprocess.run([__import__("sys").executable, "-c", code], env=tvm_env(dropin_env),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["42", "42"]


def test_nvcc_available_for_cuda_cases() -> None:
    """The CUDA rows above are compile-only; make their skip visible if the toolkit is missing."""
    if not HAVE_NVCC:
        pytest.skip("no CUDA toolkit: the CUDA parity rows were skipped")
    assert shutil.which(str(CUDA_HOME / "bin" / "nvcc"))
