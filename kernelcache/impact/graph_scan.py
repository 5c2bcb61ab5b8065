"""What one Python file imports, from its syntax tree, cached per file content (git blob id).

Why ``ast`` and not a line scanner: a scanner has to re-implement the grammar (backslash
continuations, parenthesised name lists, ``;``-separated statements, comments and strings that
look like imports) and every form it gets wrong is a missing edge, i.e. a missed test. The
tree has none of those problems. Facts are kept layout-free (names, levels, literals) so the
cache stays valid when files move; resolving them against the repository is the graph's job.

Forms seen: ``import``/``from`` anywhere (functions, ``try``, ``if``), with ``if TYPE_CHECKING:``
bodies marked guarded; ``importlib.import_module("literal"[, package])`` and
``__import__("literal")``; code inside string constants that parses and imports (code a test
runs in a subprocess with ``python -c``); ``-m module`` in strings and argv lists; and, in a
file that calls ``import_module``/``__import__`` with a computed name, every identifier-like
string constant (the lazy tables of a package's ``__getattr__``). A file that does not parse
falls back to a conservative scan of its text (every dotted name after ``import``/``from``).
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

CACHE_FORMAT = 2
_IDENT = re.compile(r"[A-Za-z_][\w.]*\Z")
_DASH_M = re.compile(r"""(?<![\w-])-m[ \t]+([A-Za-z_][\w.]*)""")
_CODE_IMPORT = re.compile(r"(?:^|;)[ \t]*(?:from[ \t]+\S+[ \t]+)?import[ \t]", re.M)  # a statement, not prose
_LOOSE = re.compile(r"\b(?:from|import)[ \t\\\n(]+(\.*[A-Za-z_][\w.]*|\.+)")


@dataclass
class Facts:
    """Layout-free import facts of one file."""

    imports: list[tuple[int, str, tuple[str, ...], bool]] = field(default_factory=list)  # level, module, names, guarded
    literals: list[str] = field(default_factory=list)  # import_module/__import__ string arguments
    runs: list[str] = field(default_factory=list)  # modules run with ``-m`` (in a string or an argv list)
    names: list[str] = field(default_factory=list)  # identifier-like strings (lazy tables, console scripts)
    computed: bool = False  # import_module/__import__ with a non-literal name

    def to_json(self) -> list:
        return [[list(i[:2]) + [list(i[2]), i[3]] for i in self.imports], self.literals, self.runs, self.names,
                self.computed]

    @classmethod
    def from_json(cls, v: list) -> "Facts":
        return cls([(int(a), str(b), tuple(c), bool(d)) for a, b, c, d in v[0]], list(v[1]), list(v[2]), list(v[3]),
                   bool(v[4]))


def blob_id(data: bytes) -> str:
    """git's blob id of ``data`` (what ``git hash-object`` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _guarded_nodes(tree: ast.AST) -> set[int]:
    """ids of the import statements inside ``if TYPE_CHECKING:`` bodies (they never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                out.update(id(n) for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return out


def _collect(tree: ast.AST, f: Facts, depth: int, text: str) -> None:
    """One pass over every node (``ast.walk``: no per-node method dispatch)."""
    guarded = _guarded_nodes(tree) if "TYPE_CHECKING" in text else set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            v = node.value
            if type(v) is not str:
                continue
            if len(v) < 200 and _IDENT.match(v):
                f.names.append(v)
            if "-m" in v:
                f.runs.extend(m.group(1) for m in _DASH_M.finditer(v))
            if "import" in v and depth < 3 and _CODE_IMPORT.search(v):  # code run elsewhere (python -c, exec)
                try:
                    sub = ast.parse(v)
                except (SyntaxError, ValueError):
                    continue
                _collect(sub, f, depth + 1, v)
        elif isinstance(node, ast.Import):
            g = id(node) in guarded
            f.imports.extend((0, a.name, (), g) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            f.imports.append((node.level, node.module or "", tuple(a.name for a in node.names), id(node) in guarded))
        elif isinstance(node, ast.Call):
            name = _call_name(node.func)
            if name in ("import_module", "__import__"):
                arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"), None)
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    f.literals.append(_with_package(arg.value, node))
                else:
                    f.computed = True
        elif isinstance(node, (ast.List, ast.Tuple)):
            elts = node.elts
            for a, b in zip(elts, elts[1:]):  # [sys.executable, "-m", "pkg.mod", ...]: run in a subprocess
                if type(a) is ast.Constant and a.value == "-m" and type(b) is ast.Constant \
                        and isinstance(b.value, str) and _IDENT.match(b.value):
                    f.runs.append(b.value)


def _with_package(name: str, call: ast.Call) -> str:
    """``import_module(".x", "pkg")``: absolute when the package is a literal too (else the
    importer's own package applies, as for ``__name__``/``__package__``)."""
    if not name.startswith("."):
        return name
    pkg = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "package"), None)
    if not (isinstance(pkg, ast.Constant) and isinstance(pkg.value, str)):
        return name
    level = len(name) - len(name.lstrip("."))
    parts = pkg.value.split(".")
    if level - 1 > len(parts):
        return name
    return ".".join(parts[:len(parts) - (level - 1)] + ([name[level:]] if name[level:] else []))


def scan(text: str) -> Facts:
    """The import facts of one file's text."""
    f = Facts()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        # does not parse (a work in progress): every dotted name after import/from, unguarded
        for m in _LOOSE.finditer(text):
            s = m.group(1)
            level = len(s) - len(s.lstrip("."))
            f.imports.append((level, s[level:], (), False))
        f.names = sorted({m.group(0) for m in re.finditer(r"[A-Za-z_][\w.]*", text)})
        f.computed = True
        return f
    _collect(tree, f, 0, text)
    f.names = sorted(set(f.names))
    return f


class ScanCache:
    """Facts by blob id, kept in one JSON file (``None``: in memory only)."""

    def __init__(self, path: Path | str | None):
        self.path = Path(path) if path else None
        self.data: dict[str, list] = {}
        self.dirty = False
        if self.path is not None:
            try:
                raw = json.loads(self.path.read_text())
                if raw.get("format") == CACHE_FORMAT and isinstance(raw.get("facts"), dict):
                    self.data = raw["facts"]
            except (OSError, ValueError, AttributeError):
                pass

    def facts(self, data: bytes) -> Facts:
        key = blob_id(data)
        got = self.data.get(key)
        if got is not None:
            try:
                return Facts.from_json(got)
            except (TypeError, ValueError, IndexError):
                pass
        f = scan(data.decode("utf-8", errors="replace"))
        self.data[key] = f.to_json()
        self.dirty = True
        return f

    def save(self, keep: set[str] | None = None) -> None:
        """Write (atomically) when something was added; ``keep``: blob ids still in use."""
        if self.path is None or not self.dirty:
            return
        if keep is not None:
            self.data = {k: v for k, v in self.data.items() if k in keep}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp")
            tmp.write_text(json.dumps({"format": CACHE_FORMAT, "facts": self.data}))
            os.replace(tmp, self.path)
        except OSError:
            pass  # a cache: losing it costs time only
