"""The impact map: per test, the kernels it used; per kernel, its recorded inputs; per test
file, the repository files its tests read. Versioned JSON, written atomically.

Why a file of its own (and not only the JSON report): CI keeps it as an artifact of the main
branch's last run and restores it in pull requests; a run that selected only some tests merges
its records into the map it read, so one partial run does not make every other test "unknown".
All paths are relative to the git repository root and ``/``-separated, so a map recorded in
one checkout serves another (a CPU runner's map serves the GPU runners).
"""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 3  # 2: per-record commits (provenance), dirty files per commit; 3: fixture, conftest records, opaque
KIND = "kernelcache-impact-map"


@dataclass
class KernelRecord:
    """What one kernel was built from, as far as the repository is concerned.

    ``root``: the spec's root relative to the repository ("" = the repository root itself);
    None when it lies outside the repository. ``inputs``: sources and every header the compiler
    read that lies in the repository, under the root or not (from the manifest's ``deps``);
    ``absent``: include probes in the repository that must stay absent (a new file there
    shadows a header); ``modules``: Python files that define the spec and load it. ``complete``
    is False when no manifest was available: then every file under ``root`` counts as an input.
    ``commit``: HEAD when this record was made (its inputs are diffed against that commit).
    """

    name: str
    root: str | None = None
    inputs: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    complete: bool = False
    entry_id: str = ""
    commit: str = ""
    # identity key -> what the key used outside the repository (environment.kernel_identities)
    env: dict[str, dict] = field(default_factory=dict)


@dataclass
class TestRecord:
    __test__ = False  # not a pytest test class
    nodeid: str
    file: str  # repository-relative test file
    kernels: list[str] = field(default_factory=list)  # markers + loaded while it ran
    outcome: str | None = None
    duration: float = 0.0
    early_skip: bool = False  # skipped before it could load anything (mapped by markers/imports)
    skipped: bool = False  # skipped at any point (it may load more where it runs to the end)
    commit: str = ""  # HEAD when recorded
    # keys of the fixtures it used (SetupRecord in ImpactMap.fixtures), whichever test set them up
    fixtures: list[str] = field(default_factory=list)
    opaque: str = ""  # why its own run cannot be seen ("" = it can): it always runs unless declared
    declared: bool = False  # its inputs are declared (kernel markers, kernelcache_impact_declared)
    inputs: list[str] = field(default_factory=list)  # declared input patterns (kernelcache_impact_declared)
    env: str = ""  # the digest of its run's Python environment (ImpactMap.environments)


@dataclass
class FileRecord:
    """What the tests of one file did beyond their imports (shared by the file's tests: a
    Python-level memo hides a second load, a subprocess hides a read), collection and import
    of the file included. ``commits``: every commit whose records were united into this one."""

    reads: list[str] = field(default_factory=list)  # repository files opened while they ran
    dirs: list[str] = field(default_factory=list)  # repository directories listed
    loaded: list[str] = field(default_factory=list)  # kernels loaded while they ran (and at collection)
    commits: list[str] = field(default_factory=list)
    opaque: str = ""  # why its import or collection cannot be seen (a subprocess, a read outside)

    def united(self, other: "FileRecord") -> "FileRecord":
        return FileRecord(sorted(set(self.reads) | set(other.reads)), sorted(set(self.dirs) | set(other.dirs)),
                          sorted(set(self.loaded) | set(other.loaded)),
                          sorted(set(self.commits) | set(other.commits)), other.opaque or self.opaque)


@dataclass
class SetupRecord:
    """What a fixture's setup (``ImpactMap.fixtures``, keyed ``baseid::name``) or a conftest's
    import (``ImpactMap.conftests``, keyed by its path) read, listed, loaded and whether it was
    opaque. A fixture's record applies to every test that uses it, a conftest's to every test
    under its directory: whichever test happened to set it up."""

    reads: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    loaded: list[str] = field(default_factory=list)
    opaque: str = ""
    commits: list[str] = field(default_factory=list)

    def united(self, other: "SetupRecord") -> "SetupRecord":
        return SetupRecord(sorted(set(self.reads) | set(other.reads)), sorted(set(self.dirs) | set(other.dirs)),
                           sorted(set(self.loaded) | set(other.loaded)), other.opaque or self.opaque,
                           sorted(set(self.commits) | set(other.commits)))


@dataclass
class ImpactMap:
    commit: str = ""  # HEAD at the last write (each record carries its own commit)
    dirty: dict[str, list[str]] = field(default_factory=dict)  # commit -> paths uncommitted when recorded there
    rootdir: str = ""  # pytest's rootdir relative to the repository
    created: str = ""
    tests: dict[str, TestRecord] = field(default_factory=dict)
    files: dict[str, FileRecord] = field(default_factory=dict)
    kernels: dict[str, KernelRecord] = field(default_factory=dict)
    fixtures: dict[str, SetupRecord] = field(default_factory=dict)  # "baseid::name" -> its setups' record
    conftests: dict[str, SetupRecord] = field(default_factory=dict)  # conftest path -> its import's record
    # repository paths the recording runs wrote (their JSON reports): outputs, never changes
    outputs: list[str] = field(default_factory=list)
    # digest -> a run's Python environment (interpreter, distributions and versions), per test record
    environments: dict[str, dict] = field(default_factory=dict)
    format: int = FORMAT

    # -- (de)serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"kind": KIND, "format": self.format, "commit": self.commit,
                "dirty": {c: sorted(ps) for c, ps in sorted(self.dirty.items())},
                "rootdir": self.rootdir, "created": self.created, "outputs": sorted(set(self.outputs)),
                "kernels": {n: asdict(k) for n, k in sorted(self.kernels.items())},
                "files": {f: asdict(r) for f, r in sorted(self.files.items())},
                "fixtures": {k: asdict(r) for k, r in sorted(self.fixtures.items())},
                "conftests": {k: asdict(r) for k, r in sorted(self.conftests.items())},
                "tests": {n: asdict(t) for n, t in sorted(self.tests.items())},
                "environments": {e: self.environments[e] for e in sorted({t.env for t in self.tests.values()})
                                 if e in self.environments}}

    @classmethod
    def from_dict(cls, data: Any) -> "ImpactMap":
        """Parse; raises ValueError naming what is wrong (never a half-read map)."""
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise ValueError("not a kernelcache impact map")
        fmt = data.get("format")
        if fmt != FORMAT:
            raise ValueError(f"impact map format {fmt!r}, this kernelcache reads format {FORMAT} (an old map)")
        try:
            m = cls(commit=str(data.get("commit") or ""), rootdir=str(data.get("rootdir") or ""),
                    created=str(data.get("created") or ""))
            m.dirty = {str(c): [str(p) for p in ps] for c, ps in _dict(data, "dirty").items()}
            m.outputs = [str(p) for p in (data.get("outputs") or []) if isinstance(p, str)]
            m.environments = {str(e): v for e, v in _dict(data, "environments").items() if isinstance(v, dict)}
            m.kernels = {str(n): KernelRecord(**_fields(KernelRecord, v)) for n, v in _dict(data, "kernels").items()}
            m.files = {str(f): FileRecord(**_fields(FileRecord, v)) for f, v in _dict(data, "files").items()}
            m.fixtures = {str(k): SetupRecord(**_fields(SetupRecord, v)) for k, v in _dict(data, "fixtures").items()}
            m.conftests = {str(k): SetupRecord(**_fields(SetupRecord, v)) for k, v in _dict(data, "conftests").items()}
            m.tests = {str(n): TestRecord(**_fields(TestRecord, v)) for n, v in _dict(data, "tests").items()}
        except (TypeError, AttributeError) as e:
            raise ValueError(f"malformed impact map: {e}") from None
        for t in m.tests.values():
            if not isinstance(t.file, str) or not isinstance(t.kernels, list):
                raise ValueError(f"malformed impact map: test {t.nodeid!r}")
        return m

    def record_commits(self) -> set[str]:
        """Every commit some record was made at ("" = a record without one: untrustworthy)."""
        out = {t.commit for t in self.tests.values()} | {k.commit for k in self.kernels.values()}
        for commits in [f.commits for f in self.files.values()] + \
                [r.commits for r in (*self.fixtures.values(), *self.conftests.values())]:
            out |= set(commits) if commits else {""}
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=0, sort_keys=False)

    # -- merging -----------------------------------------------------------------------------------
    def merged_into(self, older: "ImpactMap | None", existing: set[str] | None = None,
                    whole: set[str] | None = None) -> "ImpactMap":
        """This session's records over an older map's: tests that ran now replace theirs; the
        record of a test file in ``whole`` (every test it has now ran in this session) replaces
        the old one, with its tests (a test no longer there leaves); a file whose tests ran only
        in part has its record united with the old one (keeping every commit it came from); the
        rest is kept with its own commit unless its file no longer exists (``existing``:
        repository-relative files that exist now, None = keep all). A partial run never makes
        an older record look newer, and a full one forgets the commits it re-observed (else one
        conftest change since the first recording would select everything forever)."""
        if older is None:
            return self
        out = ImpactMap(commit=self.commit, rootdir=self.rootdir, created=self.created)
        whole = whole or set()

        def keep(path: str) -> bool:
            return (existing is None or path in existing) and path not in whole

        out.tests = {n: t for n, t in older.tests.items() if keep(t.file)}
        out.tests.update(self.tests)
        out.files = {f: r for f, r in older.files.items() if keep(f)}
        for f, r in self.files.items():  # a file whose tests ran only in part keeps the others' records
            old = out.files.get(f)
            out.files[f] = r if old is None else old.united(r)
        out.kernels = dict(older.kernels)
        for n, k in self.kernels.items():
            if k.complete or n not in out.kernels or not out.kernels[n].complete:
                out.kernels[n] = k
        _merge_setups(out, older, self, existing)
        out.outputs = sorted(set(older.outputs) | set(self.outputs))
        out.environments = {**older.environments, **self.environments}  # written: those a test refers to
        used = out.record_commits()
        out.dirty = {c: sorted(set(older.dirty.get(c, [])) | set(self.dirty.get(c, [])))
                     for c in used if older.dirty.get(c) or self.dirty.get(c)}
        return out


def _merge_setups(out: ImpactMap, older: ImpactMap, new: ImpactMap, existing: set[str] | None) -> None:
    """Fixture records: one that this session recorded replaces the old one when every test that
    uses it (in the merged map) ran now, else the two are united (a parametrized fixture set up
    here with one parameter keeps the other's reads); a record no test uses any more leaves.
    Conftest records: this session imported the conftest whole, so its record replaces the old
    one; one whose conftest is gone leaves."""
    users: dict[str, set[str]] = {}
    for n, t in out.tests.items():
        for k in t.fixtures:
            users.setdefault(k, set()).add(n)
    for k in users:
        old, now = older.fixtures.get(k), new.fixtures.get(k)
        if now is None:
            if old is not None:
                out.fixtures[k] = old
        elif old is None or users[k] <= set(new.tests):
            out.fixtures[k] = now
        else:
            out.fixtures[k] = old.united(now)
    out.conftests = {c: r for c, r in older.conftests.items() if existing is None or c in existing}
    out.conftests.update(new.conftests)


def _dict(data: dict, key: str) -> dict:
    v = data.get(key, {})
    if not isinstance(v, dict):
        raise ValueError(f"malformed impact map: {key!r} is not an object")
    return v


def _fields(cls: type, v: Any) -> dict:
    if not isinstance(v, dict):
        raise TypeError(f"expected an object, got {type(v).__name__}")
    known = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return {k: val for k, val in v.items() if k in known}


def load(path: Path | str) -> tuple[ImpactMap | None, str]:
    """(map, "") or (None, why it cannot be used): missing, unreadable, corrupt, old format."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        return None, f"no impact map at {p}"
    except OSError as e:
        return None, f"impact map {p} unreadable: {e}"
    try:
        data = json.loads(text)
    except ValueError as e:
        return None, f"impact map {p} is corrupt (not JSON: {e})"
    try:
        return ImpactMap.from_dict(data), ""
    except ValueError as e:
        return None, f"impact map {p}: {e}"


def save(path: Path | str, m: ImpactMap) -> None:
    """Write atomically (temp file + rename): a reader never sees half a map."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if not m.created:
        m.created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp")
    tmp.write_text(m.dumps())
    os.replace(tmp, p)
