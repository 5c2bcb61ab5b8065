"""The plugin builds a kernel only when a selected test that will run can use it.

A kernel whose every test skips here (the gpu gate on a machine without a GPU, a true
``skipif``) is not compiled: on a CPU runner a CUDA kernel used only by GPU tests would cost
minutes of nvcc for nothing. An explicit request (``--kc-kernels``) still builds it. Counted by
real compiler runs (the project's compiler wrapper), with and without xdist.
"""
from __future__ import annotations

TESTS = '''
import pytest

NAME = "kc_add_" + "b"  # computed: only collection sees it

@pytest.mark.gpu
@pytest.mark.kernel("kc_add_a")
def test_on_gpu(kc_kernel):
    assert kc_kernel.add(1, 2) == 3

@pytest.mark.skipif("1 + 1 == 2", reason="never runs here")
@pytest.mark.kernel(NAME)
def test_skipped(kc_kernel):
    assert kc_kernel.sub(3, 2) == 1

def test_cpu():
    pass
'''


def test_kernels_of_tests_that_skip_are_not_built(kcp):
    kcp.ini()
    kcp.pytester.makepyfile(test_k=TESTS)
    for extra in ((), ("-p", "xdist", "-n", "2")):
        r = kcp.run("-p", "kernelcache", "--kc-hardware=cpu", *extra)
        assert r.ret == 0, r.stdout.str() + r.stderr.str()
        r.assert_outcomes(passed=1, skipped=2)
        assert kcp.compiles("add_a.cc") == 0 and kcp.compiles("add_b.cc") == 0, extra
        assert "warming" not in r.stdout.str()


def test_a_kernel_is_built_once_a_test_that_uses_it_runs(kcp):
    kcp.ini()
    kcp.pytester.makepyfile(test_k=TESTS)
    r = kcp.run("-p", "kernelcache", "--kc-hardware=1x9.0")  # a stand-in GPU: the gpu test runs
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    r.assert_outcomes(passed=2, skipped=1)
    assert kcp.compiles("add_a.cc") == 1 and kcp.compiles("add_b.cc") == 0
    r.stdout.fnmatch_lines(["kc_add_a *built*controller*"])


def test_an_explicit_request_still_builds_an_unused_kernel(kcp):
    kcp.ini()
    kcp.pytester.makepyfile(test_k=TESTS)
    r = kcp.run("-p", "kernelcache", "--kc-hardware=cpu", "--kc-kernels=kc_add_b")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    r.assert_outcomes(passed=1, skipped=2)
    assert kcp.compiles("add_b.cc") == 1 and kcp.compiles("add_a.cc") == 0
    r.stdout.fnmatch_lines(["kc_add_b *built*controller*"])
