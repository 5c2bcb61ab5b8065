"""Acceptance 6: an unmodified package that calls ``torch.utils.cpp_extension.load`` at import
runs through kernelcache in every zero-code mode; its second fresh process compiles nothing,
torch's own extensions dir is never used, and the plugin summary lists it as a torch extension."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import PARAM_V2, write_seed

REPO = Path(__file__).resolve().parents[2]

PKG_INIT = '''
"""An unmodified third-party package: JIT-builds its extension at import, the torch way."""
import os
from torch.utils.cpp_extension import load

_here = os.path.dirname(os.path.abspath(__file__))
_C = load(name="kcpkg_ext", sources=[os.path.join(_here, "csrc", "ngram.cpp")])
WINDOW = _C.Param().min_match_window_size
'''
MAIN = "import kcpkg\nprint('WINDOW', kcpkg.WINDOW, kcpkg._C.__file__)\n"


def _package(base: Path) -> Path:
    pkg = base / "site" / "kcpkg"
    write_seed(pkg / "csrc", PARAM_V2)
    (pkg / "__init__.py").write_text(PKG_INIT)
    (base / "site" / "main.py").write_text(MAIN)
    return base / "site"


def _run(kc, argv: list[str], site: Path, **env: str) -> subprocess.CompletedProcess:
    e = kc.env(**env)
    e["PYTHONPATH"] = str(site) + ":" + e["PYTHONPATH"]
    proc = subprocess.run(argv, env=e, cwd=site, capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _modes(site: Path) -> dict[str, tuple[list[str], dict]]:
    # The .pth hook as an installed wheel ships it, processed the way interpreter start-up does.
    hook_site = site.parent / "hook-site"
    hook_site.mkdir(exist_ok=True)
    shutil.copyfile(REPO / "kernelcache" / "patch" / "kernelcache-patch.pth", hook_site / "kernelcache-patch.pth")
    return {
        "install()": ([sys.executable, "-c", "import kernelcache.cpp_extension as c; c.install(); import runpy; "
                       "runpy.run_path('main.py')"], {}),
        "python -m kernelcache.cpp_extension": ([sys.executable, "-m", "kernelcache.cpp_extension", "main.py"], {}),
        "python -m kernelcache.patch --jit torch": ([sys.executable, "-m", "kernelcache.patch", "--jit", "torch",
                                                     "main.py"], {}),
        "KERNELCACHE_PATCH=torch + .pth hook": (
            [sys.executable, "-c", f"import site; site.addsitedir({str(hook_site)!r}); import runpy; "
                                   "runpy.run_path('main.py', run_name='__main__')"], {"KERNELCACHE_PATCH": "torch"}),
    }


def test_every_zero_code_mode_second_process_compiles_nothing(torch_env):
    site = _package(torch_env.tmp)
    seen = {}
    for mode, (argv, env) in _modes(site).items():
        outs = []
        for _ in range(2):
            before = torch_env.compiles()
            out = _run(torch_env, argv, site, **env).stdout
            outs.append((torch_env.compiles() - before, out))
        seen[mode] = outs
        assert "WINDOW 4 " in outs[1][1], (mode, outs)
        assert outs[1][0] == 0, f"{mode}: the second fresh process compiled"
        assert str(torch_env.cache) in outs[1][1]  # the module is a kernelcache entry
    assert torch_env.compiles() == 1, seen  # one build for all modes and processes
    assert not (torch_env.tmp / "torch_extensions").exists()  # torch's own JIT never ran


def test_pytest_option_routes_it_and_the_summary_and_json_report_list_it_as_a_torch_extension(torch_env):
    site = _package(torch_env.tmp)
    (site / "test_pkg.py").write_text("def test_import():\n    import kcpkg\n    assert kcpkg.WINDOW == 4\n")
    report = torch_env.tmp / "report.json"
    proc = _run(torch_env, [sys.executable, "-m", "pytest", "-p", "kernelcache", "-p", "no:xdist", "-q",
                            "-p", "no:cacheprovider", "--kc-patch=torch", f"--kc-report-json={report}",
                            "test_pkg.py"], site)
    assert "1 passed" in proc.stdout
    assert any("kcpkg_ext [torch extension]" in line and " built " in line for line in proc.stdout.splitlines()), \
        proc.stdout
    rows = {r["name"]: r for r in json.loads(report.read_text())["kernels"]}
    assert rows["kcpkg_ext"]["label"] == "torch extension" and rows["kcpkg_ext"]["status"] == "built"
    assert not (torch_env.tmp / "torch_extensions").exists()  # routed: torch's own JIT never ran


@pytest.mark.parametrize("argv", [["-m", "kernelcache.cpp_extension"], ["-m", "kernelcache.cpp_extension", "-m"]])
def test_runner_without_a_program_prints_usage(argv):
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "python -m kernelcache.cpp_extension" in proc.stderr
