"""'Hosts' for fleet-cache loader tests: subprocesses with their own cache, lock dir and checkout.

Each host is a separate interpreter with its own ``KERNELCACHE_DIR`` and ``KERNELCACHE_LOCK_DIR``
(nothing shared but the remote), a counting compiler wrapper (so "0 compiles" is counted, not
assumed) and an event log (remote hits, misses with reasons, uploads, lease waits).
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

WRAPPER = r"""#!/bin/sh
case " $* " in *" --version "*) exec g++ "$@" ;; esac
case " $* " in *" -c "*) case "$*" in *kc_identity*) ;; *) echo "compile $$" >> "$KC_COUNT_LOG" ;; esac ;; esac
if [ -n "$KC_SLOW_COMPILE" ]; then case " $* " in *" -c "*) sleep "$KC_SLOW_COMPILE" ;; esac; fi
exec g++ "$@"
"""

KERNEL = """#include <tvm/ffi/function.h>
#include "fleet_k.h"
int64_t add(int64_t a, int64_t b) { return a + b + FLEET_OFFSET; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add);
"""

LOAD = """
import hashlib, json, sys
from pathlib import Path
import kernelcache as kc
spec = kc.KernelSpec(name="fleet_k", sources=["add.cc"], root=Path({root!r}), include_dirs=["include"],
                     functions={{"add": "Callable[[int, int], int]"}})
{before}
try:
    mod, res = kc.load_with_result(spec)
    out = {{"value": mod.add(2, 3), "status": res.status, "reason": res.reason,
           "sha": hashlib.sha256(Path(res.so_path).read_bytes()).hexdigest()}}
except kc.KernelCacheError as e:
    out = {{"error": type(e).__name__, "message": str(e)}}
out["stats"] = kc.stats()
print("RESULT " + json.dumps(out))
"""


def make_project(base: Path, offset: int = 0) -> Path:
    (base / "include").mkdir(parents=True, exist_ok=True)
    (base / "add.cc").write_text(KERNEL)
    (base / "include" / "fleet_k.h").write_text(f"#define FLEET_OFFSET {offset}\n")
    return base


@dataclass
class Host:
    """One machine of the fleet: its own cache, lock dir, compiler wrapper and event log."""

    name: str
    dir: Path
    base_env: dict

    def __post_init__(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cxx = self.dir / "cxx"
        if not self.cxx.exists():
            self.cxx.write_text(WRAPPER)
            self.cxx.chmod(self.cxx.stat().st_mode | stat.S_IEXEC)

    @property
    def cache(self) -> Path:
        return self.dir / "cache"

    @property
    def log(self) -> Path:
        return self.dir / "events.jsonl"

    def env(self, **extra: str) -> dict:
        e = dict(self.base_env)
        e.update({"KERNELCACHE_DIR": str(self.cache), "KERNELCACHE_LOCK_DIR": str(self.dir / "locks"),
                  "KC_COUNT_LOG": str(self.dir / "compiles.log"), "CXX": str(self.cxx),
                  "KERNELCACHE_LOG": str(self.log), "KERNELCACHE_REMOTE_TIMEOUT": "5"})
        e.update(extra)
        return e

    def compiles(self) -> int:
        try:
            return len((self.dir / "compiles.log").read_text().split("\n")) - 1
        except FileNotFoundError:
            return 0

    def events(self, kind: str | None = None) -> list[dict]:
        try:
            evs = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        except FileNotFoundError:
            return []
        return [e for e in evs if kind is None or e["event"] == kind]

    def load_code(self, project: Path, before: str = "") -> str:
        return LOAD.format(root=str(project), before=textwrap.dedent(before))

    def load(self, project: Path, timeout: float = 180, before: str = "", **env: str) -> dict:
        p = subprocess.run([sys.executable, "-c", self.load_code(project, before)], env=self.env(**env),
                           capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return parse(p)

    def load_with_stderr(self, project: Path, timeout: float = 180, **env: str) -> tuple[dict, str]:
        """Like :meth:`load`, with the process's stderr (what a user sees: progress lines, warnings).
        Pass ``KERNELCACHE_LOG=""`` to get the normal progress lines instead of the event log."""
        p = subprocess.run([sys.executable, "-c", self.load_code(project)], env=self.env(**env),
                           capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return parse(p), p.stderr

    def start(self, project: Path, before: str = "", **env: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", self.load_code(project, before)], env=self.env(**env),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)

    def cli(self, *args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kernelcache", *args], env=self.env(**env), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def finish(p: subprocess.Popen, timeout: float) -> dict:
    """Wait for a started host, read its output and close its pipes, then :func:`parse` it."""
    out, err = p.communicate(timeout=timeout)
    return parse(subprocess.CompletedProcess(p.args, p.returncode, out, err))


def parse(p) -> dict:
    stdout = p.stdout if isinstance(p.stdout, str) else p.stdout.read()
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"host failed ({p.returncode}):\n{stdout}\n{p.stderr if isinstance(p.stderr, str) else ''}")


def other_checkout(dest: Path) -> Path:
    """A copy of the package at another path (a second checkout: same bytes, other place)."""
    shutil.copytree(REPO / "kernelcache", dest / "kernelcache",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.o"))
    return dest


def without_compilers_path() -> str:
    """PATH with no nvcc and no compiler drivers (python's own dir stays for subprocesses)."""
    keep = [os.path.dirname(sys.executable), "/usr/bin", "/bin"]
    return os.pathsep.join(keep)
