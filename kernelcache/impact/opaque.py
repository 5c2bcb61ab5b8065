"""What a recording cannot see: a subprocess a test started, a file it read outside the
repository and the recorded environment. Such a test is *opaque*: selection always runs it
(unless its inputs are declared), because no record says what its outcome depends on.

Why these exclusions, and no others:
- the environment (the interpreter's prefixes, site-packages, ``sys.path`` outside the
  repository, the CUDA toolkit, the kernel cache and artifact roots, kernelcache itself) is
  recorded by identity elsewhere (``impact.environment``), not file by file;
- pseudo file systems (``/proc``, ``/sys``, ``/dev``) describe the machine and the process;
- a path this process created during the session (``tmp_path``, a file a test wrote, anything
  under a directory it made) is an output of the run, not an input;
- work that the loader or the test runner does on the test's behalf (kernelcache compiling a
  kernel: its compiler's reads are the kernel's manifest; pytest managing its temporary
  directories) is decided by the first frame outside the standard library that caused it.
"""
from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType
from typing import Any, Iterable

SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                          "os.forkpty", "pty.spawn"})
PSEUDO = ("/proc", "/sys", "/dev")
# modules whose own work is not the test's: the loader (its builds are recorded as kernels) and
# the test runner (temporary directories, xdist's channels)
EXEMPT_MODULES = ("kernelcache", "_pytest", "pytest", "pluggy", "xdist", "execnet")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT


def _norm(p: str) -> str:
    return os.path.normpath(p)


class Scope:
    """Where a read is the repository's, the environment's, or this run's own output."""

    def __init__(self, repo: str, environment: Iterable[str]):
        self.repo = _norm(repo)
        env = {_norm(p) for p in environment if p and os.path.isabs(p)}
        env |= {os.path.realpath(p) for p in env}
        self.environment = tuple(sorted(p for p in env if p != os.sep and not _within(self.repo, p)))
        self.created: set[str] = set()  # paths this process created (files written, directories made)
        paths = sysconfig.get_paths()
        libs = {paths.get("purelib", ""), paths.get("platlib", "")}
        self._stdlib = tuple(p for p in {paths.get("stdlib", ""), paths.get("platstdlib", "")} if p)
        self._sitelib = tuple(p for p in libs if p)

    def note_created(self, event: str, args: tuple) -> None:
        """Called for every audit event: remember what this process wrote or made."""
        if event == "open" and len(args) >= 3:
            mode, flags = args[1], args[2]
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                    (mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS):
                p = abs_path(args[0])
                if p is not None:
                    self.created.add(_norm(p))
        elif event == "os.mkdir" or event == "os.rename":
            p = abs_path(args[1] if event == "os.rename" and len(args) > 1 else args[0] if args else None)
            if p is not None:
                self.created.add(_norm(p))

    def outside(self, p: str) -> bool:
        """Is ``p`` (absolute) a read no record covers: not in the repository, the environment,
        a pseudo file system, or what this run created?"""
        p = _norm(p)
        if _within(p, self.repo) or any(_within(p, e) for e in PSEUDO) or \
                any(_within(p, e) for e in self.environment):
            return False
        cur = p
        while True:
            if cur in self.created:
                return False
            parent = os.path.dirname(cur)
            if parent == cur:
                return True
            cur = parent

    def by_the_test(self, frame: FrameType | None) -> bool:
        """Did the test's own code cause this (not the loader's or the runner's)? The first frame
        outside the standard library decides."""
        while frame is not None:
            fn = frame.f_code.co_filename
            stdlib = fn.startswith("<") or (fn.startswith(self._stdlib) and not fn.startswith(self._sitelib))
            if not stdlib and not fn.startswith(os.path.dirname(__file__)):
                mod = str(frame.f_globals.get("__name__") or "")
                return mod.partition(".")[0] not in EXEMPT_MODULES
            frame = frame.f_back
        return True


def _within(p: str, base: str) -> bool:
    return p == base or p.startswith(base.rstrip(os.sep) + os.sep)


def abs_path(p: Any) -> str | None:
    """An audit event's path argument as an absolute path (None for a file descriptor)."""
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    elif isinstance(p, os.PathLike):
        p = os.fspath(p)
    if not isinstance(p, str):
        return None
    try:
        return p if os.path.isabs(p) else os.path.join(os.getcwd(), p)
    except OSError:
        return None


def spawn_reason(event: str, args: tuple) -> str:
    """``started a subprocess (subprocess.Popen: git status)``: what the reason names."""
    what = ""
    if event == "subprocess.Popen" and len(args) > 1:
        argv = args[1]
        what = " ".join(map(str, argv[:3])) if isinstance(argv, (list, tuple)) else str(argv)
    elif event == "os.system" and args:
        what = os.fsdecode(args[0]) if isinstance(args[0], bytes) else str(args[0])
    elif event in ("os.exec", "os.posix_spawn") and args:
        what = str(args[0])
    what = what[:80]
    return f"started a subprocess ({event}{': ' + what if what else ''})"


def environment_paths(extra: Iterable[str] = ()) -> list[str]:
    """The interpreter's prefixes, its site directories, ``sys.path`` and ``extra`` (the CUDA
    toolkit, the kernel cache, artifact roots, kernelcache itself): reads there are the environment's."""
    import site

    out = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path, *extra]
    try:
        out += [*site.getsitepackages(), site.getusersitepackages()]
    except AttributeError:  # pragma: no cover - a virtualenv's old site module
        pass
    return [p for p in out if isinstance(p, str) and p]


def sys_frame(depth: int) -> FrameType | None:
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None
