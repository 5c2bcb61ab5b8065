"""Acceptance 7 and 8: failed builds leave nothing; a disabled build turns a miss into an error."""
from __future__ import annotations

import pytest

import kernelcache as kc
from tests.support import project_spec


def test_syntax_error_raises_build_error_and_retry_after_fix_builds(kc_env, project):
    src = project / "add.cc"
    good = src.read_text()
    src.write_text(good.replace("return a + b", "return a +* b;;; oops"))
    with pytest.raises(kc.BuildError) as ei:
        kc.load(project_spec(project))
    err = ei.value
    assert "error" in err.output and "add.cc" in err.output
    assert "add.cc" in err.command and "-c" in err.command
    assert str(err).count(err.command) == 1, str(err)  # once (ninja's FAILED block echoes it already)
    assert kc_env.entries() == []
    assert list((kc_env.cache / "v1" / "tmp").iterdir()) == []  # private dir removed
    assert kc.stats()["build_failures"] == 1
    src.write_text(good)
    assert kc.load(project_spec(project)).add(2, 2) == 4  # same process, no stale "failed" state


def test_no_build_turns_miss_into_cache_miss_error(kc_env, project, monkeypatch):
    monkeypatch.setenv("KERNELCACHE_NO_BUILD", "1")
    with pytest.raises(kc.CacheMissError) as ei:
        kc.load(project_spec(project))
    assert ei.value.spec_name == "adder" and "adder" in str(ei.value)
    assert "no cached entry" in ei.value.reason
    assert kc_env.compiles() == 0
    monkeypatch.delenv("KERNELCACHE_NO_BUILD")
    kc.load(project_spec(project))
    (project / "include" / "kc_add.h").write_text("#define KC_OFFSET 3\n")
    monkeypatch.setenv("KERNELCACHE_NO_BUILD", "1")
    with pytest.raises(kc.CacheMissError, match="include/kc_add.h changed"):
        kc.load(project_spec(project))


def test_bad_spec_inputs_raise_clear_errors(tmp_path):
    with pytest.raises(kc.SpecError, match="name"):
        kc.KernelSpec(name="bad name", sources=["a.cc"])
    with pytest.raises(kc.SpecError, match="no sources"):
        kc.KernelSpec(name="x", sources=[])
    with pytest.raises(kc.SpecError, match="unsupported source"):
        kc.KernelSpec(name="x", sources=["a.py"])
    with pytest.raises(kc.SpecError, match="missing source"):
        kc.load(kc.KernelSpec(name="x", sources=["nope.cc"], root=tmp_path))
    with pytest.raises(TypeError):
        kc.load("not a spec")


def test_unwritable_cache_dir_is_a_clear_error(kc_env, project, monkeypatch):
    blocker = kc_env.tmp / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("KERNELCACHE_DIR", str(blocker / "cache"))  # ENOTDIR, even for root
    with pytest.raises(kc.KernelCacheError, match="cannot create a build directory.*KERNELCACHE_DIR"):
        kc.load(project_spec(project))


def test_unresolved_symbol_is_a_clear_error_not_a_crash(kc_env, tmp_path):
    """A module calling a function nobody defines links (shared objects may leave symbols open)
    and would die with "symbol lookup error" at its first call; it is refused at load instead."""
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "u.cc").write_text(
        "#include <tvm/ffi/function.h>\nextern int64_t kc_nowhere(int64_t);\n"
        "int64_t call(int64_t a) { return kc_nowhere(a); }\nTVM_FFI_DLL_EXPORT_TYPED_FUNC(call, call);\n")
    code = f"""
import kernelcache as kc
spec = kc.KernelSpec(name="unresolved", sources=["u.cc"], root={str(tmp_path / "u")!r},
                     functions={{"call": "Callable[[int], int]"}})
try:
    kc.load(spec).call(1)
except kc.KernelCacheError as e:
    print("REFUSED", "kc_nowhere" in str(e))
"""
    out = kc_env.run_py(code)
    assert out.stdout.split() == ["REFUSED", "True"], out.stdout + out.stderr
