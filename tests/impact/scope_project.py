"""What the generated project (:mod:`.gen_project`) gains for the record side of issue 38: kernels
loaded by fixtures of every scope (session and package in a conftest, module in a conftest, class
in a test file), a kernel loaded at module import (``MOD = kc.load(spec)``), a golden value a
conftest reads at import, a value a module-scoped fixture reads at setup, and two tests that read
a data file through a subprocess (one of them declares that input in the ini list).

Each kernel has its own header, so an edit of one selects exactly the tests that use it.
"""
from __future__ import annotations

from .gen_project import FILES as GEN_FILES

KERNEL = ('#include <tvm/ffi/c_api.h>\n#include "../common/export.h"\n#include "{n}.h"\n'
          "KC_EXPORT(f{n}, {N}_VALUE)\n")
VALUES = {"e": 50, "f": 60, "g": 70, "h": 80}

PYPROJECT = GEN_FILES["pyproject.toml"] + (
    'kernelcache_impact_declared = ["tests/scoped/test_sub.py::test_sub_declared = data/sub_input.txt"]\n')

SCOPE_FILES = {
    **{f"csrc/kern_{n}/{n}.cc": KERNEL.format(n=n, N=n.upper()) for n in VALUES},
    **{f"csrc/kern_{n}/{n}.h": f"#define {n.upper()}_VALUE {v}\n" for n, v in VALUES.items()},
    "data/conftest_golden.txt": "7\n",
    "data/mod_value.txt": "5\n",
    "data/sub_input.txt": "9\n",
    "scopedspecs.py": """\
from pathlib import Path

import kernelcache as kc

CSRC = Path(__file__).resolve().parent / "csrc"


def spec(n):
    return kc.KernelSpec(name=f"k{n}", sources=[f"{n}.cc"], root=CSRC / f"kern_{n}")
""",
    "tests/scoped/__init__.py": "",
    "tests/scoped/conftest.py": """\
from pathlib import Path

import pytest

import kernelcache as kc
from scopedspecs import spec

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = int((ROOT / "data" / "conftest_golden.txt").read_text())


@pytest.fixture(scope="session")
def kern_e():
    return kc.load(spec("e"))


@pytest.fixture(scope="package")
def kern_f():
    return kc.load(spec("f"))


@pytest.fixture(scope="module")
def mod_value():
    return int((ROOT / "data" / "mod_value.txt").read_text())


@pytest.fixture
def golden():
    return GOLDEN
""",
    "tests/scoped/test_s1.py": """\
def test_e1(kern_e):
    assert kern_e.fe(0) == 50


def test_f1(kern_f):
    assert kern_f.ff(0) == 60


def test_golden(golden):
    assert golden == 7
""",
    "tests/scoped/test_s2.py": """\
import pytest

import kernelcache as kc
from scopedspecs import spec


def test_e2a(kern_e):
    assert kern_e.fe(1) == 51


def test_e2b(kern_e):
    assert kern_e.fe(2) == 52


def test_f2(kern_f):
    assert kern_f.ff(1) == 61


def test_mod_a(mod_value):
    assert mod_value == 5


class TestH:
    @pytest.fixture(scope="class")
    def kern_h(self):
        return kc.load(spec("h"))

    def test_h1(self, kern_h):
        assert kern_h.fh(0) == 80

    def test_h2(self, kern_h):
        assert kern_h.fh(1) == 81
""",
    "tests/scoped/test_s3.py": """\
def test_mod_b(mod_value):
    assert mod_value + 1 == 6
""",
    "tests/scoped/test_m.py": """\
import kernelcache as kc
from scopedspecs import spec

MOD = kc.load(spec("g"))


def test_g1():
    assert MOD.fg(0) == 70


def test_g2():
    assert MOD.fg(1) == 71
""",
    "tests/scoped/test_sub.py": """\
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READ = "print(open('data/sub_input.txt').read().strip())"


def test_sub():
    out = subprocess.run([sys.executable, "-S", "-c", READ], cwd=ROOT, capture_output=True, text=True).stdout
    assert out.strip() == "9"


def test_sub_declared():
    out = subprocess.run([sys.executable, "-S", "-c", READ], cwd=ROOT, capture_output=True, text=True).stdout
    assert out.strip() == "9"
""",
}

FILES = {**GEN_FILES, "pyproject.toml": PYPROJECT, **SCOPE_FILES}
S = "tests/scoped/"
SCOPED_TESTS = {f"{S}test_s1.py::test_e1", f"{S}test_s1.py::test_f1", f"{S}test_s1.py::test_golden",
                f"{S}test_s2.py::test_e2a", f"{S}test_s2.py::test_e2b", f"{S}test_s2.py::test_f2",
                f"{S}test_s2.py::test_mod_a", f"{S}test_s2.py::TestH::test_h1", f"{S}test_s2.py::TestH::test_h2",
                f"{S}test_s3.py::test_mod_b", f"{S}test_m.py::test_g1", f"{S}test_m.py::test_g2",
                f"{S}test_sub.py::test_sub", f"{S}test_sub.py::test_sub_declared"}
