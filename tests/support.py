"""Helpers shared by the test packages: an isolated cache environment, tiny tvm-ffi kernel
projects, code that recreates them in a subprocess, and ways to damage files as deploys do.

A plain module of the ``tests`` package (``from tests.support import make_project``), so test
files never import a conftest or edit ``sys.path``; the fixtures that use it live in
``tests/conftest.py``.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# A deadline that only stops a hung test (a subprocess, a wait for a file): generous, because a
# loaded CI machine (-n 4 on 2 cores) can take minutes for what takes seconds alone. Nothing
# asserts against elapsed time; fault windows are held open by gates, not by sleeps.
HANG_S = 900

WRAPPER = r"""#!/bin/sh
# Counting compiler wrapper: logs every compile/link. Fault windows, whatever the machine's load:
# KC_HOLD_COMPILE / KC_HOLD_LINK=<file>: that step waits (at most 900 s) until <file> exists;
# KC_COMPILE_BARRIER=<n>: a compile waits until <n> compiles have started (two "hosts" at once);
# KC_SLOW_COMPILE / KC_SLOW_LINK=<seconds>: sleep (only widens a window; never relied on).
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
hold() { i=0; while [ ! -e "$1" ] && [ $i -lt 18000 ]; do sleep 0.05; i=$((i+1)); done; }
if [ "$kind" = compile ] && [ -n "$KC_HOLD_COMPILE" ]; then hold "$KC_HOLD_COMPILE"; fi
if [ "$kind" = link ] && [ -n "$KC_HOLD_LINK" ]; then hold "$KC_HOLD_LINK"; fi
if [ "$kind" = compile ] && [ -n "$KC_COMPILE_BARRIER" ]; then
  i=0
  while [ "$(grep -c '^compile ' "$KC_COUNT_LOG")" -lt "$KC_COMPILE_BARRIER" ] && [ $i -lt 18000 ]; do
    sleep 0.05; i=$((i+1))
  done
fi
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

    def wait_for(self, kind: str, n: int = 1) -> None:
        """Until ``n`` steps of ``kind`` (compile, link) have started; fails a hung test."""
        import time

        deadline = time.monotonic() + HANG_S
        while self.compiles(kind) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"no {kind} step started: {self.count_log.read_text() if self.count_log.exists() else ''}")
            time.sleep(0.02)

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

    def run_py(self, code: str, timeout: float = HANG_S, check: bool = True, cwd: Path | None = None,
               **env: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=self.env(**env), cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc


def build_tree_copy(dst: Path) -> Path:
    """A copy of what building this project's wheel reads, at ``dst``. Tests build or pip-install
    from the copy, never from the checkout: a build in the checkout rewrites its ``build/`` and
    ``kernelcache.egg-info``, and every test process has the checkout on ``sys.path``, where a
    recalled call witnesses the ``*.egg-info`` (CI lost a recall to a concurrent install)."""
    import shutil

    dst.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, dst / name)
    shutil.copytree(REPO / "kernelcache", dst / "kernelcache", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return dst


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


# Needs the repository on sys.path (KcEnv.env() puts it on PYTHONPATH), as every subprocess has.
SPEC_CODE = """
import sys, json
from tests.support import project_spec
from pathlib import Path
import kernelcache as kc
spec = project_spec(Path({base!r}), **{kw!r})
"""


def spec_code(base: Path, **kw) -> str:
    """Python source that recreates project_spec(base, **kw) in a subprocess."""
    return SPEC_CODE.format(base=str(base), kw=kw)


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


COMPILER = re.compile(r"(^|-)(c\+\+|g\+\+|gcc|cc|clang|clang\+\+|nvcc|cpp)(-[0-9.]+)?$")


def compilerless_path(bin_dir: Path) -> str:
    """A PATH with no C/C++/CUDA compiler at all (a serving host): links to every other
    program of /usr/bin and /bin, plus this interpreter's directory."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for d in ("/bin", "/usr/bin"):
        for p in Path(d).iterdir():
            if not COMPILER.search(p.name) and not (bin_dir / p.name).exists():
                (bin_dir / p.name).symlink_to(p)
    return os.pathsep.join([os.path.dirname(sys.executable), str(bin_dir)])


def copy_as_fetched(entry: Path, spec, settings) -> Path:
    """A copy of a built entry where a fleet download of it lands (``fetched/<name>/<skey>/``),
    its manifest as the fleet stage writes it (relocatable, a remote origin)."""
    import shutil

    from kernelcache.entry import manifest
    from kernelcache.host import toolchain

    from kernelcache import kinds
    from kernelcache.storage.local import LocalStore

    skey = kinds.source_key(spec, (), toolchain.tvm_ffi_paths().version, settings)
    dest = LocalStore(settings).fetched_dir(spec.name, skey) / entry.name
    dest.parent.mkdir(parents=True)
    shutil.copytree(entry, dest)
    m = manifest.read(dest).relocatable(None)
    m.origin = "remote:file:///elsewhere"
    manifest.write(dest, m)
    return dest
