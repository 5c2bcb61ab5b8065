"""Precision where it is safe (issue 38): two kernels share one source root (as this repository's
n-gram and sampling kernels share ``kernelcache/csrc``); a CUDA kernel recorded on a CPU runner has
no manifest, so every file under the root counts for *it* — but a header beside its sources must
not select the C++ kernel's tests, whose compiler never read it. A file next to the C++ kernel's
own sources still selects them (a spec may read its directory)."""
from __future__ import annotations

from pathlib import Path

from .gen_project import EXPORT
from .project import make_project

FILES = {
    ".gitignore": "__pycache__/\n.pytest_cache/\n",
    "pyproject.toml": """\
[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["."]
kernelcache_specs = ["kspecs:specs"]
kernelcache_kernels = ["kx", "ky"]
""",
    "kspecs.py": """\
from pathlib import Path

import kernelcache as kc

CSRC = Path(__file__).resolve().parent / "csrc"


def specs():
    return [kc.KernelSpec(name="kx", sources=["kx/x.cc"], root=CSRC),
            kc.KernelSpec(name="ky", sources=["ky/y.cu"], root=CSRC)]
""",
    "csrc/export.h": EXPORT,
    "csrc/kx/x.cc": '#include <tvm/ffi/c_api.h>\n#include "../export.h"\n#include "x.h"\nKC_EXPORT(fx, X_VALUE)\n',
    "csrc/kx/x.h": "#define X_VALUE 5\n",
    "csrc/ky/y.cu": '#include <tvm/ffi/c_api.h>\n#include "../export.h"\n#include "y.cuh"\nKC_EXPORT(fy, Y_VALUE)\n',
    "csrc/ky/y.cuh": "#define Y_VALUE 6\n",
    "tests/test_x.py": "import pytest\n\n\n@pytest.mark.kernel('kx')\ndef test_x(kernelcache_module):\n"
                       "    assert kernelcache_module('kx').fx(0) == 5\n",
    "tests/test_y.py": "import pytest\n\n\n@pytest.mark.kernel('ky')\ndef test_y(kernelcache_module):\n"
                       "    assert kernelcache_module('ky').fy(0) == 6\n",
}


def test_a_header_of_the_other_kernel_under_a_shared_root(tmp_path: Path, zygote):
    proj = make_project(tmp_path, FILES, zygote)
    run = proj.record()
    assert run.rc == 0 and run.summary["tests/test_x.py::test_x"][0] == "PASSED", run.out
    assert run.outcomes["tests/test_y.py::test_y"] == "skipped", run.out  # no GPU, no arch: no manifest
    proj.edit("csrc/ky/y.cuh", "Y_VALUE 6", "Y_VALUE 7")
    sel = proj.affected("HEAD", "--collect-only").selection
    assert sel["everything"] is None
    assert set(sel["selected"]) == {"tests/test_y.py::test_y"}, sel["selected"]
    assert "no manifest was recorded" in sel["selected"]["tests/test_y.py::test_y"]
    assert sel["deselected"] == ["tests/test_x.py::test_x"]

    proj.write("csrc/kx/table.txt", "1 2 3\n")  # next to kx's own sources: still kx's
    sel = proj.affected("HEAD", "--collect-only").selection
    assert set(sel["selected"]) == {"tests/test_x.py::test_x", "tests/test_y.py::test_y"}, sel["selected"]
