"""The command lines the route compiles with are the ones in the build file SGLang generates: read
back from SGLang's own ``ninja.generate`` output (a path with a space and a ``$`` stays one
argument), and a build file with a rule the route does not reproduce is refused, not guessed at.
No compiler runs here."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

CODE = r"""
import json, sys
from sglang.kernels.jit.utils.compile import loader
from kernelcache.sglang import _lines, _request
odd = sys.argv[1]
req = _request.resolve(loader, ("kc_lines",), {"cpp_files": [odd + "/a.cpp"], "extra_include_paths": [odd],
                                               "extra_cflags": ["-DX=\"1 2\""], "header_only": False})
lines = _lines.parse(req.build_file)
out = {"cxxflags": list(lines.cxxflags), "ldflags": list(lines.ldflags), "cxx": lines.cxx,
       "module": req.module_name, "units": [list(u) for u in lines.units]}
try:
    _lines.parse(req.build_file.replace("rule link\n  command = $cxx", "rule link\n  command = $cxx -fuse-ld=x"))
except _lines.Unmirrored as e:
    out["refused"] = str(e)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    from .conftest import _sglang_usable

    why = _sglang_usable()
    if why:
        pytest.skip(why)
    odd = tmp_path_factory.mktemp("lines") / "dir with space $HOME"
    odd.mkdir()
    (odd / "a.cpp").write_text("int a() { return 1; }\n")
    p = subprocess.run([sys.executable, "-c", CODE, str(odd)], capture_output=True, text=True, timeout=600,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(odd.parent)})
    assert p.returncode == 0, p.stderr[-3000:]
    import json

    return json.loads(p.stdout.splitlines()[-1]), odd


def test_paths_and_quoted_flags_stay_one_argument(parsed: tuple[dict, Path]) -> None:
    out, odd = parsed
    assert f"-I{odd}" in out["cxxflags"], out["cxxflags"]
    assert "-DX=1 2" in out["cxxflags"], out["cxxflags"]  # the shell in SGLang's rule drops the quotes
    assert "-shared" not in out["ldflags"] and any(f.startswith("-ltvm_ffi") for f in out["ldflags"])
    assert out["module"] == "sgl_kernel_jit_kc_lines" and [u[0] for u in out["units"]] == ["compile_cxx"]
    assert out["cxx"] == "c++"  # SGLang's default host compiler, as its build file names it


def test_a_rule_the_route_does_not_reproduce_is_refused(parsed: tuple[dict, Path]) -> None:
    assert "rule 'link'" in parsed[0]["refused"]
