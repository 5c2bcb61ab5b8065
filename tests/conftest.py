"""Shared fixtures: an isolated cache, a counting compiler wrapper, tiny tvm-ffi kernels.

Faults are provoked for real: the compiler wrapper really runs g++ (and can be slowed down so a
test can SIGKILL a build mid-compile or mid-link), other processes are real subprocesses.
Helpers (``make_project``, ``project_spec``, ``spec_code`` ...) live in ``tests/support.py``.
"""
from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import WRAPPER, KcEnv, make_project, project_spec

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    # The plugin registers these too; repeated here so `-p no:kernelcache --strict-markers` works.
    for line in ("kernel(*names): shipped kernels a test needs",
                 "gpu(count=1, min_arch=None): needs CUDA GPUs",
                 "suite(stage, runner): CI suite and runner label"):
        config.addinivalue_line("markers", line)


@pytest.fixture
def kc_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KcEnv:
    """An isolated cache + lock dir and a counting CXX wrapper, applied to this process too."""
    cxx = tmp_path / "bin" / "cxx-wrapper"
    cxx.parent.mkdir()
    cxx.write_text(WRAPPER)
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    env = KcEnv(tmp=tmp_path, cache=tmp_path / "cache", locks=tmp_path / "locks",
                count_log=tmp_path / "compiles.log", cxx=cxx)
    for k, v in env.env().items():
        if k.startswith(("KERNELCACHE_", "KC_")) or k == "CXX":
            monkeypatch.setenv(k, v)
    for k in ("KERNELCACHE_NO_BUILD", "KERNELCACHE_REBUILD", "KERNELCACHE_PREBUILT", "CPATH", "CPLUS_INCLUDE_PATH",
              "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"):
        monkeypatch.delenv(k, raising=False)
    import kernelcache

    kernelcache.reset_process_state()  # counters, memos and loaded modules of earlier tests
    return env


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "proj")


@dataclass(frozen=True)
class BuiltKernel:
    """A kernel built once: its spec, the settings of its private cache, its entry directory."""

    spec: Any
    settings: Any
    entry_dir: Path


@pytest.fixture(scope="session")
def built_adder(tmp_path_factory: pytest.TempPathFactory) -> BuiltKernel:
    """The tiny adder built once per session (per xdist worker) in a cache of its own.

    For tests that only read an entry (validate, admit, the CLI's listings). A test that damages,
    rebuilds or counts compiles builds its own with ``kc_env`` + ``project``. The settings come
    from an explicit environment, so the test process's own KERNELCACHE_* never leak in.
    """
    from kernelcache.base.layout import Layout

    import kernelcache as kc

    base = tmp_path_factory.mktemp("built_adder")
    settings = kc.Settings.from_env({"KERNELCACHE_DIR": str(base / "cache"),
                                     "KERNELCACHE_LOCK_DIR": str(base / "locks"), "KERNELCACHE_LOG": "0"})
    spec = project_spec(make_project(base / "proj"))
    kc.load(spec, settings=settings)
    entries = sorted(p for p in Layout(settings.cache_dir).kernel_dir("adder").glob("*/*") if p.is_dir())
    assert len(entries) == 1, entries
    return BuiltKernel(spec, settings, entries[0])
