"""What a recording run attributes beyond each test's own run: fixture setups (any scope), conftest
imports, and whether a test is opaque (a subprocess, a read outside the repository and the
environment) or declared its inputs.

Why fixtures are records of their own: a session fixture is set up by whichever test asks first
(under xdist, once per worker); its reads and kernels belong to every test that uses it, so each
test lists the fixtures it used (``baseid::name``) and the map keeps, per fixture, what its
setups did. Likewise a conftest's import-time reads belong to every test under its directory.
The rules that read these records live in :mod:`kernelcache.impact.setups` (no pytest there).
"""
from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import pytest

from .kernels import marker_kernels

if TYPE_CHECKING:  # pragma: no cover
    from kernelcache.impact import record
    from kernelcache.impact.impact_map import ImpactMap, TestRecord

    from .impact import ImpactPlugin
    from .state import SessionState


def add_ini(parser: pytest.Parser) -> None:
    parser.addini("kernelcache_impact_declared", "the inputs of tests the impact map cannot see (a subprocess, a "
                  "read outside the repository): 'TEST-ID-GLOB = INPUT-PATTERN ...' per line; such a test then "
                  "runs when a matching file changes instead of always", type="linelist", default=[])


def watch_early(early_config: pytest.Config) -> None:
    """Before the first conftest is imported: when this run records an impact map, attribute what
    conftests do at import to them (the initial conftests load before ``pytest_configure``)."""
    ns = early_config.known_args_namespace
    wanted = getattr(ns, "kc_impact_map", None) or early_config.getini("kernelcache_impact_map")
    if not wanted:
        from kernelcache.base.settings import kc_environ

        with warnings.catch_warnings():  # said once, by the option resolution at configure
            warnings.simplefilter("ignore")
            wanted = kc_environ().get("KERNELCACHE_IMPACT_MAP")
    if not wanted:
        return
    from kernelcache.impact import record
    from kernelcache.impact.changes import GitError, repo_root
    from kernelcache.impact.opaque import Scope, environment_paths

    try:
        root = repo_root(early_config.rootpath)
    except GitError:
        return
    record.install(Scope(str(root), environment_paths()))
    record.watch_conftests()


def stop_watching() -> None:
    """A run that turned out not to record: conftests are no longer watched."""
    from kernelcache.impact import record

    record.conftest_recordings()


class SetupRecorder:
    """Registered beside :class:`~.impact.ImpactPlugin` when it records a map."""

    def __init__(self, owner: "ImpactPlugin"):
        from kernelcache.impact import record
        from kernelcache.impact.opaque import Scope, environment_paths
        from kernelcache.impact.setups import parse_declared

        self.owner = owner
        self.record = record
        self.fixtures: dict[str, record.Recording] = {}  # "baseid::name" -> what its setups did
        self.conftests: dict[str, record.Recording] = {}  # conftest path (absolute) -> its import
        try:
            self.declared = parse_declared(owner.config.getini("kernelcache_impact_declared"))
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None
        if owner.root is not None:
            record.install(Scope(str(owner.root), environment_paths(_environment(owner))))
        record.watch_conftests()  # a run whose conftests loaded before the options were known

    # -- hooks -----------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Any:
        key = fixture_key(fixturedef)
        # its teardown too: finalizers run last-added first, so one added before the fixture's
        # own (a yield fixture's rest, request.addfinalizer) ends the recording after them, one
        # added after its setup begins it before them
        teardown: list[record.Recording] = []
        fixturedef.addfinalizer(lambda: self._end_teardown(key, teardown))
        rec = self.record.start()
        try:
            return (yield)
        finally:
            self.record.stop()
            self._absorb(key, rec)
            outer = self.record.current()
            if outer is not None:  # set up inside another fixture or a test (getfixturevalue)
                outer.fixtures.add(key)
            fixturedef.addfinalizer(lambda: teardown.append(self.record.start()))

    def _end_teardown(self, key: str, teardown: list["record.Recording"]) -> None:
        if teardown:  # begun (a setup that raised has no teardown of its own to record)
            if self.record.current() is teardown[0]:
                self.record.stop()
            self._absorb(key, teardown.pop())

    def _absorb(self, key: str, rec: "record.Recording") -> None:
        self.fixtures.setdefault(key, self.record.Recording()).absorb(rec)
        self.owner.note_kernels(rec)

    def pytest_deselected(self, items: list[Any]) -> None:
        """-k, -m, --deselect, --lf and this plugin's own selection: those files ran in part."""
        for i in items:
            f = rel_to_root(getattr(i, "path", None), self.owner.root)
            if f is not None:
                self.owner.partial.add(f)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Which tests of each file this session runs: a file all of whose tests ran replaces
        its map record (its old commits forgotten) instead of being united with it. Conftests
        are imported by now: their recordings end here."""
        self._harvest_conftests()
        o = self.owner
        for i in session.items:
            o.collected.setdefault(rel_to_root(i.path, o.root) or str(i.path), []).append(i.nodeid)
        for a in o.config.args:  # `pytest tests/test_a.py::test_a` collects that file in part
            if "::" in a:
                f = rel_to_root(Path(o.config.invocation_params.dir, a.split("::", 1)[0]), o.root)
                if f is not None:
                    o.partial.add(f)

    # -- what the owner asks -----------------------------------------------------------------------
    def fold_test(self, item: pytest.Item, t: "TestRecord", rec: "record.Recording") -> None:
        """The test's fixtures (static closure, dynamic requests), opaque reason, declarations."""
        keys = set(rec.fixtures)
        info = getattr(item, "_fixtureinfo", None)
        for name in getattr(item, "fixturenames", ()):
            for fd in (getattr(info, "name2fixturedefs", None) or {}).get(name, ()):
                keys.add(fixture_key(fd))
        used = getattr(getattr(item, "_request", None), "_fixture_defs", None) or {}
        keys |= {fixture_key(fd) for fd in used.values() if hasattr(fd, "baseid")}
        t.fixtures = sorted(keys)
        t.opaque = rec.opaque[0] if rec.opaque else ""
        from kernelcache.impact.setups import declared_for

        t.inputs = declared_for(item.nodeid, self.declared)
        t.declared = bool(t.inputs or marker_kernels(item)[0])

    def records(self, paths: Any, head: str) -> dict:
        """Fixture and conftest records, repository-relative (what a worker sends up)."""
        self._harvest_conftests()
        conf = {}
        for f, r in self.conftests.items():
            rel = paths.rel(f)
            if rel:
                conf[rel] = _setup(r, paths, head)
        return {"fixtures": {k: _setup(r, paths, head) for k, r in self.fixtures.items()}, "conftests": conf}

    def _harvest_conftests(self) -> None:
        got = self.record.conftest_recordings()
        for f, r in got.items():
            self.conftests.setdefault(f, self.record.Recording()).absorb(r)
            self.owner.note_kernels(r)


def fixture_key(fixturedef: Any) -> str:
    return f"{getattr(fixturedef, 'baseid', '')}::{getattr(fixturedef, 'argname', '?')}"


def _setup(r: "record.Recording", paths: Any, head: str) -> dict:
    return {"reads": sorted(paths.files_of(r.opened)), "dirs": sorted(paths.dirs_of(r.listed)),
            "loaded": sorted(r.loaded), "opaque": r.opaque[0] if r.opaque else "", "commits": [head]}


def merge_setups(m: "ImpactMap", recs: Iterable[dict]) -> None:
    """The session's fixture and conftest records (the controller's and every worker's) united."""
    from kernelcache.impact.impact_map import SetupRecord

    for r in recs:
        for attr in ("fixtures", "conftests"):
            into = getattr(m, attr)
            for k, v in (r.get(attr) or {}).items():
                cur = into.get(k)
                into[k] = SetupRecord(**v) if cur is None else cur.united(SetupRecord(**v))


def whole_files(recs: list[dict]) -> set[str]:
    """Test files every test of which ran in this session (across xdist workers): none
    deselected or named by ``::``, every collected one run (not cut short by -x or a crash)."""
    collected: dict[str, set[str]] = {}
    for r in recs:
        for f, ids in (r.get("collected") or {}).items():
            collected.setdefault(f, set()).update(ids)
    ran = {n for r in recs for n in r["tests"]}
    partial = {f for r in recs for f in r.get("partial") or ()}
    return {f for f, ids in collected.items() if ids and ids <= ran and f not in partial}


def spec_modules(st: "SessionState", root: Path | None, name: str) -> list[str]:
    """Python files that define kernel ``name``'s spec: the ``kernelcache_specs`` modules, or
    a shipped kernel's package and its ``spec`` module."""
    if name in st.kernels.extra_specs():
        mods = [ref.partition(":")[0] for ref in st.kernels.spec_refs]
    else:
        import kernelcache.kernels as shipped

        table = getattr(shipped, "KERNEL_PACKAGES", None) or getattr(shipped, "_KERNEL_MODULES", {})
        pkg = table.get(name, "")
        mods = [pkg, f"{pkg}.spec"] if pkg else []
    out = []
    for mod in mods:
        try:
            origin = importlib.util.find_spec(mod)
        except (ImportError, ValueError):
            origin = None
        rel = rel_to_root(origin.origin, root) if origin is not None and origin.origin else None
        if rel:
            out.append(rel)
    return out


def rel_to_root(path: Any, root: Path | None) -> str | None:
    """``path`` relative to the repository root ("" for the root itself); None when outside."""
    if not path or root is None:
        return None
    try:
        rel = Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None
    return "" if rel == "." else rel


def _environment(owner: "ImpactPlugin") -> list[str]:
    """Where the recorded environment lies besides the interpreter's: the CUDA toolkit, the kernel
    cache, its lock dir and artifact roots, kernelcache itself."""
    s = owner.st.settings
    out = [str(s.cache_dir), str(Path(__file__).resolve().parents[1])]
    out += [str(p) for p in (getattr(s, "lock_dir", None), *(getattr(s, "prebuilt", None) or ())) if p]
    try:
        from kernelcache.host.toolchain import find_cuda_home

        out.append(find_cuda_home())
    except Exception:  # noqa: BLE001 - no toolkit: nothing of it to read
        pass
    for var in ("TORCH_EXTENSIONS_DIR", "FLASHINFER_WORKSPACE_BASE"):
        if os.environ.get(var):
            out.append(os.environ[var])
    return out
