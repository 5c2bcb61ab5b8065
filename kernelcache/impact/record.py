"""Recording what a test touched: kernels it loaded (loader events), repository files it opened
or listed (Python audit hooks), and each kernel's inputs (its manifest's recorded deps).

Why audit hooks: a test may depend on files it never imports — a layering test parses every
module, a kernel test reads a JSON fixture — and only the ``open``/``os.scandir`` audit events
see every such read in-process. The hook is installed once per process (hooks cannot be
removed) and does nothing unless a recording is active; paths are filtered to repository files
when the map is written. Reads by subprocesses are not seen: a test (fixture, collection,
conftest) that started one, or read outside the repository and the environment, is recorded as
opaque (:mod:`.opaque`) and always runs.
"""
from __future__ import annotations

import os
import posixpath
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Iterable

from ..base import events, process_state
from ..base.layout import AREAS, Layout
from ..entry.manifest import Manifest, read as read_manifest
from ..base import warm_facts
from ..host import installed
from ..host.anchors import KERNELCACHE, PACKAGE_DIR, ROOT
from .impact_map import KernelRecord
from .opaque import SPAWN_EVENTS, Scope, abs_path as _abs, spawn_reason, sys_frame

# Listings that are look-ups, not reads a test depends on: a load scanning the directories of
# sys.path (the working directory too) for distribution metadata (base.warm_facts' import-path stamp that
# recall and prebuilt roots compare, host.installed, storage.prebuilt: the environment's record covers
# distributions), importlib.metadata doing the same, and the import system filling its directory
# cache (the import graph covers what is imported, a new file shadowing a module included). Named
# from the modules themselves: a module that moves floors stays a look-up.
_LOOKUPS = frozenset({warm_facts.__name__, installed.__name__, "kernelcache.storage.prebuilt", "importlib._bootstrap_external",
                      "importlib.metadata", "importlib_metadata"})  # the loader's *.dist-info scans
LOAD_EVENTS = ("hit", "prebuilt_hit", "remote_hit", "build_done", "miss", "build_failed")


class Recording:
    """What happened while one test, fixture setup, collection or conftest import ran (raw
    paths; filtered later)."""

    __slots__ = ("opened", "listed", "loaded", "where", "opaque", "fixtures")

    def __init__(self) -> None:
        self.opened: set[str] = set()
        self.listed: set[str] = set()
        self.loaded: dict[str, str] = {}  # kernel name -> entry id ("" when unknown)
        # kernel name -> (the spec's root, the answering entry's directory), as the load told:
        # what its answer rests on, however it was answered (built, hit, recalled, fetched, prebuilt)
        self.where: dict[str, tuple[str, str]] = {}
        self.opaque: list[str] = []  # why what ran here cannot be seen (a subprocess, a read outside)
        self.fixtures: set[str] = set()  # fixtures set up inside this one (request.getfixturevalue)

    def absorb(self, other: "Recording") -> None:
        self.opened |= other.opened
        self.listed |= other.listed
        self.loaded.update(other.loaded)
        self.where.update(other.where)
        self.fixtures |= other.fixtures
        for why in other.opaque:
            self.note_opaque(why)

    def note_opaque(self, why: str) -> None:
        if why not in self.opaque and len(self.opaque) < 3:
            self.opaque.append(why)


# Recordings nest: a fixture set up inside a test's protocol records on its own, then the test
# goes on; events go to the innermost one. While conftests may be imported (from before the
# first conftest until collection ends), an event whose stack runs through a conftest's
# module-level code belongs to that conftest instead.
_stack: list[Recording] = []
_conftests: dict[str, Recording] | None = None
_scope: Scope | None = None
_installed = False
_lock = threading.Lock()


def _conftest_of(frame: FrameType | None) -> str | None:
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and code.co_filename.endswith("conftest.py"):
            return code.co_filename
        frame = frame.f_back
    return None


def _target(depth: int) -> Recording | None:
    if _conftests is not None:
        f = _conftest_of(sys_frame(depth + 1))
        if f is not None:
            return _conftests.setdefault(f, Recording())
    return _stack[-1] if _stack else None


def _audit(event: str, args: tuple) -> None:
    scope = _scope
    if scope is not None:
        scope.note_created(event, args)
    if not _stack and _conftests is None:
        return
    if event == "open":
        p = _abs(args[0])
        if p is None:
            return
        r = _target(1)
        if r is not None:
            r.opened.add(p)
            if scope is not None and scope.outside(p) and scope.by_the_test(sys_frame(1)):
                r.note_opaque(f"read {p} (outside the repository and the recorded environment)")
    elif event in ("os.listdir", "os.scandir"):
        if sys._getframe(1).f_globals.get("__name__") in _LOOKUPS:
            return  # a module or distribution lookup: the import graph and the environment cover it
        p = _abs(args[0] if args and args[0] is not None else ".")
        r = _target(1)
        if p is not None and r is not None:
            r.listed.add(p)
            if scope is not None and scope.outside(p) and scope.by_the_test(sys_frame(1)):
                r.note_opaque(f"listed {p} (outside the repository and the recorded environment)")
    elif event in SPAWN_EVENTS:
        r = _target(1)
        if r is not None and scope is not None and scope.by_the_test(sys_frame(1)):
            r.note_opaque(spawn_reason(event, args))


def _on_event(event: str, fields: dict) -> None:
    r = _target(1)
    if r is not None and event in LOAD_EVENTS and fields.get("name"):
        name = str(fields["name"])
        r.loaded[name] = str(fields.get("entry") or r.loaded.get(name, ""))
        root, edir = fields.get("root"), fields.get("entry_dir")
        if root or edir:
            old_root, old_dir = r.where.get(name, ("", ""))
            r.where[name] = (str(root or old_root), str(edir or old_dir))


def install(scope: Scope | None = None) -> None:
    """Install the audit hook (once per process; hooks cannot be removed) and the loader
    listener; ``scope`` decides what is opaque (None: nothing is)."""
    global _installed, _scope
    with _lock:
        if scope is not None:
            if _scope is not None:  # a later, fuller scope keeps what this process created so far
                scope.created |= _scope.created
            _scope = scope
        if not _installed:
            sys.addaudithook(_audit)
            _installed = True
    events.add_listener(_on_event)


def start() -> Recording:
    """Begin a recording (nested in the current one, if any; one thread records at a time)."""
    install()
    r = Recording()
    _stack.append(r)
    return r


def stop() -> Recording | None:
    """End the innermost recording."""
    return _stack.pop() if _stack else None


def current() -> Recording | None:
    """The innermost recording, if any."""
    return _stack[-1] if _stack else None


def watch_conftests() -> None:
    """Attribute what conftests do at import to them (until :func:`conftest_recordings`)."""
    global _conftests
    install()
    if _conftests is None:
        _conftests = {}


def conftest_recordings(stop_watching: bool = True) -> dict[str, Recording]:
    """conftest path -> what its import-time code read, listed, loaded, started."""
    global _conftests
    got = dict(_conftests or {})
    if stop_watching:
        _conftests = None
    return got


def _reset() -> None:
    global _conftests, _scope
    _stack.clear()
    _conftests = None
    _scope = None
    events.remove_listener(_on_event)


process_state.register("impact.record._active", _reset)


# -- paths ------------------------------------------------------------------------------------------
class RepoPaths:
    """Absolute paths -> repository-relative ones, for files the repository holds."""

    def __init__(self, root: Path, files: Iterable[str]):
        self.root = os.path.realpath(root)
        self.plain = os.path.normpath(os.path.abspath(root))
        self.files = set(files)
        self.dirs = {posixpath_dirname(f) for f in self.files}

    def rel(self, p: str) -> str | None:
        p = os.path.normpath(p)
        for base in (self.plain, self.root):
            if p == base:
                return ""
            if p.startswith(base + os.sep):
                return p[len(base) + 1:].replace(os.sep, "/")
        real = os.path.realpath(p)
        if real != p and real.startswith(self.root + os.sep):
            return real[len(self.root) + 1:].replace(os.sep, "/")
        return None

    def in_repository(self, p: str) -> str | None:
        """The repository path of an absolute path a manifest recorded: inside this checkout, or
        (a manifest made in another checkout of this repository, whose absolute paths point
        there) the longest trailing part that names a file here — more inputs, never fewer."""
        if not os.path.isabs(p):
            return None
        r = self.rel(p)
        if r is not None:
            return r or None
        parts = os.path.normpath(p).replace(os.sep, "/").split("/")
        for i in range(1, len(parts)):
            tail = "/".join(parts[i:])
            if tail in self.files:
                return tail
        return None

    def files_of(self, paths: Iterable[str]) -> set[str]:
        out = set()
        for p in paths:
            r = self.rel(p)
            if r is not None and r in self.files:
                out.add(r)
        return out

    def dirs_of(self, paths: Iterable[str]) -> set[str]:
        out = set()
        for p in paths:
            r = self.rel(p)
            if r is not None and r in self.dirs:
                out.add(r)
        return out


def posixpath_dirname(p: str) -> str:
    return p.rpartition("/")[0]


# -- kernels ----------------------------------------------------------------------------------------
def find_manifest(name: str, entry_id: str, cache_dir: Path, prebuilt: Iterable[Path] = ()) -> Manifest | None:
    """The manifest of entry ``entry_id`` of kernel ``name`` (cache areas, then artifact roots)."""
    if not entry_id:
        return None
    layouts = [Layout(cache_dir)] + [Layout(p) for p in prebuilt]
    for lay in layouts:
        for area in AREAS:
            try:
                kdir = lay.kernel_dir(name, area)
                for key_dir in kdir.iterdir() if kdir.is_dir() else ():
                    cand = key_dir / entry_id
                    if cand.is_dir():
                        m = read_manifest(cand)
                        if m is not None:
                            return m
            except OSError:
                continue
    return None


def kernel_record(name: str, repo: RepoPaths, root: Path | None, sources: Iterable[str],
                  manifest: Manifest | None, modules: Iterable[str]) -> KernelRecord:
    """A kernel's repository inputs: its sources, and the deps and absent probes of its manifest
    that lie in the repository — ``${ROOT}``-anchored or absolute (a header outside the root,
    reached through ``-I../common``), as repository paths (or, without a manifest, its
    sources and every file under its root)."""
    root_rel = repo.rel(str(root)) if root is not None else None
    rec = KernelRecord(name=name, root=root_rel, modules=sorted(set(modules)))
    prefix = f"{root_rel}/" if root_rel else ""

    def in_repo(p: str) -> str | None:
        if p == ROOT or p.startswith(ROOT + "/"):
            if root_rel is None:
                return None
            # ``${ROOT}/../common/x.h``: a file outside the root that moves with it
            rel = posixpath.normpath(prefix + p[len(ROOT) + 1:]) if "/.." in p else prefix + p[len(ROOT) + 1:]
            return None if rel == ".." or rel.startswith("../") else rel
        if p.startswith(KERNELCACHE + "/"):  # this package's own header: in a checkout, a repository file
            return repo.in_repository(PACKAGE_DIR + p[len(KERNELCACHE):])
        if p.startswith("${"):
            return None  # ${TVM_FFI}, ${SITE}: the environment, not the repository
        return repo.in_repository(p)

    inputs = [prefix + s.replace(os.sep, "/") for s in sources] if root_rel is not None else []
    if manifest is not None:
        inputs += [prefix + s for s in manifest.source_hashes] if root_rel is not None else []
        inputs += [a for a in (in_repo(str(d.get("path", ""))) for d in manifest.deps) if a]
        rec.absent = sorted({a for a in (in_repo(str(p)) for p in manifest.absent) if a})
        rec.complete = True
        rec.entry_id = manifest.entry_id
    rec.inputs = sorted(set(inputs))
    return rec
