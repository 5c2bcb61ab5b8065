"""Shared fixtures: an isolated cache, a counting compiler wrapper, tiny tvm-ffi kernels.

Faults are provoked for real: the compiler wrapper really runs g++ (and can be slowed down so a
test can SIGKILL a build mid-compile or mid-link), other processes are real subprocesses.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    # The plugin registers these too; repeated here so `-p no:kernelcache --strict-markers` works.
    for line in ("kernel(*names): shipped kernels a test needs",
                 "gpu(count=1, min_arch=None): needs CUDA GPUs",
                 "suite(stage, runner): CI suite and runner label"):
        config.addinivalue_line("markers", line)

REPO = Path(__file__).resolve().parents[1]

WRAPPER = r"""#!/bin/sh
# Counting compiler wrapper: logs every compile/link, optionally sleeps to widen fault windows.
case " $* " in
  *" --version "*) exec g++ "$@" ;;
esac
case " $* " in
  *" -shared "*) kind=link ;;
  *kc_identity.c*) kind=identity ;;
  *" -c "*) kind=compile ;;
  *) kind=other ;;
esac
echo "$kind $$ $*" >> "${KC_COUNT_LOG:-/dev/null}"
if [ "$kind" = compile ] && [ -n "$KC_SLOW_COMPILE" ]; then sleep "$KC_SLOW_COMPILE"; fi
if [ "$kind" = link ] && [ -n "$KC_SLOW_LINK" ]; then sleep "$KC_SLOW_LINK"; fi
exec g++ "$@"
"""

KERNEL_SRC = """\
#include <tvm/ffi/function.h>
#include "{header}"
int64_t {fn}(int64_t a, int64_t b) {{ return a + b + KC_OFFSET; }}
TVM_FFI_DLL_EXPORT_TYPED_FUNC({fn}, {fn});
"""


@dataclass
class KcEnv:
    tmp: Path
    cache: Path
    locks: Path
    count_log: Path
    cxx: Path

    def env(self, **extra: str) -> dict[str, str]:
        e = dict(os.environ)
        e.update({
            "KERNELCACHE_DIR": str(self.cache),
            "KERNELCACHE_LOCK_DIR": str(self.locks),
            "KC_COUNT_LOG": str(self.count_log),
            "CXX": str(self.cxx),
            "KERNELCACHE_LOG": "0",
            "PYTHONPATH": str(REPO) + os.pathsep + e.get("PYTHONPATH", ""),
        })
        e.update(extra)
        return e

    def compiles(self, kind: str = "compile") -> int:
        try:
            return sum(1 for line in self.count_log.read_text().splitlines() if line.split(" ", 1)[0] == kind)
        except FileNotFoundError:
            return 0

    def reset_counts(self) -> None:
        self.count_log.write_text("")

    def entries(self, name: str | None = None) -> list[Path]:
        base = self.cache / "v1" / "entries"
        pat = f"{name}/*/*" if name else "*/*/*"
        return sorted(p for p in base.glob(pat) if p.is_dir())

    def run_py(self, code: str, timeout: float = 120, check: bool = True, **env: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=self.env(**env),
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc


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
    from kernelcache import events

    events.reset_stats()
    return env


def make_project(base: Path, offset: int = 0, fn: str = "add", header: str = "kc_add.h") -> Path:
    """A tiny kernel project: src/add.cc including include/<header> (via -I include)."""
    (base / "include").mkdir(parents=True, exist_ok=True)
    (base / "add.cc").write_text(KERNEL_SRC.format(fn=fn, header=header))
    (base / "include" / header).write_text(f"#define KC_OFFSET {offset}\n")
    return base


def project_spec(base: Path, name: str = "adder", fn: str = "add", **kw):
    import kernelcache as kc

    kw.setdefault("include_dirs", ["include"])
    return kc.KernelSpec(name=name, sources=["add.cc"], root=base,
                         functions={fn: "Callable[[int, int], int]"}, **kw)


SPEC_CODE = """
import sys, json
sys.path.insert(0, {tests!r})
from conftest import project_spec
from pathlib import Path
import kernelcache as kc
spec = project_spec(Path({base!r}), **{kw!r})
"""


def spec_code(base: Path, **kw) -> str:
    """Python source that recreates project_spec(base, **kw) in a subprocess."""
    return SPEC_CODE.format(tests=str(Path(__file__).parent), base=str(base), kw=kw)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "proj")


def replace_file(path: Path, data: bytes) -> None:
    """Put other bytes at `path` by rename, as a deploy or a bad copy would.

    Writing in place into a .so that this test process has mapped (it loaded the entry) would
    SIGBUS the test runner itself; a rename leaves the mapped inode intact while every later
    open of the path sees the damaged bytes.
    """
    tmp = path.with_name(path.name + ".damaged")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def manifest(entry: Path) -> dict:
    return json.loads((entry / "manifest.json").read_text())
