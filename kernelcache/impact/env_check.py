"""Selection against the environment: which tests a changed interpreter, distribution or
kernel toolchain can affect (the rules; :mod:`.environment` computes the identities).

Why these rules: a distribution a test imports (or one that such a distribution requires, at
any depth: ``torch`` runs ``numpy``) can change its outcome; one that the pytest plugins import
(pytest, its plugins, kernelcache and what they require) can change every test; a distribution
no repository module imports, or one that was removed (its modules are no longer known), cannot
be attributed, so everything runs. A new interpreter runs everything.
"""
from __future__ import annotations

import os
import re
from typing import Any, Iterable

from . import environment as env
from .impact_map import ImpactMap, KernelRecord, TestRecord

PLUGIN_DISTS = ("pytest", "pluggy", "kernelcache")
_REQ = re.compile(rb"^Requires-Dist:\s*([A-Za-z0-9][A-Za-z0-9._-]*)", re.M)


class Installed:
    """The distributions installed now: metadata directories, requirements, top-level modules."""

    def __init__(self) -> None:
        self.dirs: dict[str, str] = {}
        for root in env.import_roots():
            for name, _v, d in env.dist_dirs(root):
                self.dirs.setdefault(name, d)
        self._requires: dict[str, set[str]] | None = None
        self._tops: dict[str, set[str]] = {}

    def _read(self, name: str, fname: str) -> bytes:
        d = self.dirs.get(name)
        return (env.installed.read_bytes(os.path.join(d, fname)) or b"") if d else b""

    def requires(self) -> dict[str, set[str]]:
        if self._requires is None:
            self._requires = {}
            for n in self.dirs:
                meta = self._read(n, "METADATA") or self._read(n, "PKG-INFO")
                self._requires[n] = {env.canonical(m.decode()) for m in _REQ.findall(meta)}
        return self._requires

    def dependents(self, names: Iterable[str]) -> set[str]:
        """``names`` and every distribution requiring one of them, at any depth."""
        req = self.requires()
        out = set(names)
        grew = True
        while grew:
            more = {n for n, rs in req.items() if n not in out and rs & out}
            out |= more
            grew = bool(more)
        return out

    def closure(self, names: Iterable[str]) -> set[str]:
        """``names`` and what they require, at any depth."""
        req = self.requires()
        out, todo = set(), list(names)
        while todo:
            n = todo.pop()
            if n not in out:
                out.add(n)
                todo += sorted(req.get(n, ()))
        return out

    def plugins(self) -> set[str]:
        """Distributions pytest loads in every run: pytest itself, its ``pytest11`` plugins."""
        return {*PLUGIN_DISTS, *(n for n in self.dirs if b"[pytest11]" in self._read(n, "entry_points.txt"))}

    def top_modules(self, name: str) -> set[str]:
        """Importable top-level names a distribution installs (top_level.txt, else its RECORD)."""
        got = self._tops.get(name)
        if got is None:
            got = self._tops[name] = self._top_modules(name)
        return got

    def _top_modules(self, name: str) -> set[str]:
        top = self._read(name, "top_level.txt").decode(errors="replace").split()
        if top:
            return set(top)
        out = set()
        for line in self._read(name, "RECORD").decode(errors="replace").splitlines():
            first = line.split(",", 1)[0].split("/", 1)[0]
            if first and not first.endswith((".dist-info", ".egg-info", ".pth", ".data")) and first not in (
                    "..", "__pycache__", "__editable__"):
                out.add(first[:-3] if first.endswith(".py") else first.split(".")[0])
        return out


class EnvCheck:
    """The environment rules for one map, with current values computed once each."""

    def __init__(self, imap: ImpactMap, memo_dir: Any = None):
        self.map = imap
        self.memo_dir = memo_dir
        self.now = env.python_environment()
        self._installed: Installed | None = None
        self._current: dict[str, env.Identity] = {}  # identity key -> current value (shared by kernels)
        self._tops: dict[str, set[str]] = {}  # changed distribution -> top-level modules of it and its dependents

    @property
    def installed(self) -> Installed:
        if self._installed is None:
            self._installed = Installed()
        return self._installed

    def snapshots(self) -> list[dict]:
        used = {t.env for t in self.map.tests.values() if t.env}
        return [self.map.environments[e] for e in sorted(used) if e in self.map.environments]

    def changed(self, snaps: Iterable[dict]) -> dict[str, str]:
        return env.union_changes(snaps, self.now)

    def global_reason(self, repo_names: set[str]) -> str | None:
        """Why every test runs: another interpreter; a changed distribution that the plugins run,
        that was removed, or that no repository module imports (``repo_names``: top-level names
        the repository's Python files import that no file of it provides)."""
        snaps = self.snapshots()
        for s in snaps:
            if s.get("python") != self.now["python"]:
                return f"Python {s.get('python')} -> {self.now['python']}: every test runs on it"
        changes = self.changed(snaps)
        if not changes:
            return None
        inst = self.installed
        plugins = inst.closure(inst.plugins())
        kernel_dists = {str(i.get("name")) for k in self.map.kernels.values() for i in k.env.values()
                        if i.get("kind") == "dist"}
        for name, why in changes.items():
            if name not in inst.dirs:
                return f"{why}: cannot tell which tests imported it"
            hit = inst.dependents({name}) & plugins
            if hit:
                return f"{why}: pytest runs it in every test (through {', '.join(sorted(hit))})"
            tops = set().union(*(inst.top_modules(n) for n in inst.dependents({name})))
            self._tops[name] = tops
            if not tops & repo_names and name not in kernel_dists:
                return f"{why}: cannot tell which tests it affects (no repository module imports it)"
        return None

    def test_reason(self, rec: TestRecord, names: set[str]) -> str | None:
        """Why test ``rec`` must run for the Python environment: a distribution it imports
        (``names``: top-level names its import closure imports from outside the repository)
        changed since its record's run; a record without its environment runs."""
        if not rec.env or rec.env not in self.map.environments:
            return "its record does not say which Python environment it ran in"
        for name, why in env.dist_changes(self.map.environments[rec.env], self.now).items():
            tops = self._tops.get(name)
            if tops is None:
                tops = self._tops[name] = set().union(
                    *(self.installed.top_modules(n) for n in self.installed.dependents({name})))
            hit = sorted(tops & names)
            if hit:
                return f"imports {hit[0]}, and {why}"
        return None

    def kernel_reason(self, k: KernelRecord) -> str | None:
        """Why the tests of kernel ``k`` must run: an identity its key used moved."""
        why = env.kernel_moved(k.env, self.memo_dir, self._current)
        return f"uses {k.name}, whose environment moved: {why}" if why else None

    def witness(self, k: KernelRecord) -> dict[str, env.Identity]:
        """The kernel's identities as they are now (equal to the recorded ones when deselected)."""
        out = {}
        for key, was in k.env.items():
            ck = key if key != "headers" else f"headers:{was.get('digest')}"
            out[key] = self._current.get(ck) or env.current(was, self.memo_dir)
        return out


def top_names(names: Iterable[str]) -> set[str]:
    return {n.split(".", 1)[0] for n in names}
