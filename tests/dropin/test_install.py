"""Zero-code-change mode: an unmodified third-party package that JITs through ``tvm_ffi.cpp`` at
import gets kernelcache's cache: builds once, then 0 compiles in every later fresh process, and
its kernels show up in ``kernelcache.stats()``, ``kernelcache stats`` and the pytest summary."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import tvm_env

# A "third-party" kernel library: knows nothing about kernelcache. One kernel through the module
# attribute at import time, one through a function-level `from tvm_ffi.cpp import ...` (SGLang's
# load_jit style), one file-based through tvm_ffi.cpp.load.
PACKAGE = '''
import os
import tvm_ffi.cpp

_HERE = os.path.dirname(__file__)
add_ops = tvm_ffi.cpp.load_inline(
    "thirdparty_add", cpp_sources="int64_t add(int64_t a, int64_t b) { return a + b; }", functions=["add"])


def _load_jit(name, src, fn):
    from tvm_ffi.cpp import load_inline
    return load_inline(name, cpp_sources=src, functions=[fn])


mul_ops = _load_jit("thirdparty_mul", "int64_t mul(int64_t a, int64_t b) { return a * b; }", "mul")
sub_ops = tvm_ffi.cpp.load("thirdparty_sub", sources=[os.path.join(_HERE, "sub.cc")])
'''
SUB_CC = ('#include <tvm/ffi/function.h>\nint64_t sub(int64_t a, int64_t b) { return a - b; }\n'
          "TVM_FFI_DLL_EXPORT_TYPED_FUNC(sub, sub);\n")
KERNELS = ["thirdparty_add", "thirdparty_mul", "thirdparty_sub"]

USE = """
import json, kernelcache
{activate}
import thirdparty_kernels as tk
assert (tk.add_ops.add(2, 3), tk.mul_ops.mul(4, 5), tk.sub_ops.sub(9, 4)) == (5, 20, 5)
print(json.dumps(kernelcache.stats()["kernels"]))
"""


@pytest.fixture
def thirdparty(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    pkg = site / "thirdparty_kernels"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PACKAGE)
    (pkg / "sub.cc").write_text(SUB_CC)
    return site


def _run(env, site: Path, code: str, *args: str, **extra: str) -> subprocess.CompletedProcess:
    e = tvm_env(env, **extra)
    e["PYTHONPATH"] = str(site) + ":" + e["PYTHONPATH"]
    proc = subprocess.run([sys.executable, *args] if args else [sys.executable, "-c", code], env=e,
                          capture_output=True, text=True, timeout=300, cwd=str(site))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize("activate", [
    "import kernelcache.tvm_ffi as d; d.install()",
    "import kernelcache.tvm_ffi as d; assert d.install_if_requested()",  # KERNELCACHE_PATCH_TVM_FFI=1
    "",  # KERNELCACHE_PATCH_TVM_FFI=1 alone: `import kernelcache` arms the hook, tvm_ffi.cpp's import installs
])
def test_installed_package_builds_once_then_hits_in_fresh_processes(activate, dropin_env, thirdparty) -> None:
    code = USE.format(activate=activate)
    first = json.loads(_run(dropin_env, thirdparty, code, KERNELCACHE_PATCH_TVM_FFI="1").stdout.splitlines()[-1])
    assert dropin_env.compiles() == 3
    assert {k: first[k].get("builds") for k in KERNELS} == {k: 1 for k in KERNELS}
    dropin_env.reset_counts()
    second = json.loads(_run(dropin_env, thirdparty, code, KERNELCACHE_PATCH_TVM_FFI="1").stdout.splitlines()[-1])
    assert dropin_env.compiles() == 0  # cache hits: nothing compiled in the second fresh process
    assert {k: second[k].get("hits") for k in KERNELS} == {k: 1 for k in KERNELS}
    assert not (dropin_env.tmp / "tvm-ffi-cache").exists()  # tvm-ffi's own cache was never used

    out = _run(dropin_env, thirdparty, "", "-m", "kernelcache", "stats", "--json").stdout
    assert set(KERNELS) <= set(json.loads(out))  # `kernelcache stats` lists the third-party kernels


def test_not_installed_means_tvm_ffi_builds_as_before(dropin_env, thirdparty) -> None:
    code = USE.format(activate="import kernelcache.tvm_ffi as d; assert not d.install_if_requested()")
    stats = json.loads(_run(dropin_env, thirdparty, code).stdout.splitlines()[-1])
    assert stats == {} and (dropin_env.tmp / "tvm-ffi-cache").is_dir()


def test_module_runner_needs_no_code_change(dropin_env, thirdparty) -> None:
    script = thirdparty / "app.py"
    script.write_text(USE.format(activate=""))
    _run(dropin_env, thirdparty, "", "-m", "kernelcache.tvm_ffi", str(script))
    dropin_env.reset_counts()
    stats = json.loads(_run(dropin_env, thirdparty, "", "-m", "kernelcache.tvm_ffi", str(script)).stdout.splitlines()[-1])
    assert dropin_env.compiles() == 0 and {k: stats[k].get("hits") for k in KERNELS} == {k: 1 for k in KERNELS}


def test_uninstall_restores_tvm_ffis_functions(dropin_env) -> None:
    import tvm_ffi.cpp
    import tvm_ffi.cpp.extension as ext

    from kernelcache import tvm_ffi as dropin

    before = {n: (getattr(tvm_ffi.cpp, n), getattr(ext, n)) for n in ("load_inline", "load", "build_inline", "build")}
    dropin.install()
    dropin.install()  # idempotent
    assert dropin.is_installed()
    assert all(getattr(getattr(tvm_ffi.cpp, n), "__kernelcache_dropin__", False) for n in before)
    assert all(getattr(getattr(ext, n), "__kernelcache_dropin__", False) for n in before)
    mod = tvm_ffi.cpp.load_inline("patched_inproc", cpp_sources="int64_t one() { return 1; }", functions="one")
    assert mod.one() == 1 and list((dropin_env.cache / "v1" / "entries").glob("patched_inproc/*/*"))
    dropin.uninstall()
    assert not dropin.is_installed()
    assert {n: (getattr(tvm_ffi.cpp, n), getattr(ext, n)) for n in before} == before


PYTEST_FILE = """
import thirdparty_kernels as tk

def test_uses_thirdparty_kernels():
    assert tk.add_ops.add(1, 2) == 3 and tk.mul_ops.mul(2, 3) == 6
"""


def test_pytest_option_patches_the_session_and_the_summary_lists_the_kernels(dropin_env, thirdparty) -> None:
    (thirdparty / "test_tp.py").write_text(PYTEST_FILE)
    (thirdparty / "pytest.ini").write_text("[pytest]\n")
    args = ["-m", "pytest", "-p", "kernelcache", "--kc-patch-tvm-ffi", "-q", "test_tp.py", "-p", "no:cacheprovider"]
    first = _run(dropin_env, thirdparty, "", *args)
    assert dropin_env.compiles() == 3, first.stdout
    dropin_env.reset_counts()
    second = _run(dropin_env, thirdparty, "", *args)
    assert dropin_env.compiles() == 0, second.stdout
    for k in KERNELS:
        assert k in second.stdout, second.stdout
