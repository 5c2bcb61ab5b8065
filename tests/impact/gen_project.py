"""A small project as a new user writes one: three tiny C++ kernels declared in one specs module
(a header outside a kernel's root but under another's, a macro include, ``.cuh``/``.cu`` headers, a header found
through ``-I../common`` that a file under the root would shadow), a data file next to a kernel's
sources read when its test module is imported, a data file read while a test runs, Python
helpers (a backslash-continued import, ``importlib.import_module("literal")``), a README that a
doc test reads, docs nothing reads, a conftest.

The kernels export plain C-ABI functions (``tvm/ffi/c_api.h`` only), so a rebuild takes a
fraction of a second. Runs go through :mod:`.zygote` (pytest and tvm-ffi imported once, one
fork per run; the runner is :mod:`.project`). Every test's outcome is a function of the contents
of the files it depends on.
"""
from __future__ import annotations

from pathlib import Path

from .project import Project, Zygote, git
from .project import make_project as _make_project

EXPORT = ("#define KC_EXPORT(name, expr) extern \"C\" int __tvm_ffi_##name(void*, const TVMFFIAny* args, "
          "int32_t n, TVMFFIAny* ret) { ret->type_index = kTVMFFIInt; ret->zero_padding = 0; "
          "ret->v_int64 = (expr) + args[0].v_int64; return 0; }\n")

FILES = {
    ".gitignore": "__pycache__/\n.pytest_cache/\n",
    "pyproject.toml": """\
[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["."]
kernelcache_specs = ["kspecs:specs"]
kernelcache_kernels = ["ka", "kb", "kc"]
""",
    "kspecs.py": """\
from pathlib import Path

import kernelcache as kc

CSRC = Path(__file__).resolve().parent / "csrc"


def spec_a():
    return kc.KernelSpec(name="ka", sources=["a.cc"], root=CSRC / "kern_a", include_dirs=[".", "../common"])


def spec_b():
    return kc.KernelSpec(name="kb", sources=["kern_b/b.cc"], root=CSRC, include_dirs=["kern_b"])


def spec_c():
    return kc.KernelSpec(name="kc", sources=["c.cc"], root=CSRC / "kern_c")


def specs():
    return [spec_a(), spec_b(), spec_c()]
""",
    "csrc/common/export.h": EXPORT,
    "csrc/common/shared.h": "#define SHARED_VALUE 100\n",
    "csrc/common/a_extra.h": "#define A_EXTRA 10\n",
    "csrc/kern_a/a.cc": '#include <tvm/ffi/c_api.h>\n#include "export.h"\n#include "a.h"\n#include "shared.h"\n'
                        "KC_EXPORT(fa, A_VALUE + SHARED_VALUE)\n",
    "csrc/kern_a/a.h": '#include "../common/a_extra.h"\n#define A_VALUE (1 + A_EXTRA)\n',
    "csrc/kern_b/b.cc": '#include <tvm/ffi/c_api.h>\n#include "../common/export.h"\n#define B_CFG "b_cfg.h"\n'
                        '#include B_CFG\n#include "b.h"\nKC_EXPORT(fb, B_VALUE)\n',
    "csrc/kern_b/b.h": "#define B_VALUE (2 + B_CFG_VALUE)\n",
    "csrc/kern_b/b_cfg.h": "#define B_CFG_VALUE 20\n",
    "csrc/kern_b/golden.txt": "22\n",
    "csrc/kern_c/c.cc": '#include <tvm/ffi/c_api.h>\n#include "../common/export.h"\n#include "c.cuh"\n'
                        "KC_EXPORT(fc, C_VALUE)\n",
    "csrc/kern_c/c.cuh": '#include "c_impl.cu"\n#define C_VALUE (C_IMPL * 1)\n',
    "csrc/kern_c/c_impl.cu": "#define C_IMPL 3\n",
    "data/c_input.json": '{"x": 5}\n',
    "pyutil/__init__.py": "",
    "pyutil/base.py": "def base_value():\n    return 7\n",
    "pyutil2.py": "EXTRA = 1\n",
    "pyhelp.py": "import importlib\nfrom pyutil import \\\n    base\n\n\ndef helper():\n"
                 "    return base.base_value() + importlib.import_module(\"pyutil2\").EXTRA\n",
    "README.md": "# Project\n\n<!-- answer: 42 -->\n",
    "docs/notes.md": "# Notes\n\nNothing reads this.\n",
    "tests/conftest.py": "# shared fixtures would live here\n",
    "tests/test_a.py": """\
import pytest

pytestmark = pytest.mark.kernel("ka")


def test_a(kernelcache_module):
    assert kernelcache_module("ka").fa(0) == 111


def test_a_plus(kernelcache_module):
    assert kernelcache_module("ka").fa(1) == 112
""",
    "tests/test_b.py": """\
from pathlib import Path

import pytest

import kernelcache as kc
from kspecs import spec_b

GOLDEN = int((Path(__file__).resolve().parents[1] / "csrc" / "kern_b" / "golden.txt").read_text())


@pytest.mark.parametrize("x", [0, 1])
def test_b(x):
    assert kc.load(spec_b()).fb(x) == GOLDEN + x
""",
    "tests/test_c.py": """\
import json
from pathlib import Path

import pytest

import kspecs


@pytest.mark.kernel("kc")
def test_c(kernelcache_module):
    assert kspecs.spec_c().name == "kc"
    x = json.loads((Path(__file__).resolve().parents[1] / "data" / "c_input.json").read_text())["x"]
    assert kernelcache_module("kc").fc(x) == 8
""",
    "tests/test_py.py": "from pyhelp import helper\n\n\ndef test_py():\n    assert helper() == 8\n",
    "tests/test_doc.py": """\
from pathlib import Path


def test_readme_answer():
    assert "answer: 42" in (Path(__file__).resolve().parents[1] / "README.md").read_text()
""",
    "tests/test_plain.py": "def test_truth():\n    assert 1 + 1 == 2\n",
}

# A kernel no specs module declares, loaded with ``kc.load(spec)`` inside its test: on a warm cache
# that load is recalled (no source opened), and its impact record must still name its inputs.
UNDECLARED_FILES = {
    "csrc/kern_d/d.cc": '#include <tvm/ffi/c_api.h>\n#include "../common/export.h"\n#include "d.h"\n'
                        "KC_EXPORT(fd, D_VALUE)\n",
    "csrc/kern_d/d.h": "#define D_VALUE 40\n",
    "tests/test_d.py": """\
from pathlib import Path

import kernelcache as kc

ROOT = Path(__file__).resolve().parents[1] / "csrc" / "kern_d"


def test_d():
    spec = kc.KernelSpec(name="kd", sources=["d.cc"], root=ROOT)
    assert kc.load(spec).fd(2) == 42
""",
}
UNDECLARED_TESTS = {"tests/test_d.py::test_d"}

ALL = {"tests/test_a.py::test_a", "tests/test_a.py::test_a_plus", "tests/test_b.py::test_b[0]",
       "tests/test_b.py::test_b[1]", "tests/test_c.py::test_c", "tests/test_py.py::test_py",
       "tests/test_doc.py::test_readme_answer", "tests/test_plain.py::test_truth"}


def make_project(base: Path, zygote: Zygote, files: dict[str, str] = FILES) -> Project:
    return _make_project(base, files, zygote)


__all__ = ["ALL", "FILES", "UNDECLARED_FILES", "UNDECLARED_TESTS", "Project", "Zygote", "git", "make_project"]
