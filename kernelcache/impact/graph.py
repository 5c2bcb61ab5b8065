"""The static Python import graph of a repository, and import closures of test files.

Why a graph of our own rather than grimp or coverage: grimp models importable packages
only, while pytest imports test files from directories without ``__init__.py`` (its
"prepend" rule: a file's first ancestor without ``__init__.py`` goes on ``sys.path``), and it
does not see this project's lazy public API (``importlib.import_module`` over string tables).
Coverage sees only the lines a run executed, so a GPU test skipped on a CPU runner would look
independent of the code it tests. Each file's imports come from its syntax tree
(:mod:`.graph_scan`, cached per git blob id); here they are resolved against the repository's
files. It over-approximates on purpose: an extra edge costs a test run, a missing one a missed
failure.
"""
from __future__ import annotations

import functools
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .graph_scan import Facts, ScanCache, blob_id


@dataclass
class Node:
    path: str  # repository-relative
    name: str  # module name under pytest's prepend rule / the package layout
    static: set[str] = field(default_factory=set)  # imported files (import statements)
    dynamic: set[str] = field(default_factory=set)  # importlib string literals, TYPE_CHECKING imports
    unresolved: set[str] = field(default_factory=set)  # imported names no file provides


@dataclass
class Closure:
    files: dict[str, str]  # file -> the file that imported it ("" for a start file)
    names: set[str]  # imported names that no file provides (a deleted module shows up here)

    def chain(self, path: str, limit: int = 4) -> str:
        """``a.py -> b.py -> path`` (the import path that reached ``path``, shortened)."""
        out = [path]
        while self.files.get(out[-1]) and len(out) < 50:
            out.append(self.files[out[-1]])
        out.reverse()
        if len(out) > limit:
            out = out[:1] + ["..."] + out[-(limit - 2):]
        return " -> ".join(out)


def _base_and_name(path: str, init_dirs: set[str]) -> tuple[str, str]:
    parts = path[:-3].split("/")
    d = "/".join(parts[:-1])
    mod = [parts[-1]] if parts[-1] != "__init__" else []
    while d and d in init_dirs:
        head, _, tail = d.rpartition("/")
        mod.insert(0, tail)
        d = head
    return d, ".".join(mod)


class ImportGraph:
    """Import edges between the Python files of a repository (paths repository-relative)."""

    def __init__(self, root: Path | str, py_files: Iterable[str], cache: Path | str | None = None):
        self.root = Path(root)
        self.scripts = _console_scripts(self.root)  # `kernelcache` -> kernelcache.cli
        files = sorted(p for p in py_files if p.endswith(".py"))
        init_dirs = {p.rpartition("/")[0] for p in files if p.rpartition("/")[2] == "__init__.py"}
        self.nodes: dict[str, Node] = {}
        self.base: dict[str, str] = {}
        self.by_name: dict[str, list[str]] = {}
        for p in files:
            base, name = _base_and_name(p, init_dirs)
            if not name:
                continue
            self.nodes[p] = Node(p, name)
            self.base[p] = base
            self.by_name.setdefault(name, []).append(p)
        scans = ScanCache(cache)
        used: set[str] = set()
        for node in self.nodes.values():
            try:
                data = (self.root / node.path).read_bytes()
            except OSError:
                continue
            used.add(blob_id(data))
            self._resolve(node, scans.facts(data))
        scans.save(keep=used)

    # -- resolving -------------------------------------------------------------------------------
    def _resolve(self, node: Node, f: Facts) -> None:
        pkg = node.name if node.path.endswith("__init__.py") else node.name.rpartition(".")[0]
        for level, mod, names, guarded in f.imports:
            absolute = self._absolute("." * level + mod, pkg)
            if absolute is None:
                continue
            if absolute:
                self._edge(node, absolute, guarded)
            for n in names:
                sub = f"{absolute}.{n}" if absolute else n
                if n != "*" and sub in self.by_name:
                    self._edge(node, sub, guarded)
        for mod in f.runs:
            self._edge(node, mod)
            if f"{mod}.__main__" in self.by_name:
                self._edge(node, f"{mod}.__main__")
        for lit in f.literals:  # import_module("x") / ("..x", __name__): runs when called (lazy)
            absolute = self._absolute(lit, pkg) if lit.startswith(".") else lit
            if absolute:
                self._edge(node, absolute, guarded=True)
        for script, mod in self.scripts.items():
            if script in f.names:
                self._edge(node, mod, guarded=True)
        if f.computed:  # a computed module name: every string naming a module of the repository
            for s in f.names:
                for cand in (s, f"{pkg}.{s}" if pkg else s):
                    if cand in self.by_name:
                        for p in self._pick(cand, node.path):
                            if p != node.path:
                                node.dynamic.add(p)

    @staticmethod
    def _absolute(mod: str, pkg: str) -> str | None:
        level = len(mod) - len(mod.lstrip("."))
        rest = mod[level:]
        if level == 0:
            return rest
        parts = pkg.split(".") if pkg else []
        if level - 1 > len(parts):
            return None
        base = parts[:len(parts) - (level - 1)]
        return ".".join(base + ([rest] if rest else []))

    def _pick(self, name: str, importer: str) -> list[str]:
        """Files providing ``name``: the importer's own base dir first (pytest's prepend rule),
        else every candidate (the safe side)."""
        cands = self.by_name.get(name, [])
        if len(cands) > 1:
            same = [c for c in cands if self.base.get(c) == self.base.get(importer)]
            if same:
                return same
        return cands

    def _edge(self, node: Node, name: str, guarded: bool = False) -> None:
        """An import of ``name``; ``guarded`` (under TYPE_CHECKING) edges never run, so they
        count only where over-approximating is the safe side (test closures)."""
        parts = name.split(".")
        found = False
        target = node.dynamic if guarded else node.static
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
            prefix = ".".join(parts[:i])
            for p in self._pick(prefix, node.path):
                if p != node.path:
                    target.add(p)
                found = True
        if not found or name not in self.by_name:
            node.unresolved.add(name)

    # -- queries ---------------------------------------------------------------------------------
    def module_names(self, path: str) -> set[str]:
        """Names a (possibly deleted) file could be imported by."""
        if not path.endswith(".py"):
            return set()
        node = self.nodes.get(path)
        if node is not None:
            return {node.name}
        init_dirs = {p.rpartition("/")[0] for p in self.nodes if p.endswith("/__init__.py")}
        return {_base_and_name(path, init_dirs)[1]} - {""}

    def closure(self, starts: Iterable[str], dynamic: bool = True) -> Closure:
        """Every file reachable from ``starts`` by imports (with parent packages)."""
        seen: dict[str, str] = {}
        names: set[str] = set()
        todo: deque[str] = deque()
        for s in starts:
            if s not in seen:
                seen[s] = ""
                todo.append(s)
        while todo:
            cur = todo.popleft()
            node = self.nodes.get(cur)
            if node is None:
                continue
            names |= node.unresolved
            nxt = node.static | node.dynamic if dynamic else node.static
            for p in sorted(nxt):
                if p not in seen:
                    seen[p] = cur
                    todo.append(p)
        return Closure(seen, names)

    def package_files(self, prefix: str) -> list[str]:
        """Python files under a directory prefix (``kernelcache/pytest_plugin/``)."""
        prefix = prefix.rstrip("/") + "/"
        return [p for p in self.nodes if p.startswith(prefix)]


def pyproject(root: Path | str) -> dict:
    """``root/pyproject.toml`` parsed ({} when absent or unreadable), once per file version."""
    p = os.path.join(str(root), "pyproject.toml")
    try:
        st = os.stat(p)
    except OSError:
        return {}
    return _parsed(p, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _parsed(path: str, mtime_ns: int, size: int) -> dict:
    try:
        import tomllib
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (ImportError, OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _console_scripts(root: Path) -> dict[str, str]:
    """``[project.scripts]`` of ``root/pyproject.toml``: a test that runs ``kernelcache ...``
    in a subprocess depends on ``kernelcache.cli``."""
    scripts = pyproject(root).get("project", {}).get("scripts", {})
    return {str(k): str(v).partition(":")[0].strip() for k, v in scripts.items() if isinstance(v, str)}


def conftests_for(test_file: str, all_files: Iterable[str]) -> list[str]:
    """The conftest.py files pytest loads for ``test_file`` (its directory and every parent)."""
    dirs = set()
    d = os.path.dirname(test_file)
    while True:
        dirs.add(d)
        if not d:
            break
        d = os.path.dirname(d)
    return sorted(p for p in all_files if p.rpartition("/")[2] == "conftest.py" and p.rpartition("/")[0] in dirs)
