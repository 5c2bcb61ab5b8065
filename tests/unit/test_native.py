"""native.py on its own: reading CPU flags, naming an expansion's features as /proc/cpuinfo does."""
from __future__ import annotations

from kernelcache.host import native


def test_cpu_features_from_a_cpuinfo_file(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nflags\t\t: fpu sse4_1 avx512f avx512_vnni sha_ni\nprocessor\t: 1\n")
    assert native.cpu_features(str(f)) == {"fpu", "sse4_1", "avx512f", "avx512_vnni", "sha_ni"}
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve\n")
    assert native.cpu_features(str(arm)) == {"fp", "asimd", "sve"}
    assert native.cpu_features(str(tmp_path / "absent")) == frozenset()


def test_required_features_use_the_cpuinfo_spelling():
    host = frozenset({"sse4_1", "avx512f", "avx512_vnni", "sha_ni", "pclmulqdq", "bmi1", "avx2"})
    gcc = ["-march=x", "-msse4.1", "-mavx512f", "-mavx512vnni", "-msha", "-mpclmul", "-mbmi", "-mno-avx2",
           "-mno-xop", "--param=l1-cache-size=32"]
    assert native.required_features(gcc, host) == ["avx512_vnni", "avx512f", "bmi1", "pclmulqdq", "sha_ni", "sse4_1"]
    clang = ["-target-cpu", "x", "-target-feature", "+avx2", "-target-feature", "-avx512f"]
    assert native.required_features(clang, host) == ["avx2"]


def test_native_flags_are_found_inside_nvcc_host_flags():
    assert native.native_flags(["-O3"], ["-Xcompiler=-march=native", "-mtune=native"]) == [
        "-march=native", "-mtune=native"]
    assert native.native_flags(["-march=x86-64"]) == []


def test_nothing_required_is_never_missing():
    assert native.missing_features(None) == []
    assert native.missing_features({"cpu_features": []}) == []
    assert native.missing_features({"cpu_features": ["kc_no_such_feature"]}) == ["kc_no_such_feature"]
