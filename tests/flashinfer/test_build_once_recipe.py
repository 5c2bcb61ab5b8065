"""Issue 46.3: the build-once recipe of docs/pytest_plugin.md covers drop-in kernels.

A project whose tests call ``cpp_extension.load(...)`` (a torch extension) and FlashInfer's JIT
(``gen_act_and_mul_module("silu")``, routed with ``--kc-patch=flashinfer``) declares them as the
recipe says: the extension's KernelSpec from ``cpp_extension.make_spec`` in ``kernelcache_specs``,
the FlashInfer module by its generator in ``kernelcache_kernels``. The build job
(``--kc-build-only``) builds both; the test job (``--kc-no-build``, a fresh FlashInfer
workspace) passes with 0 builds and no new compile or link.

Before: the FlashInfer name was an "unknown kernel" (the build job failed) and the test job
failed with ``CacheMissError``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import HANG_S, FiEnv

pytest.importorskip("torch")

SPECS = """\
from pathlib import Path
from kernelcache import cpp_extension

HERE = Path(__file__).parent

def specs():
    return [cpp_extension.make_spec("recipe_ext", [str(HERE / "ext" / "ext.cpp")])]
"""
EXT_SRC = """#include <pybind11/pybind11.h>
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("seven", [] { return 7; }); }
"""
TESTS = """\
import kcspecs


def test_extension():
    from kernelcache import cpp_extension

    m = cpp_extension.load("recipe_ext", [str(kcspecs.HERE / "ext" / "ext.cpp")])
    assert m.seven() == 7


def test_flashinfer_module():
    from flashinfer.jit import activation

    assert activation.gen_act_and_mul_module("silu").build_and_load().silu_and_mul is not None
"""
INI = """\
[pytest]
kernelcache_specs = kcspecs:specs
kernelcache_kernels = recipe_ext flashinfer.jit.activation:gen_act_and_mul_module("silu")
"""


def _pytest(fi: FiEnv, proj: Path, ws: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = fi.env(proj / ws, KERNELCACHE_DIR=str(proj / "kc-cache"), KERNELCACHE_LOCK_DIR=str(proj / "kc-locks"),
                 TORCH_EXTENSIONS_DIR=str(proj / f"torch-{ws}"))
    env.pop("KERNELCACHE_PATCH")  # the jobs name what they route, as the recipe does
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "kernelcache", "-p", "no:randomly", "-p", "no:cacheprovider",
                        f"--kc-report-json={proj / (ws + '.json')}", *args], cwd=proj, env=env, capture_output=True,
                       text=True, timeout=HANG_S, stdin=subprocess.DEVNULL)
    report = proj / (ws + ".json")
    return p, json.loads(report.read_text()) if report.exists() else {}


def test_build_only_then_no_build_covers_a_torch_extension_and_a_flashinfer_module(fi: FiEnv, tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / "ext").mkdir(parents=True)
    (proj / "ext" / "ext.cpp").write_text(EXT_SRC)
    (proj / "kcspecs.py").write_text(SPECS)
    (proj / "test_recipe.py").write_text(TESTS)
    (proj / "pytest.ini").write_text(INI)

    build, rep = _pytest(fi, proj, "build", "--kc-build-only")
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-3000:]
    status = {k["name"]: k["status"] for k in rep["kernels"]}
    assert status.get("recipe_ext") == "built" and status.get("silu_and_mul") == "built", status

    links = fi.links()
    test, rep = _pytest(fi, proj, "test", "--kc-no-build", "--kc-patch=flashinfer")
    assert test.returncode == 0, test.stdout[-4000:] + test.stderr[-3000:]
    assert rep["summary"] == {"passed": 2}, rep["summary"]
    assert rep["stats"]["total"]["builds"] == 0 and fi.links() == links, rep["stats"]["total"]
