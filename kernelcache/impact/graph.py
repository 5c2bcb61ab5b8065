"""The static Python import graph of a repository, and import closures of test files.

Why a scanner of our own rather than grimp or coverage: grimp models importable packages
only, while pytest imports test files from directories without ``__init__.py`` (its
"prepend" rule: a file's first ancestor without ``__init__.py`` goes on ``sys.path``), and it
does not see this project's lazy public API (``importlib.import_module`` over string tables).
Coverage sees only the lines a run executed, so a GPU test skipped on a CPU runner would look
independent of the code it tests. This scanner reads every ``import``/``from`` it finds in a
file's text — inside functions, and inside strings too (code a test runs in a subprocess) —
and, in a file that calls ``importlib.import_module``/``__import__``, every string literal that
names a module of the repository. It over-approximates on purpose: an extra edge costs a test
run, a missing one a missed failure. Reading ~130 files takes milliseconds (no AST).
"""
from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

_FROM = re.compile(r"\bfrom[ \t]+(\.*[A-Za-z_][\w.]*|\.+)[ \t]+import[ \t]+(\([^)]*\)|[^\n;'\"#]*)")
_IMPORT = re.compile(r"\bimport[ \t]+([A-Za-z_][\w.]*(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*"
                     r"(?:[ \t]+as[ \t]+\w+)?)*)")
_STRING = re.compile(r"""['"]([A-Za-z_][\w.]*)['"]""")
_DYNAMIC = ("import_module", "__import__(")
# `python -m mod` in a string or an argv list: the test runs that module in a subprocess
_RUN_MODULE = re.compile(r"""["']-m["']\s*,\s*["']([A-Za-z_][\w.]*)["']|(?<![\w-])-m[ \t]+([A-Za-z_][\w.]*)""")
_TYPE_CHECKING = re.compile(r"^([ \t]*)if[ \t]+(?:typing\.)?TYPE_CHECKING\b.*:", re.M)


def _import_chunks(text: str) -> list[tuple[int, str]]:
    """(offset, text) of every line containing "import", with its parenthesised continuation."""
    out = []
    n = len(text)
    i = text.find("import")
    while i >= 0:
        start = text.rfind("\n", 0, i) + 1
        end = text.find("\n", i)
        end = n if end < 0 else end
        line = text[start:end]
        if line.count("(") > line.count(")"):
            close = text.find(")", end)
            end = n if close < 0 else close + 1
        out.append((start, text[start:end]))
        i = text.find("import", end)
    return out


def _guarded_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of ``if TYPE_CHECKING:`` blocks (imports there never run)."""
    spans = []
    for m in _TYPE_CHECKING.finditer(text):
        indent = len(m.group(1).expandtabs())
        pos = text.find("\n", m.end())
        end = len(text) if pos < 0 else pos
        while pos >= 0:
            nxt = text.find("\n", pos + 1)
            line = text[pos + 1: len(text) if nxt < 0 else nxt]
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break
            end = len(text) if nxt < 0 else nxt
            pos = nxt
        spans.append((m.start(), end))
    return spans


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

    def __init__(self, root: Path | str, py_files: Iterable[str]):
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
        for node in self.nodes.values():
            self._scan(node)

    # -- scanning --------------------------------------------------------------------------------
    def _scan(self, node: Node) -> None:
        try:
            text = (self.root / node.path).read_text(errors="replace")
        except OSError:
            return
        pkg = node.name if node.path.endswith("__init__.py") else node.name.rpartition(".")[0]
        spans = _guarded_spans(text) if "TYPE_CHECKING" in text else []

        def guarded(pos: int) -> bool:
            return any(a <= pos < b for a, b in spans)

        def scan_from(m: re.Match, off: int) -> str:
            mod, names = m.group(1), m.group(2)
            absolute = self._absolute(mod, pkg)
            if absolute is not None:
                g = guarded(off + m.start())
                self._edge(node, absolute, g)
                for n in names.strip("()").replace("\n", " ").split(","):
                    n = n.strip().split(" ")[0].strip()
                    if n and n != "*":
                        sub = f"{absolute}.{n}" if absolute else n
                        if sub in self.by_name:
                            self._edge(node, sub, g)
            return " " * len(m.group(0))

        for off, chunk in _import_chunks(text):  # the regexes only see lines that say "import"
            rest = _FROM.sub(lambda m: scan_from(m, off), chunk)
            for m in _IMPORT.finditer(rest):
                for item in m.group(1).split(","):
                    name = item.strip().split()[0] if item.strip() else ""
                    if name:
                        self._edge(node, name, guarded(off + m.start()))
        runs = '"-m"' in text or "'-m'" in text or " -m " in text
        for m in _RUN_MODULE.finditer(text) if runs else ():
            mod = m.group(1) or m.group(2)
            self._edge(node, mod)
            if f"{mod}.__main__" in self.by_name:
                self._edge(node, f"{mod}.__main__")
        for script, mod in self.scripts.items():
            if f'"{script}"' in text or f"'{script}'" in text:
                self._edge(node, mod, guarded=True)
        if any(d in text for d in _DYNAMIC):
            for m in _STRING.finditer(text):
                s = m.group(1)
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


def _console_scripts(root: Path) -> dict[str, str]:
    """``[project.scripts]`` of ``root/pyproject.toml``: a test that runs ``kernelcache ...``
    in a subprocess depends on ``kernelcache.cli``."""
    try:
        import tomllib
        data = tomllib.loads((root / "pyproject.toml").read_text())
    except (ImportError, OSError, ValueError):
        return {}
    scripts = data.get("project", {}).get("scripts", {})
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
