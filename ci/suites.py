"""The CI suite table (``ci/suites.toml``) and runner placement, for ``ci/rerun-test``.

Why here and not in the package: which runner label a test file runs on is this repository's
CI policy, not something a user of kernelcache needs at run time. The package never imports
``ci/``; this module imports the package's name resolution and GPU detection (one source each).

Placement of one resolved test: a ``suite(stage, runner)`` marker in the file (test > class >
module, read with :mod:`ast`) wins, then the table's file globs, then its ``default_runner``.
A file (or class) whose tests sit on several runners is split (:func:`split`): each runner gets
the scopes placed on it, and ``--kc-runner``/``--kc-placed`` let the plugin there deselect the
nested scopes placed elsewhere (so no test runs twice, nor on the wrong runner).
"""
from __future__ import annotations

import ast
import fnmatch
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from kernelcache.base.settings import kc_environ
from kernelcache.host.gpu import detect_gpus

from kernelcache.pytest_plugin.names import Resolved, read_suite_markers


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
    placed: dict[str, str] = field(default_factory=dict)  # nested node-id scope -> its runner

    def as_dict(self) -> dict:
        return {**self.resolved.as_dict(), "stage": self.stage, "runner": self.runner, "source": self.source,
                "placed": dict(self.placed)}


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


def _under(scope: str, outer: str) -> bool:
    """``scope`` is ``outer`` or lies inside it (``""`` is the whole file)."""
    return not outer or scope == outer or scope.startswith(outer + "::")


def _at(r: Resolved, selector: str) -> Resolved:
    return Resolved(r.spec, r.path, r.relpath, selector)


def static_tests(path: Path) -> list[str]:
    """Test scopes pytest's default rules would find in a file, read with :mod:`ast`:
    ``test_x``, ``TestX::test_y``; a ``Test*`` class with base classes counts whole (``TestX``),
    as its inherited tests are unknown here. ``[]`` when the file cannot be parsed."""
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    out: list[str] = []

    def visit(body: Iterable[ast.stmt], prefix: str) -> None:
        for st in body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name.startswith("test"):
                out.append(prefix + st.name)
            elif isinstance(st, ast.Assign) and not prefix:  # test_x = make_test(...)
                out.extend(t.id for t in st.targets if isinstance(t, ast.Name) and t.id.startswith("test"))
            elif isinstance(st, ast.ClassDef) and st.name.startswith("Test"):
                if st.bases:
                    out.append(prefix + st.name)
                visit(st.body, prefix + st.name + "::")

    visit(tree.body, "")
    return out


def split(r: Resolved, table: SuiteTable) -> list[Placement]:
    """One placement per runner that ``r``'s tests sit on: ``r`` itself on its own runner (when
    some test there stays on it), the outermost scopes placed on another runner as their own
    placements; each with ``placed``, the nested scopes under it whose runner differs from their
    enclosing scope's (what the plugin there needs to deselect the others' tests)."""
    base = place(r, table)
    if not r.path.is_file():
        return [base]
    sel = r.selector.split("[", 1)[0]
    nested = sorted((s for s in read_suite_markers(r.path) if s and s != sel and _under(s, sel)),
                    key=lambda s: s.count("::"))
    if not nested:
        return [base]
    at = {s: place(_at(r, s), table) for s in nested}
    changes: dict[str, str] = {}  # scope -> runner, where it differs from the enclosing scope's
    for s in nested:
        parent = max((o for o in [sel, *nested] if o != s and _under(s, o) and (o == sel or o in at)),
                     key=len)
        if at[s].runner != (at[parent].runner if parent in at else base.runner):
            changes[s] = at[s].runner
    if not changes:
        return [base]
    tests = [t for t in static_tests(r.path) if _under(t, sel)]

    def runner_of(t: str) -> str:
        return place(_at(r, t), table).runner

    def has_tests(scope: str, runner: str) -> bool:
        return not tests or any(_under(t, scope) and runner_of(t) == runner for t in tests)

    def placed_under(scope: str) -> dict[str, str]:
        return {f"{r.relpath}::{s}": v for s, v in changes.items() if s != scope and _under(s, scope)}

    out = [Placement(base.resolved, base.stage, base.runner, base.source, placed_under(sel))] \
        if has_tests(sel, base.runner) else []
    for s, runner in changes.items():
        outer = [o for o, v in changes.items() if v == runner and o != s and _under(s, o)]
        if runner != base.runner and not outer and has_tests(s, runner):
            p = at[s]
            out.append(Placement(p.resolved, p.stage, runner, p.source, placed_under(s)))
    if not out:
        return [base]
    if not any(p.runner == base.runner for p in out) and len({p.runner for p in out}) == 1:
        # every test elsewhere, on one runner (a file of per-test GPU markers): the whole file there
        placed = placed_under(sel)
        if all(v == out[0].runner for v in placed.values()):
            placed = {}
        return [Placement(base.resolved, out[0].stage, out[0].runner, out[0].source, placed)]
    return out


def merge(placements: Iterable[Placement]) -> dict[str, Placement]:
    """One runner's placements by node id, without those an enclosing one already runs (a file
    and a test in it: pytest before 8 would run that test twice)."""
    by_id: dict[str, Placement] = {}
    for p in placements:
        by_id.setdefault(p.resolved.nodeid, p)
    return {n: p for n, p in by_id.items()
            if not any(o != n and (n.startswith(o + "::") or n.startswith(o + "[")) for o in by_id)}


def pytest_argv(python: str, table: SuiteTable, runner: str, placements: Sequence[Placement],
                middle: Sequence[str]) -> list[str]:
    """The pytest command line of one runner's group, up to (not including) the test args;
    ``--kc-runner``/``--kc-placed`` only where a scope of these tests is placed elsewhere."""
    placed = {k: v for p in placements for k, v in p.placed.items()}
    flags = [f"--kc-runner={runner}", *(f"--kc-placed={k}={v}" for k, v in placed.items())] if placed else []
    return [python, "-m", "pytest", "-p", "kernelcache", *table.pytest_args, *table.runner_args(runner),
            *middle, *flags]


@dataclass
class Group:
    runner: str
    runs_on: str
    placements: list[Placement]
    argv: list[str]

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def as_dict(self) -> dict:
        return {"runner": self.runner, "runs_on": self.runs_on, "command": self.command, "argv": self.argv,
                "tests": [p.as_dict() for p in self.placements]}


def group_by_runner(resolved: Sequence[Resolved], table: SuiteTable,
                    python: str = "python", extra_args: Sequence[str] = ()) -> list[Group]:
    """One group (and one pytest command) per runner label, in first-seen order."""
    groups: dict[str, list[Placement]] = {}
    for r in resolved:
        for p in split(r, table):
            groups.setdefault(p.runner, []).append(p)
    out = []
    for runner, all_ps in groups.items():
        by_id = merge(all_ps)
        ps = list(by_id.values())
        argv = [*pytest_argv(python, table, runner, ps, extra_args), "--kc-run", *by_id]
        out.append(Group(runner, table.runs_on(runner), ps, argv))
    return out


def testpaths_from_pyproject(rootdir: Path) -> list[str]:
    """``[tool.pytest.ini_options] testpaths`` of ``rootdir/pyproject.toml`` (or ``[]``)."""
    pp = Path(rootdir) / "pyproject.toml"
    try:
        data = _load_toml(pp)
    except (OSError, ValueError):
        return []
    tp = data.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("testpaths", [])
    return [tp] if isinstance(tp, str) else list(tp)


def current_runner(table: SuiteTable, env: Mapping[str, str] | None = None,
                   hw: dict | None = None) -> tuple[str, str]:
    """(runner label, how it was decided): ``KERNELCACHE_RUNNER``, else by detected GPU count."""
    env = kc_environ() if env is None else env
    label = (env.get("KERNELCACHE_RUNNER") or "").strip()
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
