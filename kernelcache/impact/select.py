"""The selection rules: which tests a change can affect, each kept test with its reason.

Safe by default: whatever the rules cannot reason about runs. In order —
1. changes unknown (no git, REF missing in a shallow clone): everything;
2. a conftest, build metadata, CI config, the plugin (and what it imports): everything;
3. no usable map (missing, corrupt, old format, recorded at a commit this clone lacks): everything;
4. a changed file no rule can classify: everything;
then per test: its test file changed; the map never saw it; its Python import closure holds a
changed module; it used a kernel whose recorded inputs changed; its file's tests read or
listed a changed file. Otherwise it is deselected.
"""
from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from .changes import ADDED, DELETED, Change, ChangeSet
from .graph import Closure, ImportGraph, conftests_for
from .impact_map import FileRecord, ImpactMap, KernelRecord, TestRecord
from .setups import declared_reason, opaque_reason, places, setup_reason, setups_of, with_setups

if TYPE_CHECKING:  # pragma: no cover
    from .env_check import EnvCheck

# A pattern without "/" matches a file name anywhere; with "/" the repository path ("*" spans "/").
EVERYTHING = ("conftest.py", "pyproject.toml", "setup.py", "setup.cfg", "tox.ini", "pytest.ini",
              "MANIFEST.in", "requirements*.txt", ".ci/*", "ci/*", ".github/*")
INERT = ("*.md", "*.rst", "docs/*", "LICENSE*", "NOTICE*", "AUTHORS*", ".gitignore", "*.png", "*.svg",
         "*.jpg", "*.pyc", "benchmarks/*")
TEST_FILES = ("test_*.py", "*_test.py")
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the kernelcache package (plugin + this package)


def matches(path: str, patterns: Iterable[str]) -> str | None:
    """The first pattern ``path`` matches (see EVERYTHING for the syntax)."""
    name = path.rpartition("/")[2]
    for pat in patterns:
        if fnmatch.fnmatchcase(path if "/" in pat else name, pat):
            return pat
    return None


@dataclass
class TestInfo:
    """A collected test: node id, repository-relative file, kernels its markers name now."""
    __test__ = False  # not a pytest test class

    nodeid: str
    file: str
    kernels: Sequence[str] = ()


@dataclass
class Selection:
    everything: str | None = None  # why every test runs (None: per-test decisions)
    selected: dict[str, str] = field(default_factory=dict)  # nodeid -> reason
    deselected: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # "path (kind)" lines

    def as_dict(self) -> dict:
        return {"everything": self.everything, "selected": dict(self.selected), "deselected": list(self.deselected),
                "n_selected": len(self.selected), "n_deselected": len(self.deselected), "changed": self.changed}


@dataclass
class Rules:
    everything: Sequence[str] = EVERYTHING
    inert: Sequence[str] = INERT
    test_files: Sequence[str] = TEST_FILES
    ignore: Sequence[str] = ()  # repository paths that are outputs of the run (map, report)


def plugin_files(graph: ImportGraph, root: Path) -> dict[str, str]:
    """The pytest plugin and this package, with everything they import (statically, outside
    TYPE_CHECKING): a change there can change every test. Path -> import chain. Both the
    package that runs this code, when it lies in the repository, and a ``kernelcache`` package
    the repository holds (its tests run that one, whichever selects)."""
    pkgs = {p[: -len("/pytest_plugin/__init__.py")] for p in graph.nodes
            if p == "kernelcache/pytest_plugin/__init__.py" or p.endswith("/kernelcache/pytest_plugin/__init__.py")}
    try:
        pkgs.add(PACKAGE_DIR.relative_to(Path(root).resolve()).as_posix())
    except ValueError:
        pass  # kernelcache is installed outside this repository
    if not pkgs:
        return {}
    starts = [f for pkg in sorted(pkgs) for f in graph.package_files(f"{pkg}/pytest_plugin")
              + graph.package_files(f"{pkg}/impact")]
    c = graph.closure(starts, dynamic=False)
    return {p: c.chain(p) for p in c.files}


class Selector:
    """Applies the rules for one change set, one map and one import graph."""

    def __init__(self, changes: ChangeSet, imap: ImpactMap | None, map_problem: str, graph: ImportGraph | None,
                 rules: Rules | None = None, env: "EnvCheck | None" = None):
        self.cs = changes
        self.env = env  # the environment rules (None: the repository's changes only)
        self.map = imap
        self.map_problem = map_problem
        self.graph = graph
        self.rules = rules or Rules()
        self.changed = self._ignoring(changes.union())  # every change any record can see
        self._by_commits: dict[frozenset[str], dict[str, Change]] = {}
        self._closures: dict[tuple[str, ...], Closure] = {}
        self._answers: dict[tuple, str | None] = {}  # (what, file or kernel, commits) -> reason
        self._read_by_compiler = {p for k in (imap.kernels.values() if imap else ()) for p in k.inputs}
        self._placed = self._placed_by_kernels()
        self.everything = self._global_reason()

    def _ignoring(self, chs: dict[str, Change]) -> dict[str, Change]:
        """Without the runs' own outputs: this run's (the rules) and the recording runs' (the map's)."""
        ignore = (*self.rules.ignore, *(self.map.outputs if self.map is not None else ()))
        return {p: c for p, c in chs.items() if not matches(p, ignore)}

    def changes_for(self, commits: set[str]) -> dict[str, Change]:
        """The changes records made at ``commits`` must be checked against: since the base, and
        since each of those commits (with the files uncommitted when recorded there)."""
        key = frozenset(commits)
        got = self._by_commits.get(key)
        if got is None:
            got = self._by_commits[key] = self._ignoring(self.cs.union(set(commits)))
        return got

    # -- global ----------------------------------------------------------------------------------
    def _global_reason(self) -> str | None:
        if not self.cs.known:
            return f"changed files unknown: {self.cs.error}"
        for p, c in sorted(self.changed.items()):
            pat = matches(p, self.rules.everything)
            if pat:
                what = "a conftest" if pat == "conftest.py" else "CI config" if "/" in pat else "build metadata"
                return f"{c.describe()} changed: {what} can change every test"
        if self.graph is not None:
            plugin = plugin_files(self.graph, self.cs.root or Path("."))
            for p, c in sorted(self.changed.items()):
                if p in plugin:
                    return f"{c.describe()} changed: the pytest plugin runs it in every test ({plugin[p]})"
        if self.map is None:
            return f"no usable impact map: {self.map_problem}"
        for p, c in sorted(self.changed.items()):
            if not self._classified(p, c):
                return (f"cannot tell which tests {c.describe()} affects (not a test, Python module, recorded "
                        "kernel input or test read, nor docs): running everything")
        if self.env is not None and self.graph is not None:
            from .env_check import top_names

            return self.env.global_reason(top_names(n for node in self.graph.nodes.values() for n in node.unresolved))
        return None

    def _placed_by_kernels(self) -> dict[str, set[str]]:
        """Directories whose files a kernel's record places (kernel -> dirs): the directories of
        its recorded inputs, and of its sources without a manifest (where its compiler would
        look first). A file there that the kernel did not read is its data, not another kernel's."""
        out: dict[str, set[str]] = {}
        for n, k in (self.map.kernels.items() if self.map else ()):
            out[n] = {posixpath.dirname(p) for p in k.inputs}
        return out

    def _other_kernel_places(self, name: str, p: str) -> bool:
        """Does a kernel other than ``name`` place ``p`` (read it, or hold its directory)?"""
        d = posixpath.dirname(p)
        return any(n != name and (d in dirs or p in self.map.kernels[n].inputs)  # type: ignore[union-attr]
                   for n, dirs in self._placed.items())

    def _classified(self, p: str, c: Change) -> bool:
        m = self.map
        assert m is not None
        if p.endswith(".py") or matches(p, self.rules.test_files):
            return True
        if matches(p, self.rules.inert):
            return True
        for k in m.kernels.values():
            if p in k.inputs or p in k.absent or (k.root is not None and _under(p, k.root)):
                return True
        for f in m.files.values():
            if p in f.reads or (c.kind in (ADDED, DELETED) and posixpath.dirname(p) in f.dirs):
                return True
        return places(m, p, c)  # a fixture's or conftest's read, a declared input

    # -- per test --------------------------------------------------------------------------------
    def select(self, tests: Iterable[TestInfo]) -> Selection:
        sel = Selection(self.everything, changed=[c.describe() for _, c in sorted(self.changed.items())])
        for t in tests:
            reason = self.everything or self.reason(t)
            if reason:
                sel.selected[t.nodeid] = reason
            else:
                sel.deselected.append(t.nodeid)
        return sel

    def _kernels_of(self, t: TestInfo, rec: TestRecord, frec: FileRecord | None) -> list[str]:
        """What ``t`` uses: its markers, what it and its file's tests loaded; a test that never
        loaded anything, or skipped (it may load more where it runs on), also every kernel whose
        spec module its file imports itself."""
        loaded = [*rec.kernels, *(frec.loaded if frec else ())]
        names = [*t.kernels, *loaded]
        if not loaded or rec.early_skip or rec.skipped:
            names += self._kernels_imported(t.file)
        return list(dict.fromkeys(names))

    def reason(self, t: TestInfo) -> str | None:
        """Why ``t`` must run, or None when no change can affect it."""
        assert self.map is not None
        c = self.changed.get(t.file)
        if c is not None:
            return f"its test file {c.describe()} changed"
        rec = self.map.tests.get(t.nodeid)
        if rec is None:
            return "not in the impact map (a new test, or one never recorded)"
        frec = self.map.files.get(rec.file)
        setups = setups_of(self.map, rec)  # its fixtures' and conftests' records
        why = opaque_reason(rec, frec, setups)
        if why:
            return why
        frec = with_setups(frec, setups)
        kernels = self._kernels_of(t, rec, frec)
        commits = {rec.commit, *(frec.commits if frec else ())}
        commits |= {kr.commit for n in kernels if (kr := self.map.kernels.get(n)) is not None}
        ckey = frozenset(commits)
        changed = self.changes_for(commits)
        why = self._memo(("imports", t.file, ckey), lambda: self._imports(t.file, changed))
        if why:
            return why
        if self.env is not None:
            env = self.env
            why = self._memo(("env", t.file, rec.env), lambda: env.test_reason(rec, self._third_party(t.file)))
            if why:
                return why
        for k in kernels:
            why = self._memo(("kernel", k, ckey), lambda: self._kernel(k, changed))  # noqa: B023 (called here)
            if why:
                return why
        why = setup_reason(setups, changed) or declared_reason(rec, changed)
        if why:
            return why
        if frec is not None:
            for p in frec.reads:
                if p in changed:
                    return f"its file's tests read {changed[p].describe()}"
            for p, c in changed.items():
                if c.kind in (ADDED, DELETED) and posixpath.dirname(p) in frec.dirs:
                    return f"its file's tests list {posixpath.dirname(p) or '.'}/, where {c.describe()}"
        return None

    def _memo(self, key: tuple, compute: Callable[[], str | None]) -> str | None:
        """Per test file and per kernel, the answer for one set of record commits is the same
        for every test: computed once (a suite has thousands of tests, tens of files)."""
        try:
            return self._answers[key]
        except KeyError:
            got = self._answers[key] = compute()
            return got

    def _closure(self, starts: tuple[str, ...]) -> Closure:
        got = self._closures.get(starts)
        if got is None:
            assert self.graph is not None
            got = self._closures[starts] = self.graph.closure(starts)
        return got

    def _imports(self, test_file: str, changed: dict[str, Change]) -> str | None:
        if self.graph is None:
            return None
        starts = (test_file, *conftests_for(test_file, self.graph.nodes))
        clo = self._closure(starts)
        for p, c in sorted(changed.items()):
            if p in clo.files and p != test_file:
                return f"imports {c.describe()} ({clo.chain(p)})"
            if c.kind == DELETED and self.graph.module_names(p) & clo.names:
                return f"imports {', '.join(sorted(self.graph.module_names(p)))}, whose file {c.describe()}"
        return None

    def _third_party(self, test_file: str) -> set[str]:
        """Top-level names the test file's import closure imports from outside the repository."""
        if self.graph is None:
            return set()
        from .env_check import top_names

        return top_names(self._closure((test_file, *conftests_for(test_file, self.graph.nodes))).names)

    def _kernels_imported(self, test_file: str) -> list[str]:
        """Kernels whose spec module the test file imports itself (mapped through imports, e.g.
        a GPU test skipped on a CPU runner before it loaded anything)."""
        assert self.map is not None
        node = self.graph.nodes.get(test_file) if self.graph is not None else None
        if node is None:
            return []
        direct = node.static | node.dynamic
        return [n for n, k in self.map.kernels.items() if set(k.modules) & direct]

    def _kernel(self, name: str, changed: dict[str, Change]) -> str | None:
        assert self.map is not None
        k: KernelRecord | None = self.map.kernels.get(name)
        if k is None:
            return f"uses {name}, which the impact map does not describe"
        if k.root is None and not k.complete:
            return f"uses {name}, whose inputs were not recorded (no manifest or source root found)"
        for p in k.inputs:
            if p in changed:
                return f"uses {name}, whose input {changed[p].describe()} changed"
        for p in k.absent:
            if p in changed and changed[p].kind == ADDED:
                return f"uses {name}: {changed[p].describe()} appeared where its compiler looked for a header"
        if k.root is not None:
            # without a manifest every file under the root counts; with one, a file no compiler
            # read that changed under the root (a data file next to the sources), and a file that
            # appears or disappears next to its sources and headers (a spec may list a directory)
            dirs = {posixpath.dirname(p) for p in k.inputs} | {k.root}
            for p, c in sorted(changed.items()):
                if not k.complete and _under(p, k.root):
                    return f"uses {name}: {c.describe()} (no manifest was recorded: every file under its root counts)"
                if not k.complete or matches(p, self.rules.inert) or p.endswith(".py"):
                    continue
                if _under(p, k.root) and p not in self._read_by_compiler and not (
                        posixpath.dirname(p) not in dirs and self._other_kernel_places(name, p)):
                    return f"uses {name}: {c.describe()} under its source root, read by no compiler"
                if c.kind in (ADDED, DELETED) and posixpath.dirname(p) in dirs:
                    return f"uses {name}: {c.describe()} (a file appeared or disappeared next to its sources)"
        if k.modules and self.graph is not None:
            clo = self._closure(tuple(k.modules))
            for p, c in sorted(changed.items()):
                if p in clo.files:
                    return f"uses {name}, whose Python side changed: {c.describe()} ({clo.chain(p)})"
        if self.env is not None:
            return self.env.kernel_reason(k)
        return None


def _under(path: str, root: str) -> bool:
    return root == "" or path.startswith(root.rstrip("/") + "/")
