"""Issue 46.4: ``kernelcache build --out ROOT`` exports a project's own kernels — a user
KernelSpec and a torch extension (``cpp_extension.make_spec``, the spec of its ``load`` call) —
named by ``--spec MODULE:FUNC`` or by the pytest ini's ``kernelcache_specs`` (``--from-ini``);
a host with no compiler at all loads both from the root (``KERNELCACHE_PREBUILT``), 0 builds.

Before: ``unknown kernel 'proj_add'`` and no ``--spec`` option; only shipped kernels and
FlashInfer modules could be exported.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import HANG_S, REPO, compilerless_path, make_project

pytest.importorskip("torch")

SPECS = """\
from pathlib import Path
import kernelcache as kc
from kernelcache import cpp_extension

HERE = Path(__file__).parent

def specs():
    return [kc.KernelSpec(name="proj_add", sources=["add.cc"], root=HERE, include_dirs=["include"],
                          functions={"add": "Callable[[int, int], int]"}),
            cpp_extension.make_spec("proj_ext", [str(HERE / "ext" / "ext.cpp")])]
"""
EXT_SRC = """#include <pybind11/pybind11.h>
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("seven", [] { return 7; }); }
"""
SERVE = """
import json
import kernelcache as kc
from kernelcache import cpp_extension
import kcspecs
mod, res = kc.load_with_result(kcspecs.specs()[0])
ext = cpp_extension.load("proj_ext", [str(kcspecs.HERE / "ext" / "ext.cpp")])
print("RESULT " + json.dumps({"add": mod.add(2, 3), "status": res.status, "seven": ext.seven(),
                              "ext_file": ext.__file__, "builds": kc.stats()["builds"]}))
"""


def _run(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=HANG_S, stdin=subprocess.DEVNULL)


@pytest.fixture
def proj(kc_env, tmp_path: Path) -> Path:
    p = make_project(tmp_path / "proj")
    (p / "kcspecs.py").write_text(SPECS)
    (p / "ext").mkdir()
    (p / "ext" / "ext.cpp").write_text(EXT_SRC)
    (p / "pytest.ini").write_text("[pytest]\nkernelcache_specs = kcspecs:specs\n")
    return p


def _env(kc_env, proj: Path, **extra: str) -> dict:
    env = kc_env.env(PYTHONPATH=f"{REPO}{os.pathsep}{proj}", TORCH_EXTENSIONS_DIR=str(kc_env.tmp / "torch_ext"))
    env.update(extra)
    return env


def test_build_exports_a_user_spec_and_a_torch_extension_for_a_compilerless_host(kc_env, proj, tmp_path):
    root = tmp_path / "root"
    unknown = _run(["-m", "kernelcache", "build", "proj_add", "--out", str(root)], proj, _env(kc_env, proj))
    assert unknown.returncode == 2 and "--spec MODULE:FUNC" in unknown.stderr and "--from-ini" in unknown.stderr

    built = _run(["-m", "kernelcache", "build", "--from-ini", "--out", str(root)], proj, _env(kc_env, proj))
    assert built.returncode == 0, built.stdout + built.stderr
    assert {ln.split()[0] for ln in built.stdout.splitlines()} == {"proj_add", "proj_ext"}, built.stdout
    by_spec = _run(["-m", "kernelcache", "build", "proj_ext", "--spec", "kcspecs:specs", "--out", str(root)], proj,
                   _env(kc_env, proj))
    assert by_spec.returncode == 0 and by_spec.stdout.split()[:2] == ["proj_ext", "hit"], by_spec.stdout
    kinds = {json.loads(m.read_text()).get("kind", "tvm_ffi") for m in root.glob("v1/entries/*/*/*/manifest.json")}
    assert kinds == {"tvm_ffi", "torch_python"}, kinds

    compiles = kc_env.compiles()
    bare = _env(kc_env, proj, PATH=compilerless_path(tmp_path / "bare-bin"), CXX="", KERNELCACHE_NO_BUILD="1",
                KERNELCACHE_PREBUILT=str(root), KERNELCACHE_DIR=str(tmp_path / "serving-cache"),
                TORCH_EXTENSIONS_DIR=str(tmp_path / "serving-torch"))
    served = _run(["-c", SERVE], tmp_path, bare)
    line = next((ln for ln in served.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, served.stdout + served.stderr[-3000:]
    got = json.loads(line[len("RESULT "):])
    assert got["add"] == 5 and got["status"] == "prebuilt" and got["seven"] == 7, got
    assert got["ext_file"].startswith(str(root)) and got["builds"] == 0, got
    assert kc_env.compiles() == compiles
