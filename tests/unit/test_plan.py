"""plan.py + key.py: what is keyed is exactly what runs; settings, not the environment, steer it."""
from __future__ import annotations

import pytest
from kernelcache.host import toolchain

import kernelcache as kc
from kernelcache import kinds
from kernelcache.key import level1
from tests.support import project_spec


def _settings(tmp_path, **kw):
    return kc.Settings.from_env({"KERNELCACHE_DIR": str(tmp_path / "c")}, **kw)


def test_keyed_commands_are_the_run_commands(tmp_path, project):
    s = _settings(tmp_path)
    p = kinds.make_plan(project_spec(project), s)
    bd = "/__kernelcache_build__"
    run = [[p.anchored(a, bd) for a in p.compile_argv(step, bd)] for step in p.sources]
    # everything that runs is keyed but -pipe (g++ here), which changes no byte of the output
    assert p.key_commands()["compile"] == [[a for a in argv if a != "-pipe"] for argv in run]
    assert all(argv.count("-pipe") == 1 for argv in run)
    argv = p.compile_argv(p.sources[0], "/x")
    assert argv[:4] == [p.cxx, "-MD", "-MF", "/x/" + p.sources[0].obj + ".d"]  # -MD keeps -isystem headers
    assert "-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1" in argv


def test_pipe_is_given_to_gcc_only_and_builds_the_same_object(tmp_path, project):
    """-pipe is left out of keys because the object is the same bytes: checked by compiling."""
    import subprocess

    p = kinds.make_plan(project_spec(project), _settings(tmp_path))
    objs = []
    for i, drop in enumerate((False, True)):
        d = tmp_path / f"b{i}"
        d.mkdir()
        argv = [a for a in p.compile_argv(p.sources[0], str(d)) if not (drop and a == "-pipe")]
        subprocess.run(argv, check=True, capture_output=True, timeout=600)
        objs.append((d / p.sources[0].obj).read_bytes())
    assert objs[0] == objs[1]
    p.tools["cxx"] = {**p.tools["cxx"], "version": "clang version 18.1.8"}
    assert "-pipe" not in p.compile_argv(p.sources[0], "/x")


def test_checkout_path_is_not_in_the_key(tmp_path):
    from tests.support import make_project

    s = _settings(tmp_path)
    a = make_project(tmp_path / "a")
    b = make_project(tmp_path / "elsewhere" / "b")
    ka = level1.level1(kinds.make_plan(project_spec(a), s), s)
    kb = level1.level1(kinds.make_plan(project_spec(b), s), s)
    assert ka.key == kb.key and str(tmp_path) not in str(ka.inputs["commands"])


def test_cuda_arch_comes_from_settings(tmp_path):
    try:
        toolchain.find_cuda_home()
    except kc.ToolchainError:
        pytest.skip("no CUDA toolkit")
    (tmp_path / "k.cu").write_text("__global__ void k() {}\n")
    spec = kc.KernelSpec(name="cu", sources=["k.cu"], root=tmp_path)
    p80 = kinds.make_plan(spec, _settings(tmp_path, cuda_arch="8.0"))
    p90 = kinds.make_plan(spec, _settings(tmp_path, cuda_arch="sm_90"))
    assert "-gencode=arch=compute_80,code=sm_80" in p80.cuda_flags and p90.archs == ("9.0",)
    s80, s90 = _settings(tmp_path, cuda_arch="8.0"), _settings(tmp_path, cuda_arch="9.0")
    assert level1.level1(p80, s80).key != level1.level1(p90, s90).key


def test_source_key_needs_no_toolchain_and_tracks_sources(tmp_path, project, monkeypatch):
    s = _settings(tmp_path)
    spec = project_spec(project)
    k1 = kinds.source_key(spec, (), "0.1.15", s)
    monkeypatch.setenv("CXX", "/bin/false")  # no compiler: still computable
    assert kinds.source_key(spec, (), "0.1.15", s) == k1
    assert kinds.source_key(spec, (), "0.1.99", s) == k1  # same ABI series
    assert kinds.source_key(spec, (), "0.2.0", s) != k1
    (project / "add.cc").write_text((project / "add.cc").read_text() + "// edit\n")
    assert kinds.source_key(spec, (), "0.1.15", s) != k1
    assert kinds.source_key(spec, (), "0.1.15", s.replace(cache_buster="x")) != kinds.source_key(spec, (), "0.1.15", s)


def test_missing_compiler_is_a_toolchain_error(tmp_path, project, monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    with pytest.raises(kc.ToolchainError, match="no-such-compiler-xyz"):
        kinds.make_plan(project_spec(project), _settings(tmp_path))
