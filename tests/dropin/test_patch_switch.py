"""The patch switch family (kernelcache.patch): one registry, one variable, one pytest option,
one runner, and a ``.pth`` hook so the variable works in a process that never imports kernelcache."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from kernelcache.base.settings import Settings, patch_requested

from kernelcache import patch
from tests.support import build_tree_copy

from .conftest import tvm_env

PROBE = """
import json, sys
before = "kernelcache" in sys.modules
import tvm_ffi.cpp
print(json.dumps({"kernelcache_at_start": before,
                  "patched": bool(getattr(tvm_ffi.cpp.load_inline, "__kernelcache_dropin__", False))}))
"""


@pytest.mark.parametrize("env, expected", [
    ({"KERNELCACHE_PATCH": "tvm_ffi"}, ("tvm_ffi",)),
    ({"KERNELCACHE_PATCH": "torch, tvm-ffi"}, ("tvm_ffi", "torch")),
    ({"KERNELCACHE_PATCH": "all"}, ("tvm_ffi", "torch", "flashinfer", "sglang")),
    ({"KERNELCACHE_PATCH": "sglang"}, ("sglang",)),
    ({"KERNELCACHE_PATCH": "flashinfer"}, ("flashinfer",)),
    ({"KERNELCACHE_PATCH_TVM_FFI": "1"}, ("tvm_ffi",)),  # the old name still works
    ({"KERNELCACHE_PATCH": "off"}, ()),
    ({}, ()),
])
def test_one_variable_names_the_drop_ins(env, expected) -> None:
    assert Settings.from_env(env).patch == expected == patch_requested(env)
    assert Settings.from_env(env).patch_tvm_ffi == ("tvm_ffi" in expected)


def test_a_typo_is_an_error_naming_the_known_drop_ins_but_never_breaks_start_up() -> None:
    with pytest.raises(ValueError, match="unknown drop-in 'tvm'.*tvm_ffi, torch"):
        Settings.from_env({"KERNELCACHE_PATCH": "tvm"})
    assert patch_requested({"KERNELCACHE_PATCH": "tvm"}) == ()


def test_settings_round_trip_through_the_environment_export() -> None:
    s = Settings.from_env({}, patch="flashinfer,torch,tvm_ffi")
    assert Settings.from_env(s.to_env()).patch == ("tvm_ffi", "torch", "flashinfer")


def _py(code: str, env: dict, *args: str, python: str = sys.executable, cwd: Path | None = None
        ) -> subprocess.CompletedProcess:
    return subprocess.run([python, *(args or ("-c", code))], env=env, capture_output=True, text=True, timeout=300,
                          cwd=str(cwd) if cwd else None)


def test_importing_kernelcache_arms_the_hook_and_installs_only_when_the_target_is_imported(dropin_env) -> None:
    code = ("import sys, kernelcache; assert 'tvm_ffi' not in sys.modules, 'armed eagerly'\n" + PROBE)
    out = _py(code, tvm_env(dropin_env, KERNELCACHE_PATCH="tvm_ffi"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["patched"] is True
    off = _py("import kernelcache\n" + PROBE, tvm_env(dropin_env))
    assert json.loads(off.stdout.splitlines()[-1])["patched"] is False


def test_runner_and_pytest_option_refuse_unknown_names(dropin_env, tmp_path) -> None:
    (tmp_path / "app.py").write_text("print('ran')\n")
    env = tvm_env(dropin_env)
    r = _py("", env, "-m", "kernelcache.patch", "--jit", "tvm", str(tmp_path / "app.py"))
    assert r.returncode == 2 and "unknown drop-in 'tvm'" in r.stderr and "ran" not in r.stdout
    ok = _py("", env, "-m", "kernelcache.patch", "--jit=tvm_ffi", str(tmp_path / "app.py"))
    assert ok.returncode == 0 and ok.stdout.strip() == "ran"
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "kernelcache", "--kc-patch=tvm", "-p", "no:xdist",
                        "-p", "no:cacheprovider", str(tmp_path / "test_x.py")], env=env, capture_output=True,
                       text=True, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 4 and "unknown drop-in 'tvm'" in p.stderr


def test_a_drop_in_without_its_adapter_is_named_when_asked_for_and_skipped_by_all(monkeypatch) -> None:
    monkeypatch.setitem(patch.REGISTRY, "torch", ("kc_no_such_target", "kernelcache.kc_no_such_adapter"))
    with pytest.raises(patch.PatchError, match="drop-in 'torch'"):
        patch.arm("torch")
    assert patch.arm("all", strict=False) == ("tvm_ffi", "flashinfer", "sglang")
    patch.disarm("all")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A real wheel of this tree (built once per module), from a copy (``build_tree_copy``)."""
    out = tmp_path_factory.mktemp("wheel")
    src = build_tree_copy(tmp_path_factory.mktemp("wheel-src"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(src)], check=True, capture_output=True, timeout=600)
    (whl,) = out.glob("kernelcache-*.whl")
    return whl


def test_pth_hook_of_an_installed_wheel_arms_the_variable_without_any_kernelcache_import(wheel, tmp_path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=300)
    py = str(venv / "bin" / "python")
    site = Path(subprocess.check_output([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    subprocess.run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--ignore-installed",
                    str(wheel)], check=True, capture_output=True, timeout=600)
    # this interpreter's packages (tvm_ffi, ...) after the venv's own: path lines only, no .pth of theirs runs
    (site / "zz_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    assert (site / "kernelcache-patch.pth").is_file()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_PATCH", "PYTHONPATH"))}
    run = dict(python=py, cwd=tmp_path)  # not this checkout's directory: the installed copy only
    on = json.loads(_py(PROBE, {**env, "KERNELCACHE_PATCH": "tvm_ffi"}, **run).stdout.splitlines()[-1])
    assert on == {"kernelcache_at_start": True, "patched": True}
    old = json.loads(_py(PROBE, {**env, "KERNELCACHE_PATCH_TVM_FFI": "1"}, **run).stdout.splitlines()[-1])
    assert old["patched"] is True
    off = json.loads(_py(PROBE, env, **run).stdout.splitlines()[-1])
    assert off == {"kernelcache_at_start": False, "patched": False}  # unset: kernelcache is not even imported
    where = _py("import kernelcache; print(kernelcache.__file__)", env, **run).stdout.strip()
    assert where.startswith(str(site))  # the wheel's copy, not this tree
