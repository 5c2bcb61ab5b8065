"""gpu.py: one arch rule, one detection (honouring CUDA_VISIBLE_DEVICES), no CUDA context."""
from __future__ import annotations

import stat

import pytest
from kernelcache.base.errors import ToolchainError
from kernelcache.host import gpu

from kernelcache import reset_process_state
from kernelcache.pytest_plugin import gating


@pytest.mark.parametrize("spelling,norm,tup", [("9.0", "9.0", (9, 0)), ("sm_90", "9.0", (9, 0)), ("90a", "9.0a", (9, 0)),
                                               ("compute_80", "8.0", (8, 0)), (9.0, "9.0", (9, 0)),
                                               ("12.0", "12.0", (12, 0)), ("100", "10.0", (10, 0))])
def test_one_arch_rule(spelling, norm, tup):
    assert gpu.normalise_arch(spelling) == norm and gpu.arch_tuple(spelling) == tup


@pytest.mark.parametrize("bad", ["", "9", "x9.0", "sm_", "9.x"])
def test_bad_arch_is_a_value_error_and_a_toolchain_error(bad):
    with pytest.raises(ValueError):
        gpu.normalise_arch(bad)
    with pytest.raises(ToolchainError):
        gpu.normalise_arch(bad)


def test_arch_lists_and_gencode():
    assert gpu.parse_arch_list("9.0, sm_80;9.0") == ("8.0", "9.0")
    assert gpu.gencode_flags(("9.0",)) == ["-gencode=arch=compute_90,code=sm_90"]
    assert gpu.target_archs("8.0 9.0") == ("8.0", "9.0")


FAKE_SMI = """#!/bin/sh
echo "0, NVIDIA H200, 9.0, 143771, GPU-aaaa"
echo "1, NVIDIA A100, 8.0, 81920, GPU-bbbb"
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """A real executable named nvidia-smi on PATH printing two GPUs (no GPU on CI machines)."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(FAKE_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")
    reset_process_state()
    yield
    reset_process_state()


def test_detection_honours_cuda_visible_devices(fake_smi):
    assert gpu.detect_gpus(cuda_visible_devices=None)["count"] == 2
    only = gpu.detect_gpus(cuda_visible_devices="1")
    assert [g["name"] for g in only["gpus"]] == ["NVIDIA A100"]
    assert [g["index"] for g in gpu.detect_gpus(cuda_visible_devices="GPU-bbbb,0")["gpus"]] == [1, 0]
    none = gpu.detect_gpus(cuda_visible_devices="")
    assert none["count"] == 0 and "CUDA_VISIBLE_DEVICES" in none["note"]
    assert gpu.detect_gpus(cuda_visible_devices="0,7,1")["count"] == 1  # stops at the first invalid entry


def test_target_archs_fall_back_to_visible_gpus(fake_smi, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert gpu.target_archs(None) == ("9.0",)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu.target_archs(None) == ("8.0", "9.0")


def test_no_gpu_no_arch_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    reset_process_state()
    assert gpu.detect_gpus()["note"] == "nvidia-smi not found"
    with pytest.raises(ToolchainError, match="KERNELCACHE_CUDA_ARCH"):
        gpu.target_archs(None)


def test_hung_nvidia_smi_is_bounded(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexec sleep 30\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    reset_process_state()
    out = gpu.detect_gpus(timeout=0.5)
    reset_process_state()
    assert out["count"] == 0 and "timed out" in out["note"]


def test_hardware_stand_ins_and_requirements():
    hw = gating.parse_hardware("2x9.0")
    assert hw["count"] == 2 and gating.requirement_problem(hw, 2, "9.0") is None
    assert "arch too old" in gating.requirement_problem(gating.parse_hardware("8.0"), 1, "9.0")
    assert "found only 1" in gating.requirement_problem(gating.parse_hardware("9.0"), 2)
    assert "no GPU" in gating.requirement_problem(gating.parse_hardware("cpu"), 1)
    with pytest.raises(ValueError):
        gating.parse_hardware("2xbanana")
