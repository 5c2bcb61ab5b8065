"""The facts the warm paths share, each with one owner: the cache's fixed spellings, the recall
memo's format and reader, the one stat rule and the import-path stamps.

Why one leaf for all of them: a recalled call (``kernelcache.lookup.recall``) imports every module
it needs in every fresh process, before anything is loaded (each one costs ~0.1 ms;
``benchmarks/bench_before_after.py``), and must not import :mod:`kernelcache.base.layout` (its
``Layout`` class alone leaves ~60 objects where a full garbage collection is pending). The
layout, the cache's housekeeping (``prune`` drops memos whose entry is gone), the hit record's
check (``deprecord``), the companion wheels' prebuilt roots and the full load's notes
(``basis``) read them here, so each rule is written once.
"""
from __future__ import annotations

import marshal
import os
import sys
from array import array
from typing import Any

from . import environ

# -- the cache's spellings -----------------------------------------------------------------------
VERSION = "v1"  # the cache layout's version: every area lives under <cache dir>/v1/
RECALL = "recall"  # under the layout's root: one memo per recalled call
RECALL_FORMAT = 5  # 5: the witnesses are the list the full load noted (base.basis); 4: import_stamp

NAME_MAX = 255  # bytes of one path component (Linux, macOS): what a kernel name must leave room in
# what the layout derives from a kernel name: entries/<name>/, inline/<name>/, <name>.so (the
# longest: a kind's binary; an executable is <name>)
NAME_SUFFIXES = ("", ".so")


def name_problem(name: str) -> str | None:
    """Why a kernel name cannot name the files the layout derives from it, or None."""
    longest = max((name + s for s in NAME_SUFFIXES), key=lambda c: len(c.encode()))
    n = len(longest.encode())
    if n > NAME_MAX:
        return (f"too long: the cache names a file {longest[:24]}...{longest[-8:]} ({n} bytes) after it, and a file "
                f"name holds at most {NAME_MAX} bytes (a kernel name at most {NAME_MAX - n + len(name.encode())})")
    return None


# Environment variables that change what a compiler produces without appearing on its command line
# (part of every build's key when set; a recalled call's digest holds them too). MAX_JOBS is
# deliberately absent: parallelism never changes the output.
COMPILER_ENV = (
    "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH",  # search paths gcc reads
    "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "CUDAHOSTCXX",  # flags and host compiler nvcc reads
    "GCC_EXEC_PREFIX", "COMPILER_PATH",  # where gcc finds cc1plus, as and ld: another compiler behind the same driver
    "SOURCE_DATE_EPOCH",  # __DATE__ and __TIME__ (reproducible builds)
)

# -- a recalled call's memo ----------------------------------------------------------------------
def memo_path(digest: str, base: str | None = None) -> str:
    return os.path.join(base or environ.cache_dir(), VERSION, RECALL, digest)


def read_file(path: str) -> tuple | None:
    """One memo as written (None: unreadable, damaged or of another format)."""
    try:
        with open(path, "rb") as f:
            rec = marshal.loads(f.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if type(rec) is not tuple or len(rec) != 13 or rec[0] != RECALL_FORMAT:
        return None
    return rec


# -- the one stat rule and the import-path stamps ------------------------------------------------
def stat_fields(st: os.stat_result) -> tuple[int, int, int, int]:
    """(size, mtime_ns, ctime_ns, inode): what every stat comparison of the cache compares (ctime
    cannot be set back, so an edit with a restored mtime moves it)."""
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def stat_array(paths: list[bytes]) -> tuple[array, bool]:
    """(size, mtime_ns, ctime_ns, inode) of each path into one int64 array, and whether every
    path could be stat-ed (the array stops at the first that could not). The one stat rule of
    the hit record's check (``deprecord``) and of a recalled call."""
    cur = array("q")
    put, stat = cur.append, os.stat
    try:
        for p in paths:
            st = stat(p)
            put(st.st_size)
            put(st.st_mtime_ns)
            put(st.st_ctime_ns)
            put(st.st_ino)
    except OSError:
        return cur, False
    return cur, True


def distributions_stamp() -> tuple:
    """Per ``sys.path`` entry, what installing, removing or reinstalling a distribution changes
    (the key of the companion wheels' prebuilt roots, ``kernelcache.storage.prebuilt``).

    A directory of the Python installation (under ``sys.prefix``, ``sys.base_prefix``,
    ``sys.exec_prefix``: site-packages, the standard library): its mtime (pip adds, removes or
    replaces a ``*.dist-info`` directory in it; writing files deeper down does not move it).
    Any other directory (the working directory, a checkout on ``PYTHONPATH``, where people and
    tools create files all the time): the names and mtimes of the ``*.dist-info``,
    ``*.egg-info`` and ``*.egg`` entries in it, which is all ``importlib.metadata`` reads there;
    a ``build/`` or an editor's swap file appearing in a checkout is not a new distribution. Such a
    directory without any (a test directory pytest puts first, a project's source dir) and a missing
    entry are left out: no distribution comes from them, and one that appears there later enters
    the stamp (so a ``python -c`` and a pytest run of one project stamp alike). Left out too: the directory of
    setuptools' vendored packages, which importing setuptools appends to ``sys.path``
    (``torch.utils.cpp_extension`` imports it, so a process whose full path wrote torch's flag
    lines has it and the next one does not; no companion wheel lives there).
    """
    cwd = os.getcwd()
    owned = _OWNED
    stamp: list[tuple[str, object]] = []
    seen: set[str] = set()
    for p in sys.path:
        if p.endswith(_VENDORED):
            continue
        d = p or cwd
        a = os.path.abspath(d)  # '' and the working directory spelled out are one entry
        if a in seen:  # a second mention offers no other distribution
            continue
        seen.add(a)
        try:
            if a != cwd and a.startswith(owned):
                stamp.append((a, os.stat(d).st_mtime_ns))
                continue
            metas = []
            with os.scandir(d) as it:
                for e in it:
                    if e.name.endswith((".dist-info", ".egg-info", ".egg")):
                        metas.append((e.name, e.stat().st_mtime_ns))
            if metas:
                stamp.append((a, tuple(sorted(metas))))
        except NotADirectoryError:  # a zip on the path: its stat
            try:
                stamp.append((a, os.stat(d).st_mtime_ns))
            except OSError:
                pass
        except OSError:
            continue
    return tuple(stamp)


# The modules whose copy decides an answer: kernelcache's own rules, the libraries that load or
# define a module (tvm-ffi, torch) and the JIT front ends whose headers and flags a kind reads.
RESOLVED = ("kernelcache", "tvm_ffi", "torch", "flashinfer", "sglang")


def import_stamp() -> tuple:
    """What the import path means for an answer: the distributions it offers (companion wheels'
    roots: :func:`distributions_stamp`) and where each of :data:`RESOLVED` is imported from (a
    second copy of tvm-ffi first on the path is another answer, an unrelated directory is not)."""
    return distributions_stamp(), tuple(_location(name) for name in RESOLVED)


def _location(name: str) -> Any:
    """Where ``name`` is (or would be) imported from: the loaded module's, else what the import
    system's finders say now, without importing it (None: not importable)."""
    mod = sys.modules.get(name)
    spec = getattr(mod, "__spec__", None) if mod is not None else None
    if spec is None:
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            try:
                spec = find(name, None)
            except Exception as e:  # noqa: BLE001 - a broken finder: an answer no memo matches
                return ("unresolved", name, type(e).__name__, os.getpid())
            if spec is not None:
                break
    if spec is None:
        return None
    origin = getattr(spec, "origin", None)
    if origin and origin not in ("built-in", "frozen", "namespace"):
        return os.path.abspath(origin)
    return tuple(getattr(spec, "submodule_search_locations", None) or ())


# The Python installation's prefixes, each ending in a separator (fixed for a process).
_OWNED = (os.path.join(sys.prefix, ""), os.path.join(sys.base_prefix, ""), os.path.join(sys.exec_prefix, ""))
_VENDORED = (os.path.join(os.sep, "setuptools", "_vendor"), os.path.join(os.sep, "pkg_resources", "_vendor"))
