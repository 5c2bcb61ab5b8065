"""The environment is an input (issue 38): a header-only wheel a kernel includes through
``include_dirs=[pkg.include_dir()]`` is upgraded between recording and selection, the repository
unchanged. A real wheel, built here and installed with pip into a target directory the project
imports from; the kernel really rebuilds and its test really fails in the full run.
"""
from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .gen_project import EXPORT
from .project import Project, make_project


def build_wheel(out: Path, version: str, value: int) -> Path:
    """``hdrpkg`` ``version``: a Python package with one header (``HDR_VAL value``) and its include dir."""
    files = {
        "hdrpkg/__init__.py": f'import os\n__version__ = "{version}"\n\n\ndef include_dir():\n'
                              '    return os.path.join(os.path.dirname(__file__), "include")\n',
        "hdrpkg/include/hdr/val.h": f"#define HDR_VAL {value}\n",
        f"hdrpkg-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: hdrpkg\nVersion: {version}\n",
        f"hdrpkg-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: kc-test\nRoot-Is-Purelib: true\n"
                                             "Tag: py3-none-any\n",
        f"hdrpkg-{version}.dist-info/top_level.txt": "hdrpkg\n",
    }
    rows = []
    for rel, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{rel},sha256={digest},{len(text.encode())}")
    record = f"hdrpkg-{version}.dist-info/RECORD"
    files[record] = "\n".join([*rows, f"{record},,"]) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    whl = out / f"hdrpkg-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for rel, text in files.items():
            z.writestr(rel, text)
    return whl


def pip_install(whl: Path, target: Path) -> None:
    """An image upgrade: the target directory rebuilt with this wheel alone."""
    shutil.rmtree(target, ignore_errors=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                           "--disable-pip-version-check", "--target", str(target), str(whl)],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr


def files(site: Path) -> dict[str, str]:
    return {
        ".gitignore": "__pycache__/\n.pytest_cache/\n",
        "pyproject.toml": f"""\
[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = [".", "{site}"]
kernelcache_specs = ["kspecs:specs"]
kernelcache_kernels = ["hk"]
""",
        "kspecs.py": f"""\
import sys
from pathlib import Path

sys.path.insert(0, "{site}")  # the environment the kernel's header package lives in
import hdrpkg  # noqa: E402
import kernelcache as kc  # noqa: E402


def specs():
    root = Path(__file__).resolve().parent / "csrc"
    return [kc.KernelSpec(name="hk", sources=["hk.cc"], root=root, include_dirs=[hdrpkg.include_dir()])]
""",
        "csrc/export.h": EXPORT,
        "csrc/hk.cc": '#include <tvm/ffi/c_api.h>\n#include "export.h"\n#include <hdr/val.h>\nKC_EXPORT(fv, HDR_VAL)\n',
        "tests/test_hk.py": """\
import pytest


@pytest.mark.kernel("hk")
def test_val(kernelcache_module):
    assert kernelcache_module("hk").fv(0) == 1
""",
        "tests/test_version.py": "import hdrpkg\n\n\ndef test_version():\n    assert hdrpkg.__version__ == '1'\n",
        "tests/test_plain.py": "def test_truth():\n    assert 1 + 1 == 2\n",
    }


@pytest.fixture
def upgraded(tmp_path: Path, zygote) -> tuple[Project, Path]:
    site = tmp_path / "site"
    pip_install(build_wheel(tmp_path / "wheels", "1", 1), site)
    proj = make_project(tmp_path, files(site), zygote)
    run = proj.record()
    assert run.rc == 0 and len(run.summary) == 3, run.out
    pip_install(build_wheel(tmp_path / "wheels", "2", 2), site)
    return proj, site


def test_upgraded_header_wheel_selects_the_kernels_tests(upgraded):
    proj, _ = upgraded
    m = json.loads(proj.map.read_text())
    ident = m["kernels"]["hk"]["env"]["dist:hdrpkg"]
    assert ident["version"] == "1" and ident["digest"], ident
    run = proj.affected("HEAD", "--collect-only")
    sel = run.selection
    assert sel["everything"] is None, run.out
    assert "uses hk, whose environment moved: hdrpkg 1 -> 2" in sel["selected"]["tests/test_hk.py::test_val"]
    assert "imports hdrpkg, and hdrpkg 1 -> 2" in sel["selected"]["tests/test_version.py::test_version"]
    assert sel["deselected"] == ["tests/test_plain.py::test_truth"]
    full = proj.pytest()
    failed = {n for n, (o, _) in full.summary.items() if o != "PASSED"}
    assert failed == {"tests/test_hk.py::test_val", "tests/test_version.py::test_version"}, full.out
    assert failed <= set(sel["selected"])


def test_a_distribution_no_module_imports_runs_everything(upgraded, tmp_path):
    """Another wheel appears in the environment, imported by nothing in the repository: not
    attributable, so every test runs (the upgraded one is attributable, but this is not)."""
    proj, site = upgraded
    whl = build_wheel(tmp_path / "w3", "1", 1)
    other = tmp_path / "other"
    pip_install(whl, other)
    (other / "hdrpkg").rename(other / "zzpkg")
    info = other / "hdrpkg-1.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zzpkg\nVersion: 1\n")
    (info / "top_level.txt").write_text("zzpkg\n")
    info.rename(site / "zzpkg-1.dist-info")
    (other / "zzpkg").rename(site / "zzpkg")
    run = proj.affected("HEAD", "--collect-only")
    assert "zzpkg not installed -> 1: cannot tell which tests it affects" in (run.selection["everything"] or ""), \
        run.out


def test_another_compiler_selects_every_kernels_tests(tmp_path: Path, zygote):
    """CXX names a compiler whose identity moves between recording and selection (a wrapper
    whose banner says another release): the kernels' keys change, so do their tests' selection."""
    from .gen_project import ALL
    from .gen_project import make_project as make_gen

    wrapper = tmp_path / "bin" / "g++"
    wrapper.parent.mkdir()

    def release(n: int) -> None:
        wrapper.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "wrapped g++ {n}.0"; exit 0; fi\n'
                           'exec g++ "$@"\n')
        wrapper.chmod(0o755)
    release(1)
    proj = make_gen(tmp_path, zygote)
    base_env = proj.env
    proj.env = lambda: {**base_env(), "CXX": str(wrapper)}  # type: ignore[method-assign]
    run = proj.record()
    assert run.rc == 0 and set(run.summary) == ALL, run.out
    assert json.loads(proj.map.read_text())["kernels"]["ka"]["env"]["tool:cxx"]["version"] == "wrapped g++ 1.0"
    release(2)
    sel = proj.affected("HEAD", "--collect-only").selection
    assert sel["everything"] is None
    kernel_tests = {n for n in ALL if n.split("::")[0] in ("tests/test_a.py", "tests/test_b.py", "tests/test_c.py")}
    assert set(sel["selected"]) == kernel_tests, sel["selected"]
    assert sel["selected"]["tests/test_a.py::test_a"] == "uses ka, whose environment moved: cxx wrapped g++ 1.0 -> wrapped g++ 2.0"
