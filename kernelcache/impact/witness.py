"""Witnesses: for every deselected test, the inputs whose disjointness from the change justified
it — files with their git blob ids (``None``: must stay absent), directory listings, kernels with
their entry ids and input digests, environment identities — and their replay
(``kernelcache affected --verify REPORT``).

Why: a deselection is a claim ("nothing this test depends on changed"); a witness makes it
checkable later, on another machine, without trusting the selector that made it. Verification
recomputes every value on the current tree and environment: a witness that no longer holds
names the test and the input (``csrc/a.h blob 1a2b3c4d5e6f -> 6f5e4d3c2b1a``). Inputs shared by
many tests (a kernel, a test file's imports) are one group, referred to by id.
"""
from __future__ import annotations

import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from . import environment as env
from .changes import repo_files, repo_root
from .graph import conftests_for
from .graph_scan import blob_id
from .select import EVERYTHING, matches, plugin_files
from .setups import match, setups_of, with_setups

if TYPE_CHECKING:  # pragma: no cover
    from .select import Selector, TestInfo

FORMAT = 1


def _blob(root: Path, rel: str) -> str | None:
    try:
        return blob_id((root / rel).read_bytes())
    except OSError:
        return None


def _listing(files: Iterable[str], d: str) -> str:
    return env.digest(sorted(f for f in files if posixpath.dirname(f) == d))


def _by_dir(files: Iterable[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in files:
        out.setdefault(posixpath.dirname(f), []).append(f)
    return out


class Builder:
    """Witness groups for one selection (each group computed once)."""

    def __init__(self, sel: "Selector"):
        self.sel = sel
        self.root = Path(sel.cs.root or ".")
        self.files = repo_files(self.root)
        self.by_dir = _by_dir(self.files)
        self.groups: dict[str, dict[str, Any]] = {}
        self.tests: dict[str, list[str]] = {}
        self._installed: Any = None
        self._blobs: dict[str, str | None] = {}  # path -> blob id (a file is in many groups)
        self._dists: dict[str, env.Identity] = {}  # distribution -> its identity now

    def _group(self, gid: str, files: Iterable[str] = (), dirs: Iterable[str] = (),
               identities: dict[str, env.Identity] | None = None, **extra: Any) -> str:
        if gid not in self.groups:
            self.groups[gid] = {"files": {p: self._blob(p) for p in sorted(set(files))},
                                "dirs": {d: _listing(self.by_dir.get(d, ()), d) for d in sorted(set(dirs))},
                                "env": identities or {}, **extra}
        return gid

    def _blob(self, p: str) -> str | None:
        if p not in self._blobs:
            self._blobs[p] = _blob(self.root, p)
        return self._blobs[p]

    def add(self, t: "TestInfo") -> None:
        s = self.sel
        assert s.map is not None and s.graph is not None
        rec = s.map.tests[t.nodeid]
        frec = s.map.files.get(rec.file)
        gids = [self._global()]
        starts = (t.file, *conftests_for(t.file, s.graph.nodes))
        clo = s._closure(starts)
        gids.append(self._group(f"imports:{t.file}", [t.file, *clo.files]))
        gids.append(self._python(f"python:{t.file}:{rec.env}", s._third_party(t.file)))
        if frec is not None:
            gids.append(self._group(f"reads:{rec.file}", frec.reads, frec.dirs))
        setups = setups_of(s.map, rec)  # its fixtures' and conftests' records, whoever set them up
        for label, r in setups:
            gids.append(self._group(f"setup:{label}", r.reads, r.dirs))
        if rec.inputs:  # declared inputs: the files they match now, and where one could be added
            found = [f for f in self.files if match(f, rec.inputs)]
            gids.append(self._group(f"declared:{t.nodeid}", found, {posixpath.dirname(f) for f in found}))
        for name in s._kernels_of(t, rec, with_setups(frec, setups)):
            gids.append(self._kernel(name))
        self.tests[t.nodeid] = gids

    def _global(self) -> str:
        """What every test depends on: the plugin's modules, build metadata, CI config."""
        s = self.sel
        if "global" in self.groups:
            return "global"
        plugin = plugin_files(s.graph, self.root) if s.graph is not None else {}
        meta = [f for f in self.files if matches(f, EVERYTHING) and not f.endswith("conftest.py")]
        return self._group("global", [*plugin, *meta])

    def _python(self, gid: str, names: set[str]) -> str:
        if gid in self.groups:
            return gid
        from .env_check import Installed

        if self._installed is None:
            self._installed = Installed()
        inst = self._installed
        dists = {n for n in inst.dirs if inst.top_modules(n) & names}
        ids: dict[str, env.Identity] = {"python": {"kind": "python", "name": "Python", "version": env.python_version(),
                                                   "digest": ""}}
        for n in sorted(inst.closure(dists)):
            if n not in self._dists:
                found = env.find_dist(n)
                self._dists[n] = {"kind": "dist", "name": n, "version": found[0] if found else env.ABSENT,
                                  "digest": found[1] if found else ""}
            ids[f"dist:{n}"] = self._dists[n]
        return self._group(gid, identities=ids)

    def _kernel(self, name: str) -> str:
        gid = f"kernel:{name}"
        if gid in self.groups:
            return gid
        s = self.sel
        k = s.map.kernels[name]  # type: ignore[union-attr]
        files = [*k.inputs, *k.absent]
        dirs = {posixpath.dirname(p) for p in k.inputs} | ({k.root} if k.root is not None else set())
        if k.root is not None:
            mine = {posixpath.dirname(p) for p in k.inputs}
            files += [p for p in self.files if _under(p, k.root) and not p.endswith(".py")
                      and not matches(p, s.rules.inert) and (not k.complete or (
                          p not in s._read_by_compiler and (posixpath.dirname(p) in mine
                                                            or not s._other_kernel_places(name, p))))]
        if k.modules and s.graph is not None:
            files += list(s._closure(tuple(k.modules)).files)
        ids = s.env.witness(k) if s.env is not None else dict(k.env)
        g = self._group(gid, files, dirs, ids, kernel={"name": name, "entry_id": k.entry_id})
        self.groups[gid]["kernel"]["inputs_digest"] = env.digest(self.groups[gid]["files"])
        return g

    def as_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "root": str(self.root), "groups": self.groups, "tests": self.tests}


def build(sel: "Selector", tests: Iterable["TestInfo"]) -> dict[str, Any]:
    """The witnesses of ``tests`` (each one the selection deselected, or would have)."""
    b = Builder(sel)
    if sel.map is not None and sel.graph is not None:
        for t in tests:
            if t.nodeid in sel.map.tests:
                b.add(t)
    return b.as_dict()


# -- verification ------------------------------------------------------------------------------------
def verify(witness: dict[str, Any], start: Path | str | None = None) -> list[str]:
    """Every witness that no longer holds on the current tree and environment, one line per
    test (``[]``: all hold). ``start``: a directory in the repository (default: the recorded root)."""
    root = repo_root(start) if start is not None else Path(witness.get("root") or ".")
    by_dir = _by_dir(repo_files(root))
    blobs: dict[str, str | None] = {}
    broken: dict[str, list[str]] = {}
    cache: dict[str, env.Identity] = {}
    for gid, g in (witness.get("groups") or {}).items():
        why = []
        for p, blob in (g.get("files") or {}).items():
            now = blobs[p] if p in blobs else blobs.setdefault(p, _blob(root, p))
            if now != blob:
                why.append(f"{p} {_short(blob)} -> {_short(now)}")
        for d, dig in (g.get("dirs") or {}).items():
            if _listing(by_dir.get(d, ()), d) != dig:
                why.append(f"{d or '.'}/ lists other files")
        for key, was in (g.get("env") or {}).items():
            ck = key if key != "headers" else f"headers:{was.get('digest')}"
            now_id = cache.get(ck) or cache.setdefault(ck, env.current(was))
            moved = env.moved(was, now_id)
            if moved:
                why.append(moved)
        if why:
            broken[gid] = why
    out = []
    for nodeid, gids in (witness.get("tests") or {}).items():
        bad = [f"{gid}: {'; '.join(broken[gid][:3])}" + (f" (+{len(broken[gid]) - 3})" if len(broken[gid]) > 3 else "")
               for gid in gids if gid in broken]
        if bad:
            out.append(f"{nodeid}: witness no longer holds: {' | '.join(bad)}")
    return out


def _short(blob: str | None) -> str:
    return "absent" if blob is None else blob[:12]


def _under(path: str, root: str) -> bool:
    return root == "" or path.startswith(root.rstrip("/") + "/")


def from_report(path: Path | str) -> dict[str, Any]:
    """The ``impact.selection.witness`` of a ``--kc-report-json`` report (ValueError: none)."""
    import json

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read report {path}: {e}") from None
    sel = ((data.get("impact") or {}).get("selection") or {}) if isinstance(data, dict) else {}
    w = sel.get("witness")
    if not isinstance(w, dict):
        raise ValueError(f"report {path} has no witnesses (a run without --kc-affected-since, or an older kernelcache)")
    return w

