"""Test impact in the plugin: ``--kc-impact-map PATH`` records (and merges) the impact map;
``--kc-affected-since REF`` keeps only the tests a change can affect, each with its reason.

Why the controller computes the change set and the workers select: under xdist only workers
collect, and all of them must deselect the same tests; so the controller runs git once and
hands the change set down (``workerinput``), each worker applies the same rules to the same
collection, and sends its records and decisions back (``workeroutput``). Deselected tests go
through ``pytest_deselected`` like ``-k`` (in the controller too, so its summary counts them).
The rules live in :mod:`kernelcache.impact` (no pytest there).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kernelcache.entry.manifest import read as read_manifest
from kernelcache.impact.changes import GitError, head_commit, repo_files, repo_root
from kernelcache.impact.impact_map import FileRecord, ImpactMap, KernelRecord, TestRecord, save
from kernelcache.impact.select import EVERYTHING, INERT, TestInfo

from . import impact_record
from .impact_record import rel_to_root
from .kernels import KernelUnavailable, marker_kernels

if TYPE_CHECKING:  # pragma: no cover
    from kernelcache.impact import api, record

    from .state import SessionState

KEY = "kernelcache_impact"
_SHOW = 20  # selected tests listed in the terminal summary (all of them with -v)


def add_ini(parser: pytest.Parser) -> None:
    parser.addini("kernelcache_impact_everything", "extra patterns of files whose change selects every test "
                  f"(name, or path with '/'; built in: {', '.join(EVERYTHING)})", type="linelist", default=[])
    parser.addini("kernelcache_impact_inert", "extra patterns of files that affect no test unless a test read "
                  f"them (built in: {', '.join(INERT)})", type="linelist", default=[])


def configure(config: pytest.Config, st: "SessionState") -> None:
    """Register the impact plugin when this run records a map or selects by change."""
    if not (st.opt("impact_map") or st.opt("affected_since")) or st.opt("build_only"):
        if "kernelcache.impact.record" in sys.modules:  # watched from the first conftest on
            impact_record.stop_watching()
        return
    global api, record
    from kernelcache.impact import api, record  # noqa: F811 - only for runs that use impact

    plugin = ImpactPlugin(config, st)
    config.pluginmanager.register(plugin, "kernelcache-impact")
    if plugin.setups is not None:
        config.pluginmanager.register(plugin.setups, "kernelcache-impact-setups")
    if config.pluginmanager.hasplugin("xdist") and not st.is_worker:
        config.pluginmanager.register(_XdistImpact(plugin), "kernelcache-impact-xdist")


class _Deselected:
    """What the controller hands ``pytest_deselected`` for a test a worker deselected."""

    def __init__(self, nodeid: str):
        self.nodeid = nodeid
        self.location = (nodeid.split("::", 1)[0], None, nodeid)


class ImpactPlugin:
    def __init__(self, config: pytest.Config, st: "SessionState"):
        self.config = config
        self.st = st
        self.map_path = st.opt("impact_map")
        self.since = st.opt("affected_since")
        try:
            self.root: Path | None = repo_root(config.rootpath)
        except GitError:
            self.root = None
        self.rootdir_rel = rel_to_root(config.rootpath, self.root)
        self.rules = api.make_rules(self.root, self.map_path, st.opt("report_json"),
                                    config.getini("kernelcache_impact_everything"),
                                    config.getini("kernelcache_impact_inert"), api.run_outputs(st.settings))
        self.head = head_commit(self.root) if self.root is not None else ""
        self._repo_files: list[str] | None = None
        self.wire: dict | None = None  # the change set, computed once (controller)
        self.prepared: api.Prepared | None = None
        self.selection: dict | None = None
        self.tests: dict[str, TestRecord] = {}
        self.raw: dict[str, record.Recording] = {}  # test file -> what its tests touched
        self.kernel_recs: dict[str, KernelRecord] = {}  # kernels loaded while tests ran
        self.worker_records: list[dict] = []
        self.collected: dict[str, list[str]] = {}  # test file -> its tests this session runs
        self.partial: set[str] = set()  # test files only some of whose tests this session selects
        self.told_deselected = False
        # fixtures, conftests, opaque tests (impact_record); None when this run records no map
        self.setups: impact_record.SetupRecorder | None = impact_record.SetupRecorder(self) if self.map_path else None
        self.report_mode = st.opt("affected_mode") == "report"  # run everything, say what would be deselected
        self.env_snapshot: dict | None = None  # this process's Python environment (recorded with each test)
        if st.is_worker:
            self.wire = (config.workerinput.get(KEY) or {}).get("changes")  # type: ignore[attr-defined]
        elif self.since:
            cs, _, _ = api.compute_changes(config.rootpath, self.since, self.map_path, self.rootdir_rel)
            self.wire = api.changes_to_wire(cs)

    # -- selection -------------------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        if not self.since or self.wire is None:
            return
        self.prepared = p = api.prepare(config.rootpath, self.since, self.map_path, self.rules,
                                        self.rootdir_rel, wire=self.wire, graph_cache=graph_cache(self.st))
        infos = [TestInfo(i.nodeid, rel_to_root(i.path, self.root) or "", marker_kernels(i)[0]) for i in items]
        sel = p.selector.select(infos)
        keep = [i for i in items if i.nodeid in sel.selected]
        dropped = [i for i in items if i.nodeid not in sel.selected]
        if dropped and not self.report_mode:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
            self.told_deselected = True
        from kernelcache.impact import witness

        self.selection = {**sel.as_dict(), "since": self.since, "base": p.changes.base,
                          "map": str(self.map_path or ""), "map_problem": p.map_problem,
                          "seconds": round(p.seconds, 3), "mode": "report" if self.report_mode else "enforce",
                          "witness": witness.build(p.selector, [t for t in infos if t.nodeid not in sel.selected])}

    # -- recording -------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        """Reads while a test file is imported and collected (golden values parametrizing a
        test) belong to that file's record, like the reads of its tests."""
        if not self.map_path or not isinstance(collector, (pytest.File, pytest.Class)):
            return (yield)
        f = rel_to_root(collector.path, self.root) or str(collector.path)
        rec = record.start()
        try:
            return (yield)
        finally:
            record.stop()
            self.raw.setdefault(f, record.Recording()).absorb(rec)  # a module-level kc.load too
            self.note_kernels(rec)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> Any:
        if not self.map_path:
            return (yield)
        f = rel_to_root(item.path, self.root) or str(item.path)
        if self.env_snapshot is None:  # at the first test: conftests may have extended sys.path
            from kernelcache.impact.environment import python_environment

            self.env_snapshot = python_environment()
        self.tests[item.nodeid] = TestRecord(item.nodeid, f, commit=self.head, env=_env_id(self.env_snapshot))
        rec = record.start()
        try:
            return (yield)
        finally:
            record.stop()
            self._fold(item, f, rec)

    def _fold(self, item: pytest.Item, f: str, rec: record.Recording) -> None:
        t = self.tests[item.nodeid]
        t.kernels = list(dict.fromkeys([*marker_kernels(item)[0], *rec.loaded]))
        acc = self.raw.setdefault(f, record.Recording())
        acc.opened |= rec.opened
        acc.listed |= rec.listed
        acc.loaded.update(rec.loaded)
        if self.setups is not None:
            self.setups.fold_test(item, t, rec)
        self.note_kernels(rec)

    def note_kernels(self, rec: "record.Recording") -> None:
        """Records of the kernels a test, fixture, collection or conftest loaded."""
        for n, e in rec.loaded.items():  # now, while the test's temporary files still exist
            cur = self.kernel_recs.get(n)
            if cur is None or not cur.complete:
                self.kernel_recs[n] = self._kernel_record(n, e, rec.opened, rec.where.get(n))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        t = self.tests.get(report.nodeid)
        if t is None:
            return
        t.duration = round(t.duration + float(report.duration or 0.0), 4)
        if report.skipped:
            t.skipped = True
        if report.when == "setup" and report.skipped:
            t.early_skip, t.outcome = True, "skipped"
        elif report.failed:
            t.outcome = "error" if report.when != "call" else "failed"
        elif report.when == "call" or (report.when == "teardown" and t.outcome is None):
            t.outcome = report.outcome if report.when == "call" else t.outcome

    # -- finish ----------------------------------------------------------------------------------
    def records(self) -> dict:
        """This process's records, repository-relative (what a worker sends up)."""
        paths = self._paths()
        out_files = {}
        for f, r in self.raw.items():
            out_files[f] = FileRecord(sorted(paths.files_of(r.opened) - {f}), sorted(paths.dirs_of(r.listed)),
                                      sorted(r.loaded), [self.head], r.opaque[0] if r.opaque else "")
        return {"tests": {n: vars(t) for n, t in self.tests.items()},
                "files": {f: vars(r) for f, r in out_files.items()},
                "kernels": {n: vars(k) for n, k in self.kernel_recs.items()},
                **(self.setups.records(paths, self.head) if self.setups is not None else {}),
                "selection": self.selection, "collected": self.collected, "partial": sorted(self.partial),
                "environments": {_env_id(self.env_snapshot): self.env_snapshot} if self.env_snapshot else {}}

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.st.is_worker:
            session.config.workeroutput[KEY] = self.records()  # type: ignore[attr-defined]
            return
        recs = [self.records()] + self.worker_records
        if self.selection is None:
            self.selection = next((r["selection"] for r in recs if r.get("selection")), None)
        sel = self.selection
        if sel is not None and self.report_mode:
            failed = [n for n in sel["deselected"] if (self.st.tests.get(n) or {}).get("outcome") in ("failed", "error")]
            sel["report"] = {"would_deselect": len(sel["deselected"]), "failed": failed,
                             "line": f"would deselect {len(sel['deselected'])}; of those {len(failed)} failed"}
        if sel and sel["n_deselected"] and not sel["n_selected"] and not self.report_mode and \
                session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            session.exitstatus = pytest.ExitCode.OK  # nothing affected: a green run, not "no tests"
        written = self._write_map(recs) if self.map_path else None
        self.st.impact = {"selection": sel, "map": written}

    def _write_map(self, recs: list[dict]) -> dict:
        m = ImpactMap(commit=self.head, rootdir=self.rootdir_rel or "")
        report = rel_to_root(self.st.opt("report_json"), self.root)
        m.outputs = [report] if report else []  # a later `kernelcache affected` ignores it too
        if self.root is not None:  # recorded from a dirty tree: those files count as changed later
            from kernelcache.impact.changes import changed_files
            from kernelcache.impact.select import matches

            dirty = changed_files(self.root, "HEAD")
            m.dirty = {self.head: sorted(p for p in dirty.changes if not matches(p, self.rules.ignore))}
        for r in recs:
            m.environments.update(r.get("environments") or {})
            for n, t in r["tests"].items():
                m.tests[n] = TestRecord(**t)
            for f, fr in r["files"].items():
                cur = m.files.get(f)
                m.files[f] = FileRecord(**fr) if cur is None else cur.united(FileRecord(**fr))
            for n, k in r["kernels"].items():
                if n not in m.kernels or (k["complete"] and not m.kernels[n].complete):
                    m.kernels[n] = KernelRecord(**k)
        impact_record.merge_setups(m, recs)
        names = {k for t in m.tests.values() for k in t.kernels} | set(self.st.declared) | set(self.st.kernels.results)
        for n in sorted(names - set(m.kernels)):  # named by markers or warmed, never loaded in a test
            res = self.st.kernels.results.get(n) or {}
            m.kernels[n] = self._kernel_record(n, res.get("entry_id") or "", set())
        from kernelcache.impact.impact_map import load

        old, _ = load(self.map_path)
        existing = set(repo_files(self.root)) if self.root is not None else None
        if old is not None and old.rootdir == m.rootdir:
            m = m.merged_into(old, existing, impact_record.whole_files(recs))
        save(self.map_path, m)
        return {"path": str(self.map_path), "tests": len(m.tests), "kernels": len(m.kernels),
                "recorded_now": sum(len(r["tests"]) for r in recs), "commit": m.commit}

    def _kernel_record(self, name: str, entry: str, opened: set[str],
                       where: tuple[str, str] | None = None) -> KernelRecord:
        """Inputs of kernel ``name`` from its manifest and its spec's root, as the load reported
        them (``where``: the root and the answering entry's directory, whichever way the load was
        answered — a recalled warm load opens no source). Without that: the manifest among the
        files the test opened, else in the session's cache, and the root where the test opened
        the sources the manifest names."""
        s = self.st.settings
        root_hint, edir = where or ("", "")
        man = read_manifest(Path(edir)) if edir else None
        if man is not None and entry and man.entry_id != entry:
            man = None
        if man is None and entry:
            tail = f"/{entry}/manifest.json"
            path = next((p for p in opened if p.replace(os.sep, "/").endswith(tail)), None)
            man = read_manifest(Path(path).parent) if path else None
        man = man or record.find_manifest(name, entry, s.cache_dir, s.prebuilt)
        paths = self._paths()
        try:
            spec = self.st.kernels.spec_for(name)
        except KernelUnavailable:
            spec = None
        if spec is not None:
            rec = record.kernel_record(name, paths, Path(spec.root), list(spec.sources), man,
                                       impact_record.spec_modules(self.st, self.root, name))
        else:
            root = Path(root_hint) if root_hint else None
            if root is None and man is not None and man.source_hashes:
                suffix = "/" + next(iter(man.source_hashes)).replace(os.sep, "/")
                hit = next((p for p in opened if p.replace(os.sep, "/").endswith(suffix)), None)
                root = Path(hit[: len(hit) - len(suffix)]) if hit else None
            rec = record.kernel_record(name, paths, root, [], man, [])
        rec.commit = self.head
        from kernelcache.impact.environment import kernel_identities

        rec.env = kernel_identities(man, paths.in_repository)
        return rec

    def _paths(self) -> "record.RepoPaths":
        if self._repo_files is None:
            self._repo_files = repo_files(self.root) if self.root is not None else []
        return record.RepoPaths(self.root or Path("/"), self._repo_files)

    # -- report ----------------------------------------------------------------------------------
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.st.is_worker:
            return
        tr = terminalreporter
        tr.write_sep("=", "kernelcache impact")
        sel = self.selection
        if self.since and sel is None:
            tr.write_line(f"--kc-affected-since {self.since}: no test was collected, nothing selected")
        elif sel is not None:
            tr.write_line(f"affected since {sel['since']} (merge base {sel['base'][:12] or '?'}): "
                          f"{len(sel['changed'])} changed file(s); selected {sel['n_selected']}, "
                          f"deselected {sel['n_deselected']} (selection took {sel['seconds']:.2f}s)")
            if sel.get("report"):
                rep = sel["report"]
                tr.write_line(f"report mode: {rep['line']}", **({"red": True} if rep["failed"] else {}))
                for n in rep["failed"]:
                    tr.write_line(f"  would have missed: {n}", red=True)
            if sel["everything"]:
                tr.write_line(f"running everything: {sel['everything']}", yellow=True)
            else:
                shown = list(sel["selected"].items())
                limit = len(shown) if config.option.verbose > 0 else _SHOW
                for nodeid, why in shown[:limit]:
                    tr.write_line(f"  {nodeid}: {why}")
                if len(shown) > limit:
                    tr.write_line(f"  ... and {len(shown) - limit} more (-v lists all; the JSON report has them)")
        written = (self.st.impact or {}).get("map")
        if written:
            tr.write_line(f"impact map {written['path']}: {written['tests']} test(s), {written['kernels']} "
                          f"kernel(s) ({written['recorded_now']} recorded now, commit {written['commit'][:12]})")


class _XdistImpact:
    """Controller side under xdist: hand the change set down, take the records up."""

    def __init__(self, plugin: ImpactPlugin):
        self.p = plugin

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[KEY] = {"changes": self.p.wire}

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        out = (getattr(node, "workeroutput", None) or {}).get(KEY)
        if not out:
            return
        self.p.worker_records.append(out)
        sel = out.get("selection")
        if sel and self.p.selection is None:
            self.p.selection = sel
        if sel and sel["deselected"] and not self.p.told_deselected and not self.p.report_mode:
            self.p.told_deselected = True
            self.p.config.hook.pytest_deselected(items=[_Deselected(n) for n in sel["deselected"]])


def _env_id(snapshot: dict) -> str:
    from kernelcache.impact.environment import env_id

    return env_id(snapshot)


def graph_cache(st: "SessionState") -> Path:
    """Where parsed imports are kept per blob id (beside the kernel cache, never in the repository)."""
    return Path(st.settings.cache_dir) / "impact" / "import-facts.json"

