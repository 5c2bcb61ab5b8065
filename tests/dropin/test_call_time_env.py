"""A kernel library that sets ``TVM_FFI_CUDA_ARCH_LIST`` and ``CXX`` only around each call (as
SGLang's ``load_jit`` does) gets exactly that arch and that compiler in every mode, even with
``KERNELCACHE_CUDA_ARCH`` (or a pytest session's arch) saying otherwise.

Compile only (no GPU needed; with one, the detected arch competes instead of
``KERNELCACHE_CUDA_ARCH``): the proof is the manifest of the entry each call returns (its
target arch and the compiler that built it), read in the process that made the call. Every mode
shares one cache, so only the first mode compiles; a later mode that ignored the call's
environment would ask for another key and fail its checks.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import tvm_env

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(
    os.environ.get("CUDA_HOME") or "/usr/local/cuda", "bin", "nvcc")), reason="needs nvcc (compile only)")

LIBRARY = '''
import contextlib, os
{import_line}

KERNEL = """
__global__ void fill(float* x) {{ x[threadIdx.x] = 1.0f; }}
void launch(tvm::ffi::TensorView x) {{ fill<<<1, 1>>>(static_cast<float*>(x.data_ptr())); }}
"""


@contextlib.contextmanager
def _env(**values):
    old = {{k: os.environ.get(k) for k in values}}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def build(arch, cxx):
    with _env(TVM_FFI_CUDA_ARCH_LIST=arch, CXX=cxx):
        return jit.build_inline("archlib_fill", cuda_sources=KERNEL, functions=["launch"])
'''

REPORT = '''
import json, pathlib, sys
import archlib

out = {}
for arch, cxx in json.loads(sys.argv[1]):
    so = pathlib.Path(archlib.build(arch, cxx))
    m = json.loads((so.parent / "manifest.json").read_text())
    out[arch] = {"arch": m["inputs"]["arch"], "cxx": m["inputs"]["tools"]["cxx"]["path"]}
pathlib.Path(sys.argv[2]).write_text(json.dumps(out))
'''

PYTEST_FILE = '''
import json, os, pathlib, runpy, sys

def test_library_builds():
    sys.argv = ["report", os.environ["KC_CALLS"], os.environ["KC_OUT"]]
    runpy.run_path(os.environ["KC_REPORT"], run_name="__main__")
'''

MODES = {
    # mode: (import line of the library, how the process starts)
    "swap": ("from kernelcache import tvm_ffi as jit", "script"),
    "install": ("import tvm_ffi.cpp as jit", "install"),
    "env": ("import tvm_ffi.cpp as jit", "env"),
    "runner": ("import tvm_ffi.cpp as jit", "runner"),
    "pytest": ("import tvm_ffi.cpp as jit", "pytest"),
}


def _second_compiler(kc_env) -> Path:
    other = kc_env.tmp / "bin" / "other-cxx"
    shutil.copy(kc_env.cxx, other)
    other.write_text(other.read_text().replace("# Counting compiler wrapper", "# Second compiler wrapper"))
    return other


def test_arch_and_compiler_set_around_each_call_win_in_every_mode(dropin_env) -> None:
    other = _second_compiler(dropin_env)
    calls = [["8.0", str(dropin_env.cxx)], ["8.9", str(other)]]
    expected = {"8.0": {"arch": ["8.0"], "cxx": os.path.realpath(dropin_env.cxx)},
                "8.9": {"arch": ["8.9"], "cxx": os.path.realpath(other)}}
    results = {}
    for mode, (import_line, start) in MODES.items():
        site = dropin_env.tmp / f"site-{mode}"
        (site / "archlib").mkdir(parents=True)
        (site / "archlib" / "__init__.py").write_text(LIBRARY.format(import_line=import_line))
        report = site / "report.py"
        report.write_text(REPORT)
        out = site / "out.json"
        env = tvm_env(dropin_env, KERNELCACHE_CUDA_ARCH="9.0", KC_CALLS=json.dumps(calls), KC_OUT=str(out),
                      KC_REPORT=str(report))
        if shutil.which("nvidia-smi"):  # with a GPU, the detected arch is the competitor (the H200 run)
            del env["KERNELCACHE_CUDA_ARCH"]
        env["PYTHONPATH"] = str(site) + os.pathsep + env["PYTHONPATH"]
        args = [str(report), json.dumps(calls), str(out)]
        if start == "install":
            code = ("import sys, runpy, kernelcache, kernelcache.tvm_ffi as d; d.install(kernelcache.Settings.from_env()); "
                    f"sys.argv = ['report', *{args[1:]!r}]; runpy.run_path({str(report)!r}, run_name='__main__')")
            argv = [sys.executable, "-c", code]
        elif start == "env":
            env["KERNELCACHE_PATCH"] = "tvm_ffi"
            argv = [sys.executable, "-c", "import kernelcache, runpy, sys; sys.argv = ['report', *sys.argv[1:]]; "
                    f"runpy.run_path({str(report)!r}, run_name='__main__')", *args[1:]]
        elif start == "runner":
            argv = [sys.executable, "-m", "kernelcache.patch", "--jit", "tvm_ffi", *args]
        elif start == "pytest":
            (site / "test_lib.py").write_text(PYTEST_FILE)
            argv = [sys.executable, "-m", "pytest", "-p", "kernelcache", "--kc-patch=tvm_ffi", "-q", "-p", "no:xdist",
                    "-p", "no:cacheprovider", str(site / "test_lib.py")]
        else:
            argv = [sys.executable, *args]
        proc = subprocess.run(argv, env=env, cwd=str(site), capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{mode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        results[mode] = json.loads(out.read_text())
    assert results == {mode: expected for mode in MODES}
    assert not (dropin_env.tmp / "tvm-ffi-cache").exists()  # every call went through kernelcache
