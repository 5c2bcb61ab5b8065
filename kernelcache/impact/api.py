"""One call from "REF and a map path" to a ready :class:`~.select.Selector` (plugin, CLI, CI).

Why the map is checked against the repository here: a map recorded at a commit this clone does
not have cannot be trusted (its dependencies may predate the base), and the changes between
the map's commit and now are added to the change set, so dependencies that moved in between
are still covered.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from . import changes as changes_mod
from .changes import Change, ChangeSet
from .graph import ImportGraph
from .impact_map import ImpactMap, load
from .select import Rules, Selector


@dataclass
class Prepared:
    selector: Selector
    changes: ChangeSet
    map: ImpactMap | None
    map_problem: str
    seconds: float


def load_checked(root: Path | None, map_path: Path | str | None, rootdir_rel: str | None = None
                 ) -> tuple[ImpactMap | None, str]:
    """The map, or None and why it cannot be used (missing, corrupt, old, foreign commit/rootdir)."""
    if not map_path:
        return None, "no impact map given (--kc-impact-map / kernelcache_impact_map)"
    m, problem = load(map_path)
    if m is None:
        return None, problem
    if root is not None and m.commit and not changes_mod.has_commit(root, m.commit):
        return None, (f"impact map {map_path} was recorded at commit {m.commit[:12]}, which this clone "
                      "does not have (a stale map, or a shallow clone)")
    if not m.commit:
        return None, f"impact map {map_path} records no commit (recorded outside a git repository)"
    if rootdir_rel is not None and m.rootdir != rootdir_rel:
        return None, (f"impact map {map_path} was recorded with pytest rootdir {m.rootdir or '.'!r}, "
                      f"this run's is {rootdir_rel or '.'!r}")
    return m, ""


def changes_from_wire(data: dict) -> ChangeSet:
    cs = ChangeSet(Path(data["root"]) if data.get("root") else None, data.get("since", ""),
                   data.get("base", ""), data.get("head", ""), error=data.get("error"))
    for c in data.get("changes") or []:
        cs.changes[c["path"]] = Change(c["path"], c["kind"], c.get("note", ""))
    return cs


def changes_to_wire(cs: ChangeSet) -> dict:
    return {"root": str(cs.root) if cs.root else "", "since": cs.since, "base": cs.base, "head": cs.head,
            "error": cs.error, "changes": [vars(c) for c in cs.changes.values()]}


def compute_changes(start: Path | str, since: str, map_path: Path | str | None,
                    rootdir_rel: str | None = None) -> tuple[ChangeSet, ImpactMap | None, str]:
    """Changed files since ``since`` (plus since the map's commit, and its dirty files) and the map."""
    try:
        root: Path | None = changes_mod.repo_root(start)
    except changes_mod.GitError:
        root = None
    imap, problem = load_checked(root, map_path, rootdir_rel)
    cs = changes_mod.changed_files(start, since, also_since=imap.commit if imap else "")
    if imap is not None and cs.known:
        for p in imap.dirty:
            cs.add(Change(p, changes_mod.MODIFIED, "uncommitted when the impact map was recorded"))
    return cs, imap, problem


def prepare(start: Path | str, since: str, map_path: Path | str | None, rules: Rules | None = None,
            rootdir_rel: str | None = None, wire: dict | None = None) -> Prepared:
    """Everything selection needs; ``wire``: a change set computed by another process (xdist)."""
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
        graph = ImportGraph(root, changes_mod.repo_files(root, "*.py"))
    sel = Selector(cs, imap, problem, graph, rules)
    return Prepared(sel, cs, imap, problem, time.perf_counter() - t0)


def testpaths(root: Path) -> list[str]:
    """``[tool.pytest.ini_options] testpaths`` of ``root/pyproject.toml`` ([] when absent)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        return []
    try:
        data = tomllib.loads((Path(root) / "pyproject.toml").read_text())
    except (OSError, ValueError):
        return []
    tp = data.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("testpaths", [])
    return [tp] if isinstance(tp, str) else [str(t) for t in tp]


def test_files(root: Path, rules: Rules | None = None) -> list[str]:
    """Repository test files (file name patterns of the rules, under testpaths when set)."""
    from .select import TEST_FILES, matches

    pats = (rules.test_files if rules else TEST_FILES)
    roots = [t.strip("/") + "/" for t in testpaths(root)]
    return [p for p in changes_mod.repo_files(root, "*.py")
            if matches(p, pats) and (not roots or any(p.startswith(r) for r in roots))]


def affected(start: Path | str, since: str, map_path: Path | str | None, rules: Rules | None = None) -> dict:
    """File-level view without collecting (CLI, CI): the map's tests with decisions, plus test
    files the map has never seen (run whole). Test ids are the map's (pytest rootdir-relative)."""
    from .select import TestInfo

    t0 = time.perf_counter()
    p = prepare(start, since, map_path, rules)
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
    return out
