"""A tiny git project with two C++ kernels (each with its own header), Python helpers, a data
file and docs; runs are fresh ``pytest -p kernelcache`` subprocesses (xdist too) through
:mod:`.project`. The kernel cache is private to the project.
"""
from __future__ import annotations

from pathlib import Path

from .project import Project, git
from .project import make_project as _make_project

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


def make_project(base: Path) -> Project:
    return _make_project(base, FILES)


__all__ = ["ALL", "FILES", "Project", "git", "make_project"]
