"""Rerun by name: resolve file names and test ids to test files, suites and runner labels.

Used by the pytest plugin (``--kc-run``) and by ``ci/rerun-test``. This module imports no
pytest and no test module: suite markers are read with :mod:`ast`, so resolving a name never
runs test code and works on a machine that lacks the test dependencies.

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
import fnmatch
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
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
            import glob

            roots += [Path(p) for p in sorted(glob.glob(pat, recursive=True))]
        else:
            roots.append(Path(pat))
    roots = [r for r in roots if r.exists()]
    return roots or [Path(rootdir)]


def testpaths_from_pyproject(rootdir: Path) -> list[str]:
    """``[tool.pytest.ini_options] testpaths`` of ``rootdir/pyproject.toml`` (or ``[]``)."""
    pp = Path(rootdir) / "pyproject.toml"
    try:
        data = _load_toml(pp)
    except (OSError, ValueError):
        return []
    tp = data.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("testpaths", [])
    return [tp] if isinstance(tp, str) else list(tp)


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
            import difflib

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
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return []
    if b"kernel(" not in raw:
        return []
    try:
        tree = ast.parse(raw, filename=str(path))
    except (SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if _is_mark_call(node, "kernel"):
            for a in node.args:  # type: ignore[attr-defined]
                v = _literal(a)
                if isinstance(v, str) and v not in names:
                    names.append(v)
    return names


# -- suite table and runner labels ----------------------------------------------------------------
def _load_toml(path: Path) -> dict:
    raw = Path(path).read_bytes()
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise ValueError(f"{path}: reading TOML needs Python 3.11 or `pip install tomli` "
                             "(or write the table as .json)") from None
    try:
        return tomllib.loads(raw.decode())
    except Exception as e:  # noqa: BLE001 - TOMLDecodeError
        raise ValueError(f"{path}: {e}") from None


@dataclass
class SuiteTable:
    """The CI suite table (``ci/suites.toml``): runner labels and which files run where.

    ``runners.<label>``: ``runs_on`` (the CI machine label, default the label itself),
    ``gpus`` (GPUs such a machine has; used to detect the current runner), ``pytest_args``.
    ``suites.<stage>``: ``runner`` and ``files`` (globs relative to the repo root).
    ``default_runner``: where a file without a marker or table entry goes.
    """

    runners: dict[str, dict] = field(default_factory=dict)
    suites: dict[str, dict] = field(default_factory=dict)
    default_runner: str = "cpu"
    pytest_args: list[str] = field(default_factory=list)
    path: str = ""

    @classmethod
    def load(cls, path: Path | str | None) -> "SuiteTable":
        if path is None:
            return cls()
        p = Path(path)
        data = json.loads(p.read_text()) if p.suffix == ".json" else _load_toml(p)
        t = cls(
            runners={k: dict(v) for k, v in data.get("runners", {}).items()},
            suites={k: dict(v) for k, v in data.get("suites", {}).items()},
            default_runner=str(data.get("default_runner", "cpu")),
            pytest_args=[str(a) for a in data.get("pytest_args", [])],
            path=str(p),
        )
        for stage, s in t.suites.items():
            if "runner" in s and not isinstance(s["runner"], str):
                raise ValueError(f"{p}: suites.{stage}.runner must be a string")
        return t

    def suite_for_file(self, relpath: str) -> str | None:
        for stage, s in self.suites.items():
            for pat in s.get("files", []):
                if fnmatch.fnmatch(relpath, pat):
                    return stage
        return None

    def runner_of_stage(self, stage: str | None) -> str | None:
        if stage and stage in self.suites:
            r = self.suites[stage].get("runner")
            return str(r) if r else None
        return None

    def runs_on(self, runner: str) -> str:
        return str(self.runners.get(runner, {}).get("runs_on", runner))

    def runner_args(self, runner: str) -> list[str]:
        return [str(a) for a in self.runners.get(runner, {}).get("pytest_args", [])]


@dataclass
class Placement:
    """Where one resolved test runs, and why (which marker or table entry decided)."""

    resolved: Resolved
    stage: str | None
    runner: str
    source: str  # "marker:<scope>" | "table" | "default"

    def as_dict(self) -> dict:
        return {**self.resolved.as_dict(), "stage": self.stage, "runner": self.runner, "source": self.source}


def place(r: Resolved, table: SuiteTable) -> Placement:
    """Suite marker (function > class > module), then the table's file globs, then the default."""
    stage = runner = None
    source = ""
    if r.path.is_file():
        marks = read_suite_markers(r.path)
        scopes = []
        if r.selector:
            parts = r.selector.split("[", 1)[0].split("::")
            for i in range(len(parts), 0, -1):
                scopes.append("::".join(parts[:i]))
        scopes.append("")
        for sc in scopes:
            if sc in marks:
                stage, runner = marks[sc]
                source = f"marker:{sc or 'module'}"
                break
    if stage is None:
        stage = table.suite_for_file(r.relpath)
        if stage is not None and not source:
            source = "table"
    if runner is None:
        runner = table.runner_of_stage(stage)
        if runner is not None and not source:
            source = "table"
    if runner is None:
        runner = table.default_runner
        source = source or "default"
    return Placement(r, stage, runner, source)


@dataclass
class Group:
    runner: str
    runs_on: str
    placements: list[Placement]
    argv: list[str]

    @property
    def command(self) -> str:
        import shlex

        return shlex.join(self.argv)

    def as_dict(self) -> dict:
        return {"runner": self.runner, "runs_on": self.runs_on, "command": self.command, "argv": self.argv,
                "tests": [p.as_dict() for p in self.placements]}


def group_by_runner(resolved: Sequence[Resolved], table: SuiteTable,
                    python: str = "python", extra_args: Sequence[str] = ()) -> list[Group]:
    """One group (and one pytest command) per runner label, in first-seen order."""
    groups: dict[str, list[Placement]] = {}
    for r in resolved:
        p = place(r, table)
        groups.setdefault(p.runner, []).append(p)
    out = []
    for runner, ps in groups.items():
        argv = [python, "-m", "pytest", "-p", "kernelcache", *table.pytest_args, *table.runner_args(runner),
                *extra_args, "--kc-run", *[p.resolved.nodeid for p in ps]]
        out.append(Group(runner, table.runs_on(runner), ps, argv))
    return out


# -- hardware (GPU detection without a CUDA context) ----------------------------------------------
def arch_tuple(arch: Any) -> tuple[int, int]:
    """``"9.0"``, ``"9.0a"``, ``"sm_90"``, ``"90"``, ``9.0`` -> ``(9, 0)``."""
    s = str(arch).strip().lower().replace("sm_", "").replace("compute_", "")
    if "." in s:
        major, _, minor = s.partition(".")
    else:
        digits = "".join(c for c in s if c.isdigit())
        if len(digits) < 2:
            raise ValueError(f"cannot parse GPU arch {arch!r} (expected e.g. 9.0, sm_90)")
        major, minor = digits[:-1], digits[-1]
    minor_digits = "".join(c for c in minor if c.isdigit())
    if not major.isdigit() or not minor_digits:
        raise ValueError(f"cannot parse GPU arch {arch!r} (expected e.g. 9.0, sm_90)")
    return int(major), int(minor_digits)


def _visible_filter(gpus: list[dict]) -> list[dict]:
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return gpus
    toks = [t.strip() for t in cvd.split(",") if t.strip()]
    keep = []
    for t in toks:
        if t.lstrip("-").isdigit():
            i = int(t)
            if i < 0:
                break  # CUDA stops at the first invalid index
            match = [g for g in gpus if g.get("index") == i]
        else:
            match = [g for g in gpus if str(g.get("uuid", "")).startswith(t)]
        if not match:
            break
        keep += [g for g in match if g not in keep]
    return keep


def detect_gpus(timeout: float = 10.0) -> dict:
    """GPUs visible to this process, via ``nvidia-smi`` with a time limit (never a CUDA context).

    Returns ``{"count", "gpus": [{"index", "name", "arch", "memory_mib", "uuid"}], "source",
    "note"}``; honours ``CUDA_VISIBLE_DEVICES``.
    """
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"count": 0, "gpus": [], "source": "nvidia-smi", "note": "nvidia-smi not found"}
    try:
        proc = subprocess.run(
            [smi, "--query-gpu=index,name,compute_cap,memory.total,uuid", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return {"count": 0, "gpus": [], "source": "nvidia-smi", "note": f"nvidia-smi timed out after {timeout:g}s"}
    except OSError as e:
        return {"count": 0, "gpus": [], "source": "nvidia-smi", "note": f"nvidia-smi failed: {e}"}
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        return {"count": 0, "gpus": [], "source": "nvidia-smi",
                "note": f"nvidia-smi exit {proc.returncode}: {err[0] if err else ''}".strip()}
    gpus = []
    for line in proc.stdout.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 3 or not cols[0].isdigit():
            continue
        try:
            mem = int(float(cols[3])) if len(cols) > 3 else None
        except ValueError:
            mem = None
        gpus.append({"index": int(cols[0]), "name": cols[1], "arch": cols[2], "memory_mib": mem,
                     "uuid": cols[4] if len(cols) > 4 else ""})
    gpus = _visible_filter(gpus)
    note = "" if gpus else ("CUDA_VISIBLE_DEVICES hides every GPU" if os.environ.get("CUDA_VISIBLE_DEVICES")
                            is not None else "nvidia-smi lists no GPU")
    return {"count": len(gpus), "gpus": gpus, "source": "nvidia-smi", "note": note}


def parse_hardware(value: str) -> dict | None:
    """Override for detection: ``auto`` -> None (detect); ``cpu``/``none``/``0``; ``2x9.0``;
    ``8.0,9.0`` (one arch per GPU); an optional ``cuda:`` prefix."""
    v = (value or "").strip().lower()
    if v in ("", "auto"):
        return None
    if v.startswith("cuda:"):
        v = v[5:]
    if v in ("cpu", "none", "0"):
        return {"count": 0, "gpus": [], "source": "override", "note": f"--kc-hardware={value}"}
    archs: list[str] = []
    for tok in v.replace(" ", "").split(","):
        if not tok:
            continue
        n, x, arch = tok.partition("x")
        if x and n.isdigit():
            archs += [arch] * int(n)
        else:
            archs.append(tok)
    for a in archs:
        arch_tuple(a)  # validate
    gpus = [{"index": i, "name": "simulated", "arch": a, "memory_mib": None, "uuid": ""} for i, a in enumerate(archs)]
    return {"count": len(gpus), "gpus": gpus, "source": "override", "note": f"--kc-hardware={value}"}


def gpu_requirement_problem(hw: dict, count: int = 1, min_arch: Any = None) -> str | None:
    """Why ``hw`` does not satisfy ``gpu(count, min_arch)``; None when it does."""
    need = f"{count} GPU{'s' if count != 1 else ''}" + (f" with arch >= {min_arch}" if min_arch else "")
    gpus = hw.get("gpus", [])
    if not gpus:
        note = hw.get("note") or "no GPU detected"
        return f"needs {need}: no GPU found ({note})"
    if min_arch:
        want = arch_tuple(min_arch)
        ok = [g for g in gpus if arch_tuple(g["arch"]) >= want]
        if len(ok) < count:
            found = ", ".join(str(g["arch"]) for g in gpus)
            if len(gpus) >= count:
                return f"needs {need}: GPU arch too old (found {found})"
            return f"needs {need}: found {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} (arch {found})"
    if len(gpus) < count:
        return f"needs {need}: found only {len(gpus)}"
    return None


def current_runner(table: SuiteTable, env: dict | None = None, hw: dict | None = None) -> tuple[str, str]:
    """(runner label, how it was decided): ``KERNELCACHE_RUNNER``, else by detected GPU count."""
    env = os.environ if env is None else env
    label = env.get("KERNELCACHE_RUNNER", "").strip()
    if label:
        return label, "KERNELCACHE_RUNNER"
    hw = detect_gpus() if hw is None else hw
    n = int(hw.get("count", 0))
    best = None
    for name, r in table.runners.items():
        g = int(r.get("gpus", 0) or 0)
        if g <= n and (best is None or g > best[1]):
            best = (name, g)
    if best is None:
        return table.default_runner, f"default ({n} GPU(s) detected)"
    return best[0], f"detected {n} GPU(s)"
