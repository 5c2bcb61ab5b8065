"""One runner for the generated test-impact projects: a git project written from a file dict,
and ``pytest -p kernelcache`` on it — forked from a :mod:`.zygote` (many short runs: the property
test, the scenarios) or in a fresh subprocess (xdist workers, the plugin's own process).

Real everything: g++ builds the kernels through the loader, git computes the changes, pytest runs
the project's tests. The kernel cache is private to the project. The projects' files live in
:mod:`.gen_project` (three kernels, one specs module) and :mod:`.impact_project` (two kernels).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)(?: - (.*))?$", re.M)


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def _rewrite(p: Path, text: str) -> None:
    """Write ``text``; a file rewritten within the second it was last written gets its mtime one
    second on. Python trusts a bytecode cache whose recorded source mtime (whole seconds) and size
    match: an edit of the same size right after the run that cached the old code would otherwise
    run the old code in the next full run (the ground truth these tests compare selection with)."""
    try:
        before = p.stat().st_mtime_ns
    except FileNotFoundError:
        before = None
    p.write_text(text)
    if before is not None and p.stat().st_mtime_ns // 10**9 <= before // 10**9:
        later = (before // 10**9 + 1) * 10**9
        os.utime(p, ns=(later, later))


class Zygote:
    """One :mod:`.zygote` process (started and stopped by its owner, by pid)."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "PYTEST_"))}
        env["PYTHONPATH"] = str(REPO)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.impact.zygote"], cwd=REPO, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert json.loads(self.proc.stdout.readline() or "{}").get("ready"), "zygote did not start"

    def run(self, cwd: Path, args: list[str], env: dict[str, str], log: Path) -> int:
        self.proc.stdin.write(json.dumps({"cwd": str(cwd), "args": args, "env": env, "log": str(log)}) + "\n")
        self.proc.stdin.flush()
        return int(json.loads(self.proc.stdout.readline())["rc"])

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


@dataclass
class Run:
    rc: int
    out: str
    report: dict
    outcomes: dict[str, str] = field(default_factory=dict)  # nodeid -> outcome (the JSON report)
    # nodeid (or a test file that did not collect) -> (OUTCOME, message) from the -rA summary
    summary: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def impact(self) -> dict:
        return self.report.get("impact") or {}

    @property
    def selection(self) -> dict:
        return self.impact.get("selection") or {}


@dataclass
class Project:
    path: Path
    cache: Path
    map: Path
    zygote: Zygote | None = None  # None: each run is a fresh ``python -m pytest``

    def write(self, rel: str, text: str) -> None:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        _rewrite(p, text)

    def edit(self, rel: str, old: str, new: str) -> None:
        p = self.path / rel
        text = p.read_text()
        assert old in text, (rel, old)
        _rewrite(p, text.replace(old, new, 1))

    def commit(self, msg: str = "edit") -> str:
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--allow-empty", "-m", msg)
        return self.head()

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD").strip()

    def env(self) -> dict[str, str]:
        """The project's variables (a zygote child starts from the zygote's environment less
        every KERNELCACHE_/PYTEST_ variable). ``CI`` always: pytest then puts each failure's whole
        message in the ``-rA`` summary (:attr:`Run.summary`), where outside CI it trims it to the
        terminal's width (``AssertionError: assert...``) — the same run would otherwise compare
        differently in and outside CI."""
        return {"KERNELCACHE_DIR": str(self.cache), "KERNELCACHE_LOCK_DIR": str(self.cache / "locks"),
                "KERNELCACHE_LOG": "0", "KERNELCACHE_HARDWARE": "cpu", "CI": "true"}

    def pytest(self, *args: str, workers: int = 0, timeout: float = 900) -> Run:
        report = self.path.parent / "report.json"
        report.unlink(missing_ok=True)
        common = ["-rA", "--continue-on-collection-errors", f"--kc-report-json={report}", *args]
        if self.zygote is not None:
            assert not workers, "zygote runs are single-process"
            log = self.path.parent / "pytest.log"
            # the project needs only -p kernelcache: no scan of every installed plugin per run
            env = {**self.env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
            rc = self.zygote.run(self.path, ["-p", "kernelcache", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                                             *common], env, log)
            out = log.read_text(errors="replace")
        else:
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("KERNELCACHE_", "PYTEST_", "KC_")) and k not in ("CXX", "GITHUB_STEP_SUMMARY")}
            env.update(self.env(), PYTHONPATH=str(REPO))
            xd = ["-p", "xdist", "-n", str(workers)] if workers else ["-p", "no:xdist"]
            proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "kernelcache", *xd, *common], cwd=self.path,
                                  env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
            rc, out = proc.returncode, proc.stdout + proc.stderr
        data = json.loads(report.read_text()) if report.exists() else {}
        return Run(rc, out, data, {t["nodeid"]: t["outcome"] for t in data.get("tests", [])},
                   {m.group(2): (m.group(1), m.group(3) or "") for m in _SUMMARY.finditer(out)})

    def record(self, *args: str, workers: int = 0) -> Run:
        """A run that writes (merges into) the impact map."""
        return self.pytest(f"--kc-impact-map={self.map}", *args, workers=workers)

    def affected(self, since: str = "HEAD", *args: str, workers: int = 0, map_path: Path | None = None) -> Run:
        """The plugin's selection (add ``--collect-only`` to collect only)."""
        return self.pytest(f"--kc-affected-since={since}", f"--kc-impact-map={map_path or self.map}", *args,
                           workers=workers)


def make_project(base: Path, files: dict[str, str], zygote: Zygote | None = None) -> Project:
    """``files`` written under ``base/proj``, committed in a new git repository."""
    path = base / "proj"
    for rel, text in files.items():
        p = path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "impact@example.invalid")
    git(path, "config", "user.name", "impact test")
    git(path, "config", "commit.gpgsign", "false")
    proj = Project(path, base / "kc-cache", base / "impact-map.json", zygote)
    proj.commit("initial")
    return proj
