"""A CUDA arch that is set but cannot be parsed is a pytest usage error (exit 4)."""
from __future__ import annotations

import pytest

TESTS = "def test_x():\n    pass\n"


@pytest.mark.parametrize("how", ["cli", "env", "ini", "tvm_env"])
def test_bad_arch_is_a_usage_error(plain, monkeypatch, how):
    plain.makepyfile(test_a=TESTS)
    args = ["-p", "kernelcache", "-p", "no:cacheprovider"]
    if how == "cli":
        args.append("--kc-arch=banana")
    elif how == "env":
        monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "banana")
    elif how == "tvm_env":
        monkeypatch.setenv("TVM_FFI_CUDA_ARCH_LIST", "banana")
    else:
        plain.makeini("[pytest]\nkernelcache_cuda_arch = banana\n")
    r = plain.runpytest_subprocess(*args)
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str() + r.stderr.str()
    err = r.stderr.str()
    assert "banana" in err and "CUDA arch" in err
    where = {"cli": "--kc-arch", "env": "KERNELCACHE_CUDA_ARCH", "ini": "kernelcache_cuda_arch",
             "tvm_env": "TVM_FFI_CUDA_ARCH_LIST"}[how]
    assert where in err


def test_good_arch_spellings_are_accepted(plain):
    plain.makepyfile(test_a=TESTS)
    r = plain.runpytest_subprocess("-p", "kernelcache", "--kc-arch=sm_90a,8.0")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
