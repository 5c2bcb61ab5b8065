"""The records a test depends on beyond its own and its file's: the fixtures it used (any scope,
whichever test set them up), the conftests above its file (what they did at import), and what
it declared. Also the rule that makes selection fail closed: an opaque test always runs.

Why a module of its own: the selector (:mod:`.select`) asks three questions of these records —
is the test opaque, which extra reads, listings and kernels does it depend on, did a declared
input change — and each is answered the same way for the plugin and the CLI.
"""
from __future__ import annotations

import fnmatch
import posixpath
from typing import Iterable

from .changes import ADDED, DELETED, Change
from .impact_map import FileRecord, ImpactMap, SetupRecord, TestRecord

DECLARE_HINT = "declare its inputs (kernel markers, ini kernelcache_impact_declared) to select it by them"


def setups_of(m: ImpactMap, rec: TestRecord) -> list[tuple[str, SetupRecord]]:
    """(label, record) of every fixture ``rec`` used and every conftest above its file."""
    out = [(f"its fixture {k}", m.fixtures[k]) for k in rec.fixtures if k in m.fixtures]
    for c, r in sorted(m.conftests.items()):
        d = posixpath.dirname(c)
        if d == "" or rec.file.startswith(d + "/"):
            out.append((f"{c} (at import)", r))
    return out


def opaque_reason(rec: TestRecord, frec: FileRecord | None, setups: Iterable[tuple[str, SetupRecord]]) -> str | None:
    """Why ``rec`` must always run: it, its file's collection, a fixture or a conftest it depends
    on did what no record sees; None when nothing did, or its inputs are declared."""
    if rec.declared:
        return None
    if rec.opaque:
        return f"opaque: it {rec.opaque}; {DECLARE_HINT}"
    if frec is not None and frec.opaque:
        return f"opaque: importing its test file {frec.opaque}; {DECLARE_HINT}"
    for label, r in setups:
        if r.opaque:
            return f"opaque: {label} {r.opaque}; {DECLARE_HINT}"
    return None


def with_setups(frec: FileRecord | None, setups: list[tuple[str, SetupRecord]]) -> FileRecord | None:
    """The file record united with the setups' reads, listings, loads and commits (what the
    selector checks kernels and commits against)."""
    if not setups:
        return frec
    out = FileRecord() if frec is None else FileRecord(list(frec.reads), list(frec.dirs), list(frec.loaded),
                                                       list(frec.commits), frec.opaque)
    for _, r in setups:
        out = out.united(FileRecord(r.reads, r.dirs, r.loaded, r.commits))
    return out


def setup_reason(setups: Iterable[tuple[str, SetupRecord]], changed: dict[str, Change]) -> str | None:
    """A changed file a fixture or conftest read, or a file added or deleted where one listed."""
    for label, r in setups:
        for p in r.reads:
            if p in changed:
                return f"{label} read {changed[p].describe()}"
        dirs = set(r.dirs)
        for p, c in sorted(changed.items()):
            if c.kind in (ADDED, DELETED) and posixpath.dirname(p) in dirs:
                return f"{label} listed {posixpath.dirname(p) or '.'}/, where {c.describe()}"
    return None


def declared_reason(rec: TestRecord, changed: dict[str, Change]) -> str | None:
    """A changed file that matches one of the test's declared input patterns."""
    for p, c in sorted(changed.items()):
        pat = match(p, rec.inputs)
        if pat:
            return f"its declared input {c.describe()} changed ({pat})"
    return None


def places(m: ImpactMap, p: str, c: Change) -> bool:
    """Does a fixture's or conftest's record, or a declared input pattern, place the changed ``p``?"""
    for r in (*m.fixtures.values(), *m.conftests.values()):
        if p in r.reads or (c.kind in (ADDED, DELETED) and posixpath.dirname(p) in r.dirs):
            return True
    return match(p, {pat for t in m.tests.values() for pat in t.inputs}) is not None


def match(path: str, patterns: Iterable[str]) -> str | None:
    """The first pattern ``path`` matches: without "/" a file name anywhere, with "/" the
    repository path ("*" spans "/"), as the selector's other pattern lists."""
    name = path.rpartition("/")[2]
    for pat in sorted(patterns):
        if fnmatch.fnmatchcase(path if "/" in pat else name, pat):
            return pat
    return None


def parse_declared(lines: Iterable[str]) -> list[tuple[str, list[str]]]:
    """``kernelcache_impact_declared`` lines, ``TEST-ID-GLOB = INPUT-PATTERN ...``; raises
    ValueError naming a line without ``=`` or without patterns."""
    out = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        glob, eq, pats = line.partition("=")
        if not eq or not glob.strip() or not pats.split():
            raise ValueError(f"kernelcache_impact_declared: {line!r} is not 'TEST-ID-GLOB = INPUT-PATTERN ...'")
        out.append((glob.strip(), pats.split()))
    return out


def declared_for(nodeid: str, declared: list[tuple[str, list[str]]]) -> list[str]:
    """The input patterns the ini list declares for test ``nodeid``."""
    return sorted({p for glob, pats in declared if fnmatch.fnmatchcase(nodeid, glob) for p in pats})
