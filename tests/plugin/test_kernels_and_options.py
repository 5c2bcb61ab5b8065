"""Acceptance 5 (--kc-no-build on a cold cache) and the rest of the option surface: precedence
ini < env < CLI < marker, prebuild modes, build failures naming the kernel, the JSON report."""
from __future__ import annotations

import json


USES_A = '''
import pytest

@pytest.mark.kernel("kc_add_a")
def test_a(kc_kernel):
    assert kc_kernel.add(40, 2) == 42

def test_plain():
    pass
'''


def test_no_build_on_cold_cache_fails_naming_kernel_and_reason(kcp):
    kcp.ini()
    kcp.pytester.makepyfile(test_k=USES_A)
    r = kcp.run("-p", "kernelcache", "--kc-no-build")
    assert r.ret == 1
    r.assert_outcomes(passed=1, errors=1)
    r.stdout.fnmatch_lines([
        "*ERROR at setup of test_a*",
        "kernelcache: kernel 'kc_add_a' is unavailable: CacheMissError: kernel 'kc_add_a' is not in the cache "
        "and building is disabled (KERNELCACHE_NO_BUILD): no cached entry for this kernel",
    ])
    r.stdout.fnmatch_lines(["kc_add_a *failed*controller*CacheMissError*no cached entry for this kernel*",
                            "kernelcache: FAILED: kernel 'kc_add_a' failed: CacheMissError*"])
    assert kcp.compiles("add_a.cc") == 0
    # a warmed cache satisfies --kc-no-build
    assert kcp.run("-p", "kernelcache").ret == 0
    r = kcp.run("-p", "kernelcache", "--kc-no-build")
    assert r.ret == 0
    r.stdout.fnmatch_lines(["kc_add_a *hit*"])


def test_no_build_under_xdist_too(kcp):
    kcp.ini()
    kcp.pytester.makepyfile(test_k=USES_A)
    r = kcp.run("-p", "xdist", "-n", "2", "-p", "kernelcache", "--kc-no-build")
    assert r.ret == 1
    r.assert_outcomes(passed=1, errors=1)
    assert "kernel 'kc_add_a' is unavailable: CacheMissError" in r.stdout.str()
    assert kcp.compiles("add_a.cc") == 0


def test_failed_build_errors_only_its_tests_and_names_the_kernel(kcp_shared):
    kcp_shared.pytester.makeini("[pytest]\nkernelcache_specs =\n    kcspecs:specs\n    kcspecs:broken_specs\n")
    kcp_shared.pytester.makepyfile(test_k=USES_A + '''
@pytest.mark.kernel("kc_broken")
def test_broken(kc_kernel):
    pass

@pytest.mark.kernel("no_such_kernel")
def test_unknown():
    pass
''')
    r = kcp_shared.run("-p", "kernelcache")
    assert r.ret == 1
    r.assert_outcomes(passed=2, errors=2)
    out = r.stdout.str()
    assert "kernelcache: kernel 'kc_broken' is unavailable: BuildError: building kernel 'kc_broken' failed" in out
    assert "unknown kernel 'no_such_kernel' (known: kc_add_a, kc_add_b, kc_broken, ngram_corpus, " in out
    r.stdout.fnmatch_lines(["kc_broken *failed*BuildError*"])


def test_precedence_ini_env_cli(kcp_shared, monkeypatch):
    kcp_shared.pytester.makeini("[pytest]\nkernelcache_cuda_arch = 8.0\nkernelcache_prebuild = off\n")
    kcp_shared.pytester.makepyfile(test_env='''
        import os
        def test_env():
            print("ARCH=" + os.environ["KERNELCACHE_CUDA_ARCH"])
    ''')
    report = kcp_shared.path / "r.json"

    def arch(*args: str) -> tuple[str, str]:
        r = kcp_shared.run("-p", "kernelcache", "-s", f"--kc-report-json={report}", *args)
        assert r.ret == 0, r.stdout.str() + r.stderr.str()
        opt = json.loads(report.read_text())["session"]["options"]["cuda_arch"]
        line = next(x for x in r.stdout.lines if "ARCH=" in x)
        assert line.split("ARCH=")[1].strip() == opt["value"]
        return opt["value"], opt["source"]

    assert arch() == ("8.0", "ini")
    monkeypatch.setenv("KERNELCACHE_CUDA_ARCH", "8.6")
    assert arch() == ("8.6", "env")
    assert arch("--kc-arch=9.0") == ("9.0", "cli")


def test_marker_beats_cli_for_a_lazy_load(kcp):
    """prebuild=off loads inside the test; kernel(..., no_build=True) forbids building there."""
    kcp.ini("kernelcache_prebuild = off")
    kcp.pytester.makepyfile(test_k='''
        import pytest

        @pytest.mark.kernel("kc_add_a", no_build=True)
        def test_must_hit(kc_kernel):
            pass

        @pytest.mark.kernel("kc_add_b")
        def test_may_build(kc_kernel):
            assert kc_kernel.sub(1, 1) == 0
    ''')
    r = kcp.run("-p", "kernelcache")
    r.assert_outcomes(passed=1, errors=1)
    assert "kernel 'kc_add_a' could not be loaded: CacheMissError" in r.stdout.str()
    assert kcp.compiles("add_a.cc") == 0 and kcp.compiles("add_b.cc") == 1
    r.stdout.fnmatch_lines(["kc_add_b *built*test*"])  # built lazily, inside the test


def test_bad_option_values_are_usage_errors(plain, monkeypatch):
    plain.makepyfile(test_x="def test_x(): pass")
    monkeypatch.setenv("KERNELCACHE_PREBUILD", "sometimes")
    r = plain.runpytest_subprocess("-p", "kernelcache")
    assert r.ret == 4 and "env KERNELCACHE_PREBUILD must be one of auto/controller/off" in r.stderr.str()
    monkeypatch.delenv("KERNELCACHE_PREBUILD")
    plain.makeini("[pytest]\nkernelcache_specs = nomodule_here:specs\n")
    r = plain.runpytest_subprocess("-p", "kernelcache")
    assert r.ret == 4 and "kernelcache_specs: cannot import 'nomodule_here'" in r.stderr.str()


DYNAMIC = '''
import pytest

NAME = "kc_add_" + "a"   # not a literal: only collection can see it

@pytest.mark.kernel(NAME)
def test_dynamic(kc_kernel):
    assert kc_kernel.add(1, 1) == 2
'''


def test_prebuild_auto_warms_collected_kernels_once_across_workers(kcp):
    """A kernel only collection can see is warmed after collection, before any test, in each
    worker; the loader's single-flight lock keeps it to one compile."""
    kcp.ini()
    kcp.pytester.makepyfile(test_dyn=DYNAMIC)
    r = kcp.run("-p", "xdist", "-n", "2", "-p", "kernelcache")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    assert kcp.compiles("add_a.cc") == 1 and kcp.compiles("add_b.cc") == 0
    r.stdout.fnmatch_lines(["kc_add_a *built*gw*no cached entry*"])


def test_prebuild_controller_rejects_undeclared_kernels(kcp_shared):
    kcp_shared.ini()
    kcp_shared.pytester.makepyfile(test_dyn=DYNAMIC)
    r = kcp_shared.run("-p", "kernelcache", "--kc-prebuild=controller")
    assert r.ret == 1
    r.assert_outcomes(errors=1)
    assert ("kernel 'kc_add_a' was not prebuilt (warm=controller): declare it in kernelcache_kernels"
            in r.stdout.str())
    # declared: warmed by the controller, the test runs
    r = kcp_shared.run("-p", "kernelcache", "--kc-prebuild=controller", "--kc-kernels=kc_add_a")
    assert r.ret == 0
    r.stdout.fnmatch_lines(["kernelcache: warming 1 kernel(s) in the controller: kc_add_a"])


def test_json_report_per_test_outcomes(kcp_shared):
    kcp_shared.ini()
    kcp_shared.pytester.makepyfile(test_mix='''
        import pytest

        @pytest.mark.kernel("kc_add_a")
        def test_pass(kc_kernel):
            assert kc_kernel.add(1, 2) == 3

        def test_fail():
            assert 1 == 2

        @pytest.mark.skip(reason="not today")
        def test_skip():
            pass

        @pytest.mark.xfail(reason="known")
        def test_xfail():
            assert False

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture broke")

        def test_error(broken):
            pass
    ''')
    report = kcp_shared.path / "out" / "report.json"
    r = kcp_shared.run("-p", "kernelcache", f"--kc-report-json={report}")
    assert r.ret == 1
    data = json.loads(report.read_text())
    assert data["format"] == 1
    assert data["session"]["exitstatus"] == 1
    assert data["summary"] == {"error": 1, "failed": 1, "passed": 1, "skipped": 1, "xfailed": 1}
    tests = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    assert tests["test_pass"]["kernels"] == ["kc_add_a"] and tests["test_pass"]["outcome"] == "passed"
    assert tests["test_fail"]["outcome"] == "failed" and "assert 1 == 2" in tests["test_fail"]["message"]
    assert tests["test_skip"] == {**tests["test_skip"], "outcome": "skipped", "reason": "not today"}
    assert tests["test_xfail"]["outcome"] == "xfailed" and tests["test_xfail"]["reason"] == "known"
    assert tests["test_error"]["outcome"] == "error" and "fixture broke" in tests["test_error"]["message"]
    kernels = {k["name"]: k for k in data["kernels"]}
    assert set(kernels) == {"kc_add_a"}  # only what the tests name is warmed
    assert kernels["kc_add_a"]["status"] in ("hit", "built") and kernels["kc_add_a"]["uses"]
    assert data["session"]["options"]["specs"] == {"value": ["kcspecs:specs"], "source": "ini"}
    assert {"hits", "misses", "builds", "build_seconds"} <= set(data["stats"]["total"])
