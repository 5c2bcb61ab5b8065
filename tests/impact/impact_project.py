"""A tiny git project with two C++ kernels (each with its own header), Python helpers, a data
file and docs, and a runner for ``pytest -p kernelcache`` on it in a subprocess.

Real everything: g++ builds the kernels through the loader, git computes the changes, pytest
(and xdist) run in subprocesses. The kernel cache is private to the project.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FILES = {
    "pyproject.toml": """\
[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["."]
kernelcache_specs = ["kspecs:specs"]
kernelcache_kernels = ["adder", "muler"]
""",
    "kspecs.py": """\
from kspec_add import spec as add_spec
from kspec_mul import spec as mul_spec


def specs():
    return [add_spec(), mul_spec()]
""",
    "kspec_add.py": """\
from pathlib import Path
import kernelcache as kc


def spec():
    return kc.KernelSpec(name="adder", sources=["add.cc"], root=Path(__file__).resolve().parent / "csrc",
                         include_dirs=["include"], functions={"add": "Callable[[int, int], int]"})
""",
    "kspec_mul.py": """\
from pathlib import Path
import kernelcache as kc


def spec():
    return kc.KernelSpec(name="muler", sources=["mul.cc"], root=Path(__file__).resolve().parent / "csrc",
                         include_dirs=["include"], functions={"mul": "Callable[[int, int], int]"})
""",
    "csrc/add.cc": """\
#include <tvm/ffi/function.h>
#include <cstdint>
#include "add_bias.h"
int64_t add(int64_t a, int64_t b) { return a + b + KC_ADD_BIAS; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add);
""",
    "csrc/include/add_bias.h": "#define KC_ADD_BIAS 0\n",
    "csrc/mul.cc": """\
#include <tvm/ffi/function.h>
#include <cstdint>
#include "mul_scale.h"
int64_t mul(int64_t a, int64_t b) { return a * b * KC_MUL_SCALE; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(mul, mul);
""",
    "csrc/include/mul_scale.h": "#define KC_MUL_SCALE 1\n",
    "mathlib.py": "def double(x):\n    return 2 * x\n",
    "data/expected.json": '{"answer": 42}\n',
    "docs/guide.md": "# Guide\n\nNothing a test reads.\n",
    "tests/conftest.py": "# shared fixtures would live here\n",
    "tests/test_add.py": """\
import pytest

pytestmark = pytest.mark.kernel("adder")


def test_add(kernelcache_module):
    assert kernelcache_module("adder").add(1, 2) == 3


@pytest.mark.parametrize("a", [0, 5])
def test_add_zero(kernelcache_module, a):
    assert kernelcache_module("adder").add(a, 0) == a
""",
    "tests/test_mul.py": """\
import pytest


@pytest.mark.kernel("muler")
def test_mul(kernelcache_module):
    assert kernelcache_module("muler").mul(3, 4) == 12


def test_mul_lazy():
    import kernelcache as kc
    from kspec_mul import spec

    assert kc.load(spec()).mul(2, 2) == 4
""",
    "tests/test_math.py": """\
import mathlib


def test_double():
    assert mathlib.double(21) == 42
""",
    "tests/test_data.py": """\
import json
from pathlib import Path


def test_answer():
    data = json.loads((Path(__file__).resolve().parents[1] / "data" / "expected.json").read_text())
    assert data["answer"] == 42
""",
    "tests/test_plain.py": "def test_truth():\n    assert 1 + 1 == 2\n",
}

ALL = {"tests/test_add.py::test_add", "tests/test_add.py::test_add_zero[0]", "tests/test_add.py::test_add_zero[5]",
       "tests/test_mul.py::test_mul", "tests/test_mul.py::test_mul_lazy", "tests/test_math.py::test_double",
       "tests/test_data.py::test_answer", "tests/test_plain.py::test_truth"}


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {proc.stderr}")
    return proc.stdout


@dataclass
class Run:
    rc: int
    out: str
    report: dict
    outcomes: dict[str, str] = field(default_factory=dict)

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

    def write(self, rel: str, text: str) -> None:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def edit(self, rel: str, old: str, new: str) -> None:
        p = self.path / rel
        text = p.read_text()
        assert old in text, (rel, old)
        p.write_text(text.replace(old, new, 1))

    def commit(self, msg: str = "edit") -> str:
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "-m", msg)
        return git(self.path, "rev-parse", "HEAD").strip()

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("KERNELCACHE_", "PYTEST_", "KC_")) and k not in ("CXX", "GITHUB_STEP_SUMMARY")}
        env.update({"KERNELCACHE_DIR": str(self.cache), "KERNELCACHE_LOCK_DIR": str(self.cache / "locks"),
                    "KERNELCACHE_LOG": "0", "PYTHONPATH": str(REPO), "KERNELCACHE_HARDWARE": "cpu"})
        return env

    def pytest(self, *args: str, workers: int = 0, timeout: float = 900) -> Run:
        report = self.path.parent / "report.json"
        report.unlink(missing_ok=True)
        xd = ["-p", "xdist", "-n", str(workers)] if workers else ["-p", "no:xdist"]
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "kernelcache", *xd, "-rA",
                               "--continue-on-collection-errors", f"--kc-report-json={report}", *args],
                              cwd=self.path, env=self.env(), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        data = json.loads(report.read_text()) if report.exists() else {}
        outcomes = {t["nodeid"]: t["outcome"] for t in data.get("tests", [])}
        return Run(proc.returncode, proc.stdout + proc.stderr, data, outcomes)

    def record(self, *args: str, workers: int = 0) -> Run:
        """A full run that writes the impact map."""
        return self.pytest(f"--kc-impact-map={self.map}", *args, workers=workers)

    def affected(self, since: str = "HEAD", *args: str, workers: int = 0, map_path: Path | None = None) -> Run:
        return self.pytest(f"--kc-affected-since={since}", f"--kc-impact-map={map_path or self.map}", *args,
                           workers=workers)


def make_project(base: Path) -> Project:
    path = base / "proj"
    for rel, text in FILES.items():
        p = path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "impact@example.invalid")
    git(path, "config", "user.name", "impact test")
    git(path, "config", "commit.gpgsign", "false")
    proj = Project(path, base / "kc-cache", base / "impact-map.json")
    proj.commit("initial")
    return proj
