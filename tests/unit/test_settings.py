"""Settings: the one reader of KERNELCACHE_*; explicit, frozen, exportable."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from kernelcache.base.settings import Settings, kc_environ

from tests.support import HANG_S


def test_defaults_without_environment(tmp_path):
    s = Settings.from_env({"XDG_CACHE_HOME": str(tmp_path)})
    assert s.cache_dir == tmp_path / "kernelcache"
    assert not s.no_build and not s.rebuild and s.prebuilt == ()
    assert s.remote.url is None and s.remote.mode == "off" and not s.remote_enabled
    assert s.lock_timeout == 1800.0


def test_environment_values_are_parsed(tmp_path):
    env = {"KERNELCACHE_DIR": str(tmp_path / "c"), "KERNELCACHE_NO_BUILD": "yes", "KERNELCACHE_LOCK_TIMEOUT": "2.5",
           "KERNELCACHE_PREBUILT": f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}", "MAX_JOBS": "3",
           "TVM_FFI_CUDA_ARCH_LIST": "8.0 9.0", "KERNELCACHE_REMOTE": "file:///srv/kc"}
    s = Settings.from_env(env)
    assert s.cache_dir == tmp_path / "c" and s.no_build and s.lock_timeout == 2.5 and s.max_jobs == 3
    assert s.prebuilt == (tmp_path / "a", tmp_path / "b")
    assert s.cuda_arch == "8.0 9.0"  # TVM_FFI_CUDA_ARCH_LIST is the fallback
    assert s.remote.url == "file:///srv/kc" and s.remote.mode == "read"  # read is the default with a remote
    assert Settings.from_env({**env, "KERNELCACHE_CUDA_ARCH": "9.0"}).cuda_arch == "9.0"


@pytest.mark.parametrize("var,value", [("KERNELCACHE_NO_BUILD", "maybe"), ("KERNELCACHE_LOCK_TIMEOUT", "soon"),
                                       ("KERNELCACHE_REMOTE_MODE", "write")])
def test_bad_values_raise_naming_the_variable(var, value):
    env = {var: value, "KERNELCACHE_REMOTE": "file:///x"}
    with pytest.raises(ValueError, match=var):
        Settings.from_env(env)


def test_frozen_and_replace(tmp_path):
    s = Settings.from_env({"KERNELCACHE_DIR": str(tmp_path)})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.no_build = True  # type: ignore[misc]
    t = s.replace(no_build=True)
    assert t.no_build and not s.no_build and t.cache_dir == s.cache_dir


def test_to_env_round_trips(tmp_path):
    s = Settings.from_env({"KERNELCACHE_DIR": str(tmp_path), "KERNELCACHE_NO_BUILD": "1", "KERNELCACHE_CUDA_ARCH": "9.0",
                           "KERNELCACHE_REMOTE": "s3://b/p", "KERNELCACHE_REMOTE_MODE": "readwrite",
                           "KERNELCACHE_PREBUILT": str(tmp_path / "r"), "KERNELCACHE_CACHE_BUSTER": "x"})
    assert Settings.from_env(s.to_env()) == s


def test_deprecated_name_still_works_with_a_warning():
    with pytest.warns(DeprecationWarning, match="KERNELCACHE_PREBUILD is deprecated; use KERNELCACHE_WARM"):
        env = kc_environ({"KERNELCACHE_PREBUILD": "off"})
    assert env == {"KERNELCACHE_WARM": "off"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kc_environ({"KERNELCACHE_WARM": "auto", "PATH": "/bin"}) == {"KERNELCACHE_WARM": "auto"}


def test_load_uses_explicit_settings_not_the_environment(tmp_path, project):
    """A process whose environment says NO_BUILD still builds when handed settings that allow it."""
    code = f"""
from pathlib import Path
import kernelcache as kc
from tests.support import project_spec
s = kc.Settings.from_env().replace(no_build=False, cache_dir=Path({str(tmp_path / 'explicit')!r}))
print(kc.load(project_spec(Path({str(project)!r})), settings=s).add(1, 2))
try:
    kc.load(project_spec(Path({str(project)!r})))
except kc.CacheMissError:
    print("miss")
"""
    env = {**os.environ, "KERNELCACHE_NO_BUILD": "1", "KERNELCACHE_DIR": str(tmp_path / "env"),
           "KERNELCACHE_LOG": "0", "PYTHONPATH": str(Path(__file__).parents[2])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=HANG_S)
    assert out.stdout.split() == ["3", "miss"], out.stderr
    assert (tmp_path / "explicit" / "v1" / "entries" / "adder").is_dir()
    assert not (tmp_path / "env" / "v1" / "entries").exists()
