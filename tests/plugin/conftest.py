"""Fixtures for the pytest plugin's tests: pytester projects with tiny tvm-ffi kernels.

Every plugin behaviour is exercised for real: pytest runs in subprocesses (and real xdist
workers), kernels are compiled by g++ through a counting wrapper, GPU facts come from real
``nvidia-smi`` executables on PATH (absent, or small stand-in scripts that print what a GPU
machine prints).
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    # `pytest_plugins = ["pytester"]` is only allowed in the top-level conftest; when the suite
    # runs from the repo root this conftest is not top-level, so register pytester here.
    if not config.pluginmanager.hasplugin("pytester"):
        config.pluginmanager.import_plugin("pytester")
        for name, default in (("runpytest", "inprocess"), ("lsof", False)):
            if not hasattr(config.option, name):
                setattr(config.option, name, default)


# Counting compiler wrapper: --version passes through uncounted; every compile (-c) is logged
# with its argv, so a test can count compiles of one kernel's own source file.
WRAPPER = """#!/bin/sh
case " $* " in
  *" -c "*) echo "$$ $*" >> "{log}" ;;
esac
exec g++ "$@"
"""

ADD_SRC = """\
#include <tvm/ffi/function.h>
#include <cstdint>
int64_t {fn}(int64_t a, int64_t b) {{ return a {op} b; }}
TVM_FFI_DLL_EXPORT_TYPED_FUNC({fn}, {fn});
"""

CU_SRC = """\
#include <tvm/ffi/function.h>
#include <cstdint>
__global__ void kc_scale_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}
int64_t twice(int64_t a) { return 2 * a; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(twice, twice);
"""

SPECS_PY = """\
from pathlib import Path
import kernelcache as kc

HERE = Path(__file__).resolve().parent


def specs():
    return [
        kc.KernelSpec(name="kc_add_a", sources=["kernels/add_a.cc"], root=HERE,
                      functions={"add": "Callable[[int, int], int]"}),
        kc.KernelSpec(name="kc_add_b", sources=["kernels/add_b.cc"], root=HERE,
                      functions={"sub": "Callable[[int, int], int]"}),
    ]


def cuda_specs():
    return kc.KernelSpec(name="kc_scale_cu", sources=["kernels/scale.cu"], root=HERE,
                         functions={"twice": "Callable[[int], int]"})


def broken_specs():
    return {"kc_broken": kc.KernelSpec(name="kc_broken", sources=["kernels/broken.cc"], root=HERE,
                                       functions={"f": "Callable[[int], int]"})}
"""

# Besides every KERNELCACHE_* variable (an outer `pytest -p kernelcache` exports its settings):
OTHER_ENV_VARS = (
    "TVM_FFI_CUDA_ARCH_LIST", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
    "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "CUDA_VISIBLE_DEVICES",
    "CXX", "GITHUB_STEP_SUMMARY",
)


@dataclass
class KcProject:
    """A pytester project with two tiny C++ kernels declared through ``kernelcache_specs``."""

    pytester: pytest.Pytester
    cache: Path
    compile_log: Path

    @property
    def path(self) -> Path:
        return self.pytester.path

    def compiles(self, source: str) -> int:
        """Compiler runs whose argv names ``source`` (a kernel's own source file)."""
        try:
            return sum(1 for line in self.compile_log.read_text().splitlines() if source in line)
        except FileNotFoundError:
            return 0

    def ini(self, *lines: str) -> None:
        body = "\n".join(["[pytest]", "kernelcache_specs = kcspecs:specs", *lines])
        self.pytester.makeini(body)

    def run(self, *args: str, timeout: float = 900) -> pytest.RunResult:  # only stops a hung run
        return self.pytester.runpytest_subprocess(*args, timeout=timeout)


def _isolate_env(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    for k in [k for k in os.environ if k.startswith("KERNELCACHE_")] + list(OTHER_ENV_VARS):
        monkeypatch.delenv(k, raising=False)
    # No GPU on PATH unless a test puts a stand-in nvidia-smi there: the suite must behave the
    # same on this CPU machine and on a GPU runner.
    bin_dir = tmp / "nogpu-bin"
    bin_dir.mkdir(exist_ok=True)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not os.path.exists(os.path.join(p, "nvidia-smi"))]
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), *path]))


@pytest.fixture
def kcp(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path_factory) -> KcProject:
    """A fresh project with a cold private cache and the counting CXX wrapper."""
    _isolate_env(monkeypatch, pytester.path)
    log = pytester.path / "compiles.log"
    wrapper = pytester.path / "bin" / "cxx"
    wrapper.parent.mkdir()
    wrapper.write_text(WRAPPER.format(log=log))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CXX", str(wrapper))
    cache = pytester.path / "kc-cache"
    monkeypatch.setenv("KERNELCACHE_DIR", str(cache))
    monkeypatch.setenv("KERNELCACHE_LOCK_DIR", str(pytester.path / "kc-locks"))
    _write_kernels(pytester)
    return KcProject(pytester, cache, log)


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One cache dir for tests that only need the kernels to exist (built by the first user)."""
    return tmp_path_factory.mktemp("kc-shared-cache")


@pytest.fixture
def kcp_shared(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, shared_cache: Path) -> KcProject:
    """Like ``kcp`` but with the default compiler and a cache shared across tests (fast)."""
    _isolate_env(monkeypatch, pytester.path)
    monkeypatch.setenv("KERNELCACHE_DIR", str(shared_cache))
    monkeypatch.setenv("KERNELCACHE_LOCK_DIR", str(shared_cache.parent / "kc-shared-locks"))
    _write_kernels(pytester)
    return KcProject(pytester, shared_cache, pytester.path / "no-compile-log")


@pytest.fixture
def plain(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester project with a clean environment and no kernels."""
    _isolate_env(monkeypatch, pytester.path)
    monkeypatch.setenv("KERNELCACHE_DIR", str(pytester.path / "kc-cache"))
    monkeypatch.setenv("KERNELCACHE_LOCK_DIR", str(pytester.path / "kc-locks"))
    return pytester


def _write_kernels(pytester: pytest.Pytester) -> None:
    k = pytester.path / "kernels"
    k.mkdir(exist_ok=True)
    (k / "add_a.cc").write_text(ADD_SRC.format(fn="add", op="+"))
    (k / "add_b.cc").write_text(ADD_SRC.format(fn="sub", op="-"))
    (k / "scale.cu").write_text(CU_SRC)
    (k / "broken.cc").write_text("#include <tvm/ffi/function.h>\nint f(int x) { return x + ; }\n")
    (pytester.path / "kcspecs.py").write_text(SPECS_PY)


def fake_nvidia_smi(directory: Path, rows: list[str] | None = None, sleep: float = 0.0) -> Path:
    """An ``nvidia-smi`` stand-in printing CSV rows like the real one (or hanging for ``sleep`` s)."""
    directory.mkdir(parents=True, exist_ok=True)
    p = directory / "nvidia-smi"
    body = f"sleep {sleep}\n" if sleep else ""
    body += "".join(f"echo '{r}'\n" for r in rows or [])
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return p


@pytest.fixture
def smi(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """``smi(rows, sleep=0)``: put an nvidia-smi stand-in first on PATH for this test."""

    def install(rows: list[str] | None = None, sleep: float = 0.0) -> Path:
        d = pytester.path / "gpu-bin"
        p = fake_nvidia_smi(d, rows, sleep)
        monkeypatch.setenv("PATH", str(d) + os.pathsep + os.environ["PATH"])
        return p

    return install
