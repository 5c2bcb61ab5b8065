"""Test names -> test files, before collection; kernel/suite markers read statically.

Why static: under xdist the controller never collects, yet it must know which kernels the
selected tests need (to warm them before any worker exists), and ``ci/rerun-test`` must place a
test on a runner without importing it (the planning machine may lack the test dependencies).
So markers are read with :mod:`ast` (their arguments must be literals) and names are resolved
by walking the file tree. This module imports neither pytest nor any test module, so
``ci/rerun-test`` can use it on a machine without pytest.

Accepted spec forms (one test file each, optionally narrowed to a class or test)::

    test_ngram_corpus.py                  bare file name, searched across the test roots
    test_ngram_corpus                     the same, ".py" implied
    kernels/test_ngram_corpus.py          a path suffix (disambiguates equal basenames)
    tests/kernels/test_ngram_corpus.py    a path relative to the invocation or root dir
    test_x.py::TestX::test_y[1]           a pytest selector after "::"
    test_x.py::TestX.test_y               unittest style "Class.method", same meaning
    "test_x.py TestX.test_y"              unittest style argv in one string

A name must match exactly one file; otherwise :class:`SelectionError` lists the matches (or
the nearest names when there are none).
"""
from __future__ import annotations

import ast
import difflib
import fnmatch
import glob
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

DEFAULT_FILE_PATTERNS = ("test_*.py", "*_test.py")
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", "node_modules",
    "build", "dist", ".pytest_cache", ".mypy_cache", ".ruff_cache", "site-packages", ".eggs",
})


class SelectionError(ValueError):
    """A name matched no file, or more than one; the message lists what was found."""

    def __init__(self, message: str, problems: Sequence[dict] = ()):
        super().__init__(message)
        self.problems = list(problems)  # [{"spec", "error", "matches"}]


@dataclass(frozen=True)
class Resolved:
    """One resolved spec: the file (or directory) and the pytest selector inside it."""

    spec: str
    path: Path  # absolute
    relpath: str  # relative to the root dir, "/"-separated
    selector: str = ""  # "TestX::test_y" or ""

    @property
    def nodeid(self) -> str:
        return self.relpath + (f"::{self.selector}" if self.selector else "")

    @property
    def arg(self) -> str:
        """The argument to hand to pytest (absolute path, so the cwd does not matter)."""
        return str(self.path) + (f"::{self.selector}" if self.selector else "")

    def as_dict(self) -> dict:
        return {"spec": self.spec, "path": self.relpath, "selector": self.selector, "nodeid": self.nodeid}


# -- parsing a spec ------------------------------------------------------------------------------
def split_spec(spec: str) -> tuple[str, str]:
    """``"f.py::A.b"`` / ``"f.py A.b"`` -> ``("f.py", "A::b")``."""
    s = spec.strip()
    if not s:
        raise SelectionError("empty test name")
    if "::" in s:
        file_part, selector = s.split("::", 1)
    elif " " in s:
        file_part, selector = s.split(None, 1)
    else:
        file_part, selector = s, ""
    selector = selector.strip()
    if selector:
        head, bracket, params = selector.partition("[")
        if "::" not in head and "." in head:  # unittest "Class.method"
            head = head.replace(".", "::")
        selector = head + bracket + params
    return file_part.strip(), selector


# -- finding files -------------------------------------------------------------------------------
def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def iter_py_files(roots: Iterable[Path]) -> list[Path]:
    """Every ``.py`` file under the roots (deduplicated, pruned of VCS/venv/build dirs)."""
    seen: set[str] = set()
    out: list[Path] = []
    for root in roots:
        root = Path(root)
        if root.is_file():
            candidates = [root] if root.suffix == ".py" else []
        elif root.is_dir():
            candidates = []
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames
                                     if d not in SKIP_DIRS and not d.startswith(".") and not d.endswith(".egg-info"))
                candidates += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py")]
        else:
            candidates = []
        for p in candidates:
            real = os.path.realpath(p)
            if real not in seen:
                seen.add(real)
                out.append(Path(os.path.abspath(p)))
    return out


def is_test_file(path: Path, patterns: Sequence[str] = DEFAULT_FILE_PATTERNS) -> bool:
    return any(fnmatch.fnmatch(path.name, pat) for pat in patterns)


def default_roots(rootdir: Path, testpaths: Sequence[str] = ()) -> list[Path]:
    """``testpaths`` (globs allowed, relative to ``rootdir``), else ``rootdir`` itself."""
    roots: list[Path] = []
    for tp in testpaths:
        pat = tp if os.path.isabs(tp) else str(rootdir / tp)
        if any(c in tp for c in "*?["):
            roots += [Path(p) for p in sorted(glob.glob(pat, recursive=True))]
        else:
            roots.append(Path(pat))
    roots = [r for r in roots if r.exists()]
    return roots or [Path(rootdir)]


def resolve(
    specs: Sequence[str],
    roots: Sequence[Path],
    rootdir: Path,
    cwd: Path | None = None,
) -> list[Resolved]:
    """Resolve every spec to exactly one file; collect all problems into one SelectionError."""
    rootdir = Path(os.path.abspath(rootdir))
    cwd = Path(os.path.abspath(cwd or os.getcwd()))
    files: list[Path] | None = None
    out: list[Resolved] = []
    problems: list[dict] = []
    for spec in specs:
        try:
            file_part, selector = split_spec(spec)
        except SelectionError as e:
            problems.append({"spec": spec, "error": str(e), "matches": []})
            continue
        # 1. an existing path (relative to the invocation dir or the root dir, or absolute)
        direct = None
        for base in (cwd, rootdir):
            p = Path(file_part) if os.path.isabs(file_part) else base / file_part
            if p.exists() and (p.is_dir() or p.suffix == ".py"):
                direct = Path(os.path.abspath(p))
                break
        if direct is not None:
            if direct.is_dir() and selector:
                problems.append({"spec": spec, "error": f"{file_part!r} is a directory; '::' selectors need a file",
                                 "matches": []})
                continue
            out.append(Resolved(spec, direct, _rel(direct, rootdir), selector))
            continue
        # 2. a bare name or a path suffix, searched across the roots
        if files is None:
            files = iter_py_files(roots)
        name = file_part.replace(os.sep, "/").strip("/")
        if not name.endswith(".py"):
            name += ".py"
        if "/" in name:
            matches = [f for f in files if f.as_posix().endswith("/" + name)]
        else:
            matches = [f for f in files if f.name == name]
        if len(matches) == 1:
            out.append(Resolved(spec, matches[0], _rel(matches[0], rootdir), selector))
            continue
        shown = ", ".join(_rel(Path(r), rootdir) for r in roots)
        if not matches:
            names = sorted({f.name for f in files if f.name != "conftest.py" and f.name != "__init__.py"})
            close = difflib.get_close_matches(Path(name).name, names, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            problems.append({"spec": spec, "error": f"no test file matches {file_part!r} under {shown}{hint}",
                             "matches": []})
        else:
            rels = [_rel(m, rootdir) for m in matches]
            listing = "".join(f"\n    {r}" for r in rels)
            problems.append({"spec": spec, "matches": rels, "error": (
                f"{file_part!r} is ambiguous: it matches {len(matches)} files (give a longer path, "
                f"e.g. {'/'.join(rels[0].split('/')[-2:])}):{listing}")})
    if problems:
        msg = "\n".join(f"kernelcache: cannot resolve {p['spec']!r}: {p['error']}" for p in problems)
        raise SelectionError(msg, problems)
    return out


def failed_from_report(report: Path, rootdir: Path, cwd: Path | None = None) -> list[str]:
    """Node ids that failed or errored in a ``--kc-report-json`` report, as pytest arguments.

    Lets a runner rerun exactly the failures of another run (a CI artifact) without guessing.
    """
    rootdir = Path(os.path.abspath(rootdir))
    cwd = Path(os.path.abspath(cwd or os.getcwd()))
    try:
        data = json.loads(Path(report).read_text())
    except (OSError, ValueError) as e:
        raise SelectionError(f"kernelcache: --kc-failed-from: cannot read {report}: {e}") from None
    tests = data.get("tests") if isinstance(data, dict) else None
    if not isinstance(tests, list):
        raise SelectionError(f"kernelcache: --kc-failed-from: {report} is not a kernelcache report (no 'tests')")
    ids = [t["nodeid"] for t in tests
           if isinstance(t, dict) and t.get("outcome") in ("failed", "error") and t.get("nodeid")]
    if not ids:
        raise SelectionError(f"kernelcache: --kc-failed-from: {report} records no failed tests")
    out, missing = [], []
    for nid in dict.fromkeys(ids):
        path, sep, rest = nid.partition("::")
        p = rootdir / path
        if not p.exists():
            missing.append(nid)
            continue
        out.append(os.path.relpath(p, cwd) + sep + rest)
    if missing:
        raise SelectionError("kernelcache: --kc-failed-from: these failed tests no longer exist here: "
                             + ", ".join(missing), [{"spec": m, "error": "missing", "matches": []} for m in missing])
    return out


# -- markers read statically ----------------------------------------------------------------------
def _is_mark_call(node: ast.AST, marker: str) -> bool:
    """``pytest.mark.<marker>(...)`` or ``mark.<marker>(...)``."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr != marker:
        return False
    base = node.func.value
    return (isinstance(base, ast.Attribute) and base.attr == "mark") or (isinstance(base, ast.Name) and base.id == "mark")


def _mark_calls(node: ast.AST | None, marker: str) -> list[ast.Call]:
    """Marker calls in a decorator or ``pytestmark`` value (a call, list or tuple)."""
    if node is None:
        return []
    if _is_mark_call(node, marker):
        return [node]  # type: ignore[list-item]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e for e in node.elts if _is_mark_call(e, marker)]  # type: ignore[misc]
    return []


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def _suite_args(call: ast.Call) -> tuple[str | None, str | None]:
    args = [_literal(a) for a in call.args]
    kw = {k.arg: _literal(k.value) for k in call.keywords if k.arg}
    stage = kw.get("stage", args[0] if args else None)
    runner = kw.get("runner", args[1] if len(args) > 1 else None)
    return (str(stage) if stage is not None else None, str(runner) if runner is not None else None)


def _pytestmark_value(body: list[ast.stmt]) -> ast.AST | None:
    for st in body:
        if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in st.targets):
            return st.value
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id == "pytestmark":
            return st.value
    return None


def read_suite_markers(path: Path) -> dict[str, tuple[str | None, str | None]]:
    """``suite(stage, runner)`` markers of a test file, by scope.

    Keys: ``""`` (module ``pytestmark``), ``"TestX"`` (class decorator or class
    ``pytestmark``), ``"TestX::test_y"`` / ``"test_y"`` (function decorators).
    """
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, tuple[str | None, str | None]] = {}
    for call in _mark_calls(_pytestmark_value(tree.body), "suite"):
        found[""] = _suite_args(call)

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for st in body:
            if isinstance(st, ast.ClassDef):
                name = prefix + st.name
                for call in [c for d in st.decorator_list for c in _mark_calls(d, "suite")] + \
                        _mark_calls(_pytestmark_value(st.body), "suite"):
                    found[name] = _suite_args(call)
                visit(st.body, name + "::")
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for call in [c for d in st.decorator_list for c in _mark_calls(d, "suite")]:
                    found[prefix + st.name] = _suite_args(call)

    visit(tree.body, "")
    return found


def kernel_marker_names(path: Path) -> list[str]:
    """Literal kernel names in ``pytest.mark.kernel("a", "b")`` anywhere in a file, in order."""
    return list(kernel_marker_sites(path))


def _mark_name(node: ast.AST) -> str:
    """``gpu`` for ``pytest.mark.gpu`` / ``pytest.mark.gpu(...)`` / ``mark.gpu``; "" otherwise."""
    if isinstance(node, ast.Call):
        node = node.func
    if not isinstance(node, ast.Attribute):
        return ""
    base = node.value
    return node.attr if (isinstance(base, ast.Attribute) and base.attr == "mark") or \
        (isinstance(base, ast.Name) and base.id == "mark") else ""


def kernel_marker_sites(path: Path) -> dict[str, bool]:
    """Literal kernel names of a file -> whether *every* marker naming it sits in a group (one
    decorator list, one list or tuple of marks) that also holds ``gpu`` or an unconditional
    ``skip``: such a kernel is used only by tests that skip on a machine without a GPU.

    A site outside such a group counts as ungated (a kernel may be warmed for nothing, never
    missed)."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return {}
    if b"kernel(" not in raw:
        return {}
    try:
        tree = ast.parse(raw, filename=str(path))
    except (SyntaxError, ValueError):
        return {}
    gated_calls: set[int] = set()
    for node in ast.walk(tree):
        group: list[ast.expr] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            group = node.decorator_list
        elif isinstance(node, (ast.List, ast.Tuple)):
            group = node.elts
        marks = {_mark_name(e) for e in group}
        if "gpu" in marks or "skip" in marks:  # skip takes no condition: it always skips
            gated_calls.update(id(e) for e in group if _is_mark_call(e, "kernel"))
    names: dict[str, bool] = {}
    for node in ast.walk(tree):
        if _is_mark_call(node, "kernel"):
            for a in node.args:  # type: ignore[attr-defined]
                v = _literal(a)
                if isinstance(v, str):
                    names[v] = names.get(v, True) and id(node) in gated_calls
    return names
