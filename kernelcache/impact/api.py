"""One call from "REF and a map path" to a ready :class:`~.select.Selector` (plugin, CLI, CI).

Why the map is checked against the repository here: a record made at a commit this clone does
not have cannot be trusted (its dependencies may predate the base), and each record's commit is
diffed against the working tree (plus the files that were uncommitted when it was made), so
dependencies that moved in between are still covered, record by record. The plugin, ``kernelcache
affected`` and ``ci/affected-tests`` all come through :func:`make_rules` and :func:`prepare`: one
rule set, one ignore list, one answer.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from . import changes as changes_mod
from .changes import Change, ChangeSet
from .graph import ImportGraph, pyproject
from .impact_map import ImpactMap, load
from .select import Rules, Selector

if TYPE_CHECKING:  # pragma: no cover
    from ..base.settings import Settings


@dataclass
class Prepared:
    selector: Selector
    changes: ChangeSet
    map: ImpactMap | None
    map_problem: str
    seconds: float


def make_rules(root: Path | None, map_path: Path | str | None = None, report: Path | str | None = None,
               everything: Sequence[str] = (), inert: Sequence[str] = (),
               outputs: Sequence[Path | str] = ()) -> Rules:
    """The rules every entry point uses: built-in patterns plus the project's extras, and the
    run's own outputs ignored as changes: the map, the JSON report, and the directories the runs
    write (``outputs``: :func:`run_outputs`, a cache dir inside the checkout)."""
    from .select import EVERYTHING, INERT

    ignore = [p for p in (_rel(map_path, root), _rel(report, root)) if p]
    for d in outputs:
        rel = _rel(d, root)
        if rel:  # the directory's files, however deep (fnmatch's * crosses '/')
            ignore += [rel, f"{rel}/*"]
    return Rules(everything=EVERYTHING + tuple(everything), inert=INERT + tuple(inert), ignore=tuple(ignore))


def run_outputs(settings: "Settings") -> list[Path]:
    """Directories a test run writes that are no input of any test: the kernel cache and lock
    dir, FlashInfer's JIT workspace and torch's extensions dir where the environment puts them.
    In a checkout without a ``.gitignore`` entry for them, each of their files would otherwise be
    an untracked change no record explains: every later selection would run everything."""
    out = [Path(settings.cache_dir), Path(settings.lock_dir)]
    fi = os.environ.get("FLASHINFER_WORKSPACE_BASE")
    if fi:
        out.append(Path(fi) / ".cache" / "flashinfer")
    torch_ext = os.environ.get("TORCH_EXTENSIONS_DIR")
    if torch_ext:
        out.append(Path(torch_ext))
    return out


def project_rules(root: Path | None, map_path: Path | str | None = None, report: Path | str | None = None,
                  outputs: Sequence[Path | str] = ()) -> Rules:
    """:func:`make_rules` with the extras of ``[tool.pytest.ini_options]`` (the CLI and CI,
    which have no pytest config, read the same lists the plugin reads)."""
    ini = _ini(root) if root is not None else {}

    def lines(key: str) -> list[str]:
        v = ini.get(key, [])
        return [v] if isinstance(v, str) else [str(x) for x in v]
    return make_rules(root, map_path, report, lines("kernelcache_impact_everything"),
                      lines("kernelcache_impact_inert"), outputs)


def _rel(path: Path | str | None, root: Path | None) -> str | None:
    if not path or root is None:
        return None
    try:
        return Path(os.path.abspath(path)).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return None


def load_checked(root: Path | None, map_path: Path | str | None, rootdir_rel: str | None = None
                 ) -> tuple[ImpactMap | None, str]:
    """The map, or None and why it cannot be used (missing, corrupt, old, a record without a
    commit or made at a commit this clone lacks, another rootdir)."""
    if not map_path:
        return None, "no impact map given (--kc-impact-map / kernelcache_impact_map)"
    m, problem = load(map_path)
    if m is None:
        return None, problem
    commits = m.record_commits() | {m.commit}
    if "" in commits:
        return None, (f"impact map {map_path} has records without a commit (recorded outside a git "
                      "repository): they cannot be diffed")
    if root is not None:
        for c in sorted(commits):
            if not changes_mod.has_commit(root, c):
                return None, (f"impact map {map_path} has records made at commit {c[:12]}, which this clone "
                              "does not have (a stale map, or a shallow clone)")
    if rootdir_rel is not None and m.rootdir != rootdir_rel:
        return None, (f"impact map {map_path} was recorded with pytest rootdir {m.rootdir or '.'!r}, "
                      f"this run's is {rootdir_rel or '.'!r}")
    return m, ""


def changes_from_wire(data: dict) -> ChangeSet:
    cs = ChangeSet(Path(data["root"]) if data.get("root") else None, data.get("since", ""),
                   data.get("base", ""), data.get("head", ""), error=data.get("error"))
    for c in data.get("changes") or []:
        cs.changes[c["path"]] = Change(c["path"], c["kind"], c.get("note", ""))
    for rev, chs in (data.get("since_commit") or {}).items():
        cs.since_commit[rev] = {c["path"]: Change(c["path"], c["kind"], c.get("note", "")) for c in chs}
    return cs


def changes_to_wire(cs: ChangeSet) -> dict:
    return {"root": str(cs.root) if cs.root else "", "since": cs.since, "base": cs.base, "head": cs.head,
            "error": cs.error, "changes": [vars(c) for c in cs.changes.values()],
            "since_commit": {rev: [vars(c) for c in chs.values()] for rev, chs in cs.since_commit.items()}}


def compute_changes(start: Path | str, since: str, map_path: Path | str | None,
                    rootdir_rel: str | None = None) -> tuple[ChangeSet, ImpactMap | None, str]:
    """Changed files since ``since`` (plus, per record commit, since that commit and the files
    uncommitted when records were made there) and the map."""
    try:
        root: Path | None = changes_mod.repo_root(start)
    except changes_mod.GitError:
        root = None
    imap, problem = load_checked(root, map_path, rootdir_rel)
    cs = changes_mod.changed_files(start, since, also_since=imap.record_commits() if imap else ())
    if imap is not None and cs.known:
        for rev, paths in imap.dirty.items():
            chs = cs.since_commit.setdefault(rev, {})
            for p in paths:
                chs.setdefault(p, Change(p, changes_mod.MODIFIED, f"uncommitted when recorded at {rev[:12]}"))
    return cs, imap, problem


def prepare(start: Path | str, since: str, map_path: Path | str | None, rules: Rules | None = None,
            rootdir_rel: str | None = None, wire: dict | None = None, graph_cache: Path | str | None = None
            ) -> Prepared:
    """Everything selection needs; ``wire``: a change set computed by another process (xdist);
    ``graph_cache``: where parsed imports are kept per blob id (None: parse every file)."""
    t0 = time.perf_counter()
    if wire is not None:
        cs = changes_from_wire(wire)
        root = cs.root
        imap, problem = load_checked(root, map_path, rootdir_rel) if cs.known else (None, "")
    else:
        cs, imap, problem = compute_changes(start, since, map_path, rootdir_rel)
        root = cs.root
    graph = None
    if root is not None and cs.known:
        graph = ImportGraph(root, changes_mod.repo_files(root, "*.py"), cache=graph_cache)
    envc = None
    if imap is not None and cs.known:
        from .env_check import EnvCheck

        envc = EnvCheck(imap, Path(graph_cache).parent if graph_cache else None)
    sel = Selector(cs, imap, problem, graph, rules, envc)
    return Prepared(sel, cs, imap, problem, time.perf_counter() - t0)


def _ini(root: Path) -> dict:
    """``[tool.pytest.ini_options]`` of ``root/pyproject.toml`` ({} when absent)."""
    ini = pyproject(root).get("tool", {}).get("pytest", {}).get("ini_options", {})
    return ini if isinstance(ini, dict) else {}


def testpaths(root: Path) -> list[str]:
    """``[tool.pytest.ini_options] testpaths`` of ``root/pyproject.toml`` ([] when absent)."""
    tp = _ini(root).get("testpaths", [])
    return [tp] if isinstance(tp, str) else [str(t) for t in tp]


def test_files(root: Path, rules: Rules | None = None) -> list[str]:
    """Repository test files (file name patterns of the rules, under testpaths when set)."""
    from .select import TEST_FILES, matches

    pats = (rules.test_files if rules else TEST_FILES)
    roots = [t.strip("/") + "/" for t in testpaths(root)]
    return [p for p in changes_mod.repo_files(root, "*.py")
            if matches(p, pats) and (not roots or any(p.startswith(r) for r in roots))]


def affected(start: Path | str, since: str, map_path: Path | str | None, rules: Rules | None = None,
             graph_cache: Path | str | None = None, outputs: Sequence[Path | str] = (),
             witnesses: bool = False) -> dict:
    """File-level view without collecting (CLI, CI): the map's tests with decisions, plus test
    files the map has never seen (run whole). Test ids are the map's (pytest rootdir-relative).
    ``rules`` default: :func:`project_rules` (the map file itself and ``outputs`` ignored, the ini
    extras read). ``witnesses``: also the witness of every deselected test (``witness``), as the
    plugin's report carries them, for ``affected --verify``."""
    from .select import TestInfo

    t0 = time.perf_counter()
    if rules is None:
        try:
            rules = project_rules(changes_mod.repo_root(start), map_path, outputs=outputs)
        except changes_mod.GitError:
            rules = make_rules(None)
    p = prepare(start, since, map_path, rules, graph_cache=graph_cache)
    sel_map = p.map
    tests = [TestInfo(n, t.file) for n, t in sel_map.tests.items()] if sel_map else []
    root = p.changes.root
    files = test_files(root, rules) if root is not None else []
    if root is not None:
        tests = [t for t in tests if (root / t.file).exists()]
    sel = p.selector.select(tests)
    known = {t.file for t in tests}
    new_files = {f: "not in the impact map (a new test file, or one never recorded)" for f in files
                 if f not in known}
    if sel.everything:
        new_files = {f: sel.everything for f in files}
    by_file: dict[str, str] = dict(new_files)
    for t in tests:
        if t.nodeid in sel.selected:
            by_file.setdefault(t.file, sel.selected[t.nodeid])
    out = sel.as_dict()
    out.update({"since": since, "base": p.changes.base, "root": str(root or ""), "map": str(map_path or ""),
                "map_problem": p.map_problem, "rootdir": sel_map.rootdir if sel_map else "",
                "new_files": new_files, "files": dict(sorted(by_file.items())),
                "seconds": round(time.perf_counter() - t0, 3)})
    if witnesses:
        from . import witness

        out["witness"] = witness.build(p.selector, [t for t in tests if t.nodeid not in sel.selected])
    return out
