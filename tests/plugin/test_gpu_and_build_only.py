"""Acceptance 4: GPU markers skip with the specific reason here; --kc-require-gpu fails the run;
--kc-build-only compiles the CUDA kernel on this CPU machine and exits 0."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

GPU_TESTS = '''
import pytest

@pytest.mark.gpu
def test_one_gpu():
    pass

@pytest.mark.gpu(count=2)
def test_two_gpus():
    pass

@pytest.mark.gpu(min_arch="9.0")
def test_hopper():
    pass

def test_cpu():
    pass
'''

CUDA_HOME = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")
needs_nvcc = pytest.mark.skipif(not (CUDA_HOME / "bin" / "nvcc").exists(),
                                reason=f"no nvcc under {CUDA_HOME} (set CUDA_HOME)")


def _skip_reasons(r: pytest.RunResult) -> dict[str, str]:
    out = {}
    for line in r.stdout.lines:
        if line.startswith("SKIPPED"):
            where, reason = line.split(": ", 1)
            out[where.split()[-1]] = reason
    return out


def test_no_gpu_here_skips_with_specific_reason(plain):
    plain.makepyfile(test_g=GPU_TESTS)
    r = plain.runpytest_subprocess("-p", "kernelcache", "-rs")
    assert r.ret == 0
    r.assert_outcomes(passed=1, skipped=3)
    reasons = set(_skip_reasons(r).values())
    assert reasons == {
        "gpu: needs 1 GPU: no GPU found (nvidia-smi not found)",
        "gpu: needs 2 GPUs: no GPU found (nvidia-smi not found)",
        "gpu: needs 1 GPU with arch >= 9.0: no GPU found (nvidia-smi not found)",
    }


def test_too_few_and_too_old_from_a_real_nvidia_smi_listing(plain, smi, monkeypatch):
    # An nvidia-smi that lists one A100 (sm_80): the probe runs for real, the facts are the listing's.
    smi(["0, NVIDIA A100-SXM4-80GB, 8.0, 81920, GPU-aaaa"])
    plain.makepyfile(test_g=GPU_TESTS)
    r = plain.runpytest_subprocess("-p", "kernelcache", "-rs")
    r.assert_outcomes(passed=2, skipped=2)
    assert sorted(_skip_reasons(r).values()) == [
        "gpu: needs 1 GPU with arch >= 9.0: GPU arch too old (found 8.0)",
        "gpu: needs 2 GPUs: found only 1",
    ]
    r.stdout.fnmatch_lines(["kernelcache: GPUs: 1x NVIDIA A100-SXM4-80GB (arch 8.0)*"])
    # CUDA_VISIBLE_DEVICES is honoured (no CUDA context needed to know that)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    r = plain.runpytest_subprocess("-p", "kernelcache", "-rs")
    r.assert_outcomes(passed=1, skipped=3)
    assert "gpu: needs 1 GPU: no GPU found (CUDA_VISIBLE_DEVICES hides every GPU)" in _skip_reasons(r).values()


def test_hung_nvidia_smi_is_bounded(plain, smi, monkeypatch):
    smi(["0, NVIDIA H200, 9.0, 143771, GPU-bbbb"], sleep=30)
    monkeypatch.setenv("KERNELCACHE_GPU_PROBE_TIMEOUT", "1")
    plain.makepyfile(test_g=GPU_TESTS)
    r = plain.runpytest_subprocess("-p", "kernelcache", "-rs", timeout=60)
    r.assert_outcomes(passed=1, skipped=3)
    assert "gpu: needs 1 GPU: no GPU found (nvidia-smi timed out after 1s)" in _skip_reasons(r).values()


def test_detection_runs_once_and_workers_share_it(plain, smi):
    """nvidia-smi is consulted once (controller); every xdist worker gates with that answer."""
    p = smi(["0, NVIDIA H200, 9.0, 143771, GPU-cccc"])
    log = plain.path / "smi-calls.log"
    p.write_text(p.read_text().replace("#!/bin/sh\n", f"#!/bin/sh\necho called >> {log}\n"))
    plain.makepyfile(test_g=GPU_TESTS)
    r = plain.runpytest_subprocess("-p", "xdist", "-n", "2", "-p", "kernelcache", "-rs")
    r.assert_outcomes(passed=3, skipped=1)
    assert log.read_text().count("called") == 1
    assert "gpu: needs 2 GPUs: found only 1" in r.stdout.str()


def test_require_gpu_fails_the_run(plain):
    plain.makepyfile(test_g=GPU_TESTS)
    r = plain.runpytest_subprocess("-p", "kernelcache", "--kc-require-gpu")
    assert r.ret == 1
    r.assert_outcomes(passed=1, errors=3)
    r.stdout.fnmatch_lines([
        "*kernelcache --kc-require-gpu: gpu: needs 2 GPUs: no GPU found (nvidia-smi not found)*",
        "kernelcache: FAILED: --kc-require-gpu: no GPU detected (nvidia-smi not found)",
    ])
    # Even with no gpu-marked test selected, a GPU runner without a GPU fails.
    r = plain.runpytest_subprocess("-p", "kernelcache", "--kc-require-gpu", "-k", "test_cpu")
    assert r.ret == 1
    r.assert_outcomes(passed=1)


def test_require_gpu_fails_when_every_gpu_test_skipped(plain, smi):
    smi(["0, NVIDIA A100, 8.0, 81920, GPU-dddd"])
    plain.makepyfile(test_g='''
        import pytest

        @pytest.mark.gpu
        def test_skips_itself():
            pytest.skip("kernel not supported on this GPU")
    ''')
    r = plain.runpytest_subprocess("-p", "kernelcache", "--kc-require-gpu")
    assert r.ret == 1
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["kernelcache: FAILED: --kc-require-gpu: all 1 gpu-marked test(s) were skipped"])


@needs_nvcc
def test_build_only_compiles_cuda_kernel_without_gpu_and_exits_0(kcp, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(CUDA_HOME))
    kcp.pytester.makeini("[pytest]\nkernelcache_specs = kcspecs:cuda_specs\n")
    kcp.pytester.makepyfile(test_never_runs="def test_fail(): assert False, 'tests must not run'")
    report = kcp.path / "build.json"
    r = kcp.run("-p", "kernelcache", "--kc-build-only", "--kc-arch=9.0", f"--kc-report-json={report}")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    out = r.stdout.str()
    assert "tests must not run" not in out
    r.stdout.fnmatch_lines(["kc_scale_cu *built*controller*", "*--kc-build-only: 1 of 1 kernel(s) ready (1 built)*"])
    _ends_with_our_line_only(r, "kernelcache --kc-build-only: 1 of 1 kernel(s) ready (1 built)")
    data = json.loads(report.read_text())
    k = data["kernels"][0]
    assert k["status"] == "built" and data["session"]["build_only"] is True and data["tests"] == []
    so = Path(k["entry_path"]) / "kc_scale_cu.so"
    assert so.exists() and b"sm_90" in so.read_bytes()  # device code for the requested arch
    # second time: already there
    r = kcp.run("-p", "kernelcache", "--kc-build-only", "--kc-arch=9.0")
    assert r.ret == 0
    r.stdout.fnmatch_lines(["kc_scale_cu *hit*"])


def test_build_only_fails_when_a_kernel_fails(kcp):
    kcp.pytester.makeini("[pytest]\nkernelcache_specs = kcspecs:broken_specs\n")
    r = kcp.run("-p", "kernelcache", "--kc-build-only")
    assert r.ret == 1
    r.stdout.fnmatch_lines(["kc_broken *failed*BuildError*", "*0 of 1 kernel(s) ready (1 failed)*"])
    _ends_with_our_line_only(r, "kernelcache --kc-build-only: 0 of 1 kernel(s) ready (1 failed)")


def test_build_only_under_xdist_builds_in_the_controller_and_starts_no_worker(kcp):
    """``-n 2`` in addopts is common: build-only must not spawn workers that collect every test
    file (a test module that fails to import would fail the build job), and ends as without xdist."""
    kcp.pytester.makeini("[pytest]\nkernelcache_specs = kcspecs:broken_specs\n")
    kcp.pytester.makepyfile(test_unimportable="raise ImportError('collected by a worker')")
    r = kcp.run("-p", "xdist", "-n", "2", "-p", "kernelcache", "--kc-build-only")
    assert r.ret == 1, r.stdout.str() + r.stderr.str()
    out = r.stdout.str() + r.stderr.str()
    # xdist's own words when it starts workers ("created: 2/2 workers", "[gw0] ..."); a bare "gw0"
    # is no sign: this test's own directory is named after the outer run's worker
    assert "collected by a worker" not in out and "[gw" not in out and "workers" not in out, out
    r.stdout.fnmatch_lines(["kc_broken *failed*BuildError*"])
    _ends_with_our_line_only(r, "kernelcache --kc-build-only: 0 of 1 kernel(s) ready (1 failed)")


def _ends_with_our_line_only(r: pytest.RunResult, line: str) -> None:
    """The session ends on kernelcache's own line: no pytest internals (``_pytest.outcomes.Exit``,
    ``Exit:``, the ``!!!`` interruption banner) and no second copy of the line."""
    out, err = r.stdout.str(), r.stderr.str()
    for internal in ("_pytest.outcomes", "Exit:", "!!!!", "Interrupted", "INTERNALERROR"):
        assert internal not in out + err, out + err
    assert (out + err).count(line) == 1, out + err


def test_build_only_without_kernels_is_a_usage_error(plain):
    r = plain.runpytest_subprocess("-p", "kernelcache", "--kc-build-only")
    assert r.ret == 4
    assert "no kernels declared" in r.stderr.str()


def _shipped_cuda_spec_problem() -> str | None:
    try:
        from kernelcache.kernels import shipped_specs

        spec = shipped_specs(["tree_speculative_sampling"])["tree_speculative_sampling"]
    except Exception as e:  # noqa: BLE001
        return f"shipped tree_speculative_sampling spec unavailable: {type(e).__name__}: {e}"
    if not (CUDA_HOME / "bin" / "nvcc").exists():
        return f"no nvcc under {CUDA_HOME}"
    missing = [d for d in spec.system_include_dirs if not Path(d).is_dir()]
    if missing:
        return f"headers missing: {missing}"
    return None


@pytest.mark.skipif(_shipped_cuda_spec_problem() is not None, reason=str(_shipped_cuda_spec_problem()))
def test_build_only_shipped_cuda_kernel(plain, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(CUDA_HOME))
    r = plain.runpytest_subprocess("-p", "kernelcache", "--kc-build-only", "--kc-arch=9.0",
                                   "--kc-kernels=tree_speculative_sampling", timeout=580)
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    r.stdout.fnmatch_lines(["tree_speculative_sampling *built*controller*"])


def test_gpu_test_skips_even_when_its_cuda_kernel_cannot_build_here(kcp):
    """No arch, no GPU: the CUDA kernel is not built (status "skipped" with the reason), its
    GPU-only test skips, the CPU run passes, also when the kernel is declared explicitly.
    --kc-build-only asked for the build, so there the same situation fails the run."""
    kcp.pytester.makeini("[pytest]\nkernelcache_specs = kcspecs:cuda_specs\n")
    kcp.pytester.makepyfile(test_cu='''
        import pytest

        @pytest.mark.gpu(min_arch="9.0")
        @pytest.mark.kernel("kc_scale_cu")
        def test_on_gpu(kc_kernel):
            assert kc_kernel.twice(2) == 4

        @pytest.mark.kernel("kc_scale_cu")
        def test_needs_kernel_but_not_gpu(kc_kernel):
            assert kc_kernel.twice(2) == 4

        def test_cpu():
            pass
    ''')
    r = kcp.run("-p", "kernelcache", "-rs")
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(passed=1, skipped=2)
    r.stdout.fnmatch_lines(["kc_scale_cu *skipped*controller*not built here*no CUDA target arch*",
                            "*kernel 'kc_scale_cu' not built here*"])
    assert "kernelcache: FAILED" not in r.stdout.str()
    r = kcp.run("-p", "kernelcache", "--kc-kernels=kc_scale_cu")
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(passed=1, skipped=2)
    r = kcp.run("-p", "kernelcache", "--kc-build-only")
    assert r.ret == 1
    r.stdout.fnmatch_lines(["*kc_scale_cu *failed*ToolchainError*"])
