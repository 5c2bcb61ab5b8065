"""Installed but not enabled, while the session uses the plugin's fixtures, ini keys or markers:
pytest says "add `-p kernelcache`" where the user looks (the failing test, the summary)."""
from __future__ import annotations

HINT = "add `-p kernelcache`"

FIXTURE_TEST = """
import pytest

@pytest.mark.kernel("kc_add_a")
def test_uses_fixture(kc_kernel):
    assert kc_kernel.add(1, 2) == 3
"""

GPU_TEST = """
import pytest

@pytest.mark.gpu
def test_needs_gpu():
    raise RuntimeError("no CUDA device")

def test_plain():
    pass
"""


def test_fixture_without_plugin_says_add_p_kernelcache(plain):
    plain.makepyfile(test_f=FIXTURE_TEST)
    r = plain.runpytest_subprocess("-p", "no:cacheprovider")
    assert r.ret == 1
    r.assert_outcomes(errors=1)
    out = r.stdout.str()
    assert "kc_kernel" in out and HINT in out
    assert "fixture 'kc_kernel' not found" not in out


def test_ini_keys_without_plugin_say_add_p_kernelcache(plain):
    plain.makeini("[pytest]\nkernelcache_specs = kcspecs:specs\nkernelcache_kernels = kc_add_a\n")
    plain.makepyfile(test_a="def test_a():\n    pass\n")
    r = plain.runpytest_subprocess("-p", "no:cacheprovider")
    assert r.ret == 0
    out = r.stdout.str()
    assert "kernelcache_kernels" in out and "kernelcache_specs" in out and HINT in out


def test_gpu_marked_failure_without_plugin_says_add_p_kernelcache(plain):
    plain.makepyfile(test_g=GPU_TEST)
    r = plain.runpytest_subprocess("-p", "no:cacheprovider")
    r.assert_outcomes(failed=1, passed=1)
    out = r.stdout.str()
    # on the failing test itself, and once in the summary
    section = out[out.index("test_needs_gpu"):]
    assert HINT in section
    assert "1 test(s) marked gpu/kernel" in out


def test_nothing_is_said_when_the_plugin_is_not_used(plain):
    plain.makepyfile(test_a="def test_a():\n    pass\n")
    r = plain.runpytest_subprocess("-p", "no:cacheprovider")
    assert r.ret == 0
    assert HINT not in r.stdout.str() and "kernelcache:" not in r.stdout.str()


def test_nothing_is_said_when_enabled(plain):
    plain.makepyfile(test_g=GPU_TEST)
    r = plain.runpytest_subprocess("-p", "kernelcache", "-p", "no:cacheprovider")
    r.assert_outcomes(skipped=1, passed=1)
    assert HINT not in r.stdout.str()
