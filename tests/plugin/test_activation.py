"""Acceptance 2: autoload on/off, -p no:kernelcache, installed-but-not-asked; the option surface."""
from __future__ import annotations

GPU_TESTS = '''
import os
import pytest

@pytest.mark.gpu(count=8, min_arch="9.0")
def test_needs_gpus():
    pass

@pytest.mark.kernel("kc_add_a")
def test_env_untouched():
    # not asked for: the plugin must not have written its settings into the environment
    assert os.environ.get("KERNELCACHE_NO_BUILD") is None
    assert os.environ["KERNELCACHE_DIR"].endswith("kc-cache")
'''

INI_NOT_ASKED = """[pytest]
kernelcache_no_build = true
kernelcache_dir = elsewhere
kernelcache_kernels = kc_add_a
"""


def test_help_lists_group_options_and_ini_keys(plain):
    r = plain.runpytest_subprocess("--help")
    assert r.ret == 0
    r.stdout.fnmatch_lines([
        "kernelcache: warm JIT kernels once*",
        "*--kc-cache-dir=PATH*",
        "*--kc-prebuild={auto,controller,off}*",
        "*--kc-no-build*",
        "*--kc-rebuild*",
        "*--kc-arch=VALUE*",
        "*--kc-build-only*",
        "*--kc-report-json=PATH*",
        "*--kc-require-gpu*",
        "*--kc-run=NAME*",
    ])
    out = r.stdout.str()
    for key in ("kernelcache_dir", "kernelcache_no_build", "kernelcache_rebuild", "kernelcache_cuda_arch",
                "kernelcache_prebuild", "kernelcache_build_only", "kernelcache_report_json",
                "kernelcache_require_gpu", "kernelcache_kernels", "kernelcache_specs", "kernelcache_enable"):
        assert key in out, key
    for env in ("KERNELCACHE_DIR", "KERNELCACHE_NO_BUILD", "KERNELCACHE_CUDA_ARCH", "KERNELCACHE_PREBUILD"):
        assert env in out, env


def test_installed_but_not_asked_registers_markers_and_does_nothing_else(plain):
    plain.makeini(INI_NOT_ASKED)
    plain.makepyfile(test_gpu=GPU_TESTS)
    r = plain.runpytest_subprocess("--strict-markers", "-rs")
    # markers are registered (strict markers accept them) ...
    assert r.ret == 0, r.stdout.str()
    # ... and nothing else happens: no GPU gating, no warming, no header, no summary, env untouched
    r.assert_outcomes(passed=2)
    out = r.stdout.str()
    assert "kernelcache: GPUs" not in out and "= kernelcache =" not in out and "warming" not in out
    assert not (plain.path / "elsewhere").exists()
    m = plain.runpytest_subprocess("--markers")
    m.stdout.fnmatch_lines(["@pytest.mark.kernel(name, *", "@pytest.mark.gpu(count=1, min_arch=None)*",
                            "@pytest.mark.suite(stage, runner=None)*"])


def test_kc_option_without_the_plugin_is_a_usage_error(plain):
    plain.makepyfile(test_x="def test_x(): pass")
    r = plain.runpytest_subprocess("--kc-no-build")
    assert r.ret == 4
    r.stderr.fnmatch_lines(["*--kc-no-build: the kernelcache plugin is not enabled; add -p kernelcache*"])


def test_asked_for_with_autoload_on(plain, monkeypatch):
    """The same ini, now asked for: settings reach the environment, GPU tests are gated."""
    monkeypatch.delenv("KERNELCACHE_DIR")  # the ini's value applies (ini < env)
    plain.makeini(INI_NOT_ASKED.replace("kernelcache_kernels = kc_add_a\n", ""))
    plain.makepyfile(test_gpu='''
        import os
        import pytest

        @pytest.mark.gpu(count=8, min_arch="9.0")
        def test_needs_gpus():
            pass

        def test_env_written():
            assert os.environ["KERNELCACHE_NO_BUILD"] == "1"
            assert os.environ["KERNELCACHE_DIR"] == os.path.join(os.path.dirname(__file__), "elsewhere")
    ''')
    r = plain.runpytest_subprocess("-p", "kernelcache", "-rs", "--strict-markers")
    r.assert_outcomes(skipped=1, passed=1)
    r.stdout.fnmatch_lines([
        "kernelcache *: cache */elsewhere, arch unset*, warm=auto, no_build=True",
        "kernelcache: GPUs: none (nvidia-smi not found); tvm-ffi *",
        "*= kernelcache =*",
        "SKIPPED * gpu: needs 8 GPUs with arch >= 9.0: no GPU found (nvidia-smi not found)",
    ])


def test_autoload_disabled(plain, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    plain.makepyfile(test_gpu="""
        import pytest
        @pytest.mark.gpu
        def test_gpu(): pass
    """)
    # not loaded at all: the marker is unknown
    r = plain.runpytest_subprocess("--strict-markers")
    assert r.ret == 2 and "'gpu' not found in `markers`" in r.stdout.str()
    # named with -p, it loads through its entry point name and is active
    r = plain.runpytest_subprocess("-p", "kernelcache", "--strict-markers", "-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["kernelcache *: *", "SKIPPED * gpu: needs 1 GPU: no GPU found (nvidia-smi not found)"])


def test_p_no_kernelcache_disables_it(plain):
    plain.makepyfile(test_gpu="""
        import pytest
        @pytest.mark.gpu
        def test_gpu(): pass
    """)
    r = plain.runpytest_subprocess("-p", "no:kernelcache", "--strict-markers")
    assert r.ret == 2 and "'gpu' not found in `markers`" in r.stdout.str()
    r = plain.runpytest_subprocess("-p", "no:kernelcache")
    r.assert_outcomes(passed=1)
    assert "kernelcache: GPUs" not in r.stdout.str() and "= kernelcache =" not in r.stdout.str()


def test_enabled_by_ini_env_and_pytest_addopts(plain, monkeypatch):
    plain.makepyfile(test_gpu="""
        import pytest
        @pytest.mark.gpu
        def test_gpu(): pass
    """)
    plain.makeini("[pytest]\nkernelcache_enable = true\n")
    r = plain.runpytest_subprocess("-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["kernelcache *: *"])

    plain.makeini("[pytest]\n")
    monkeypatch.setenv("KERNELCACHE_PLUGIN", "1")
    r = plain.runpytest_subprocess("-rs")
    r.assert_outcomes(skipped=1)
    monkeypatch.delenv("KERNELCACHE_PLUGIN")

    monkeypatch.setenv("PYTEST_ADDOPTS", "-p kernelcache")
    r = plain.runpytest_subprocess("-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["kernelcache *: *"])
