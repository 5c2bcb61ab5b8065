"""Issue 46.5: on a host with no compiler at all, after its loads fetched every kernel from the
fleet (a ``file://`` store), ``kernelcache explain`` reports what the load did: ``fetched``, the
entry the load used, and no "why miss" — for a user KernelSpec (by ``--spec`` and by name) and a
torch extension (``cpp_extension.load`` of real files, by name: no KernelSpec asked for).

A host that loaded nothing yet is told ``remote`` (the fleet holds an entry a load would fetch).

Before: ``status: fetched`` came with ``why miss: no cached entry for this kernel``, and a name
whose entries were all fetched was refused with "name its spec with --spec MODULE:FUNC".
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import compilerless_path

from .hosts import Host, make_project

pytest.importorskip("torch")

SPECS = """\
from pathlib import Path
import kernelcache as kc

def specs():
    return kc.KernelSpec(name="fleet_k", sources=["add.cc"], root=Path(__file__).parent, include_dirs=["include"],
                         functions={"add": "Callable[[int, int], int]"})
"""
EXT_SRC = """#include <pybind11/pybind11.h>
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("seven", [] { return 7; }); }
"""
TORCH_LOAD = """
import json, sys
import kernelcache as kc
from kernelcache import cpp_extension
m = cpp_extension.load("kc_fetched_ext", [sys.argv[1]])
print("RESULT " + json.dumps({"seven": m.seven(), "builds": kc.stats()["builds"], "file": m.__file__}))
"""


def _inherited() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("KERNELCACHE_", "KC_"))}


def _torch_load(host: Host, src: Path, **env: str) -> dict:
    p = subprocess.run([sys.executable, "-c", TORCH_LOAD, str(src)], env=host.env(**env), capture_output=True,
                       text=True, timeout=900, stdin=subprocess.DEVNULL)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"{host.name} failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}")


def test_explain_on_a_compilerless_host_reports_the_fetched_entries(file_remote, tmp_path: Path) -> None:
    proj = make_project(tmp_path / "proj")
    (proj / "kcspecs.py").write_text(SPECS)
    ext = tmp_path / "ext" / "ext.cpp"
    ext.parent.mkdir()
    ext.write_text(EXT_SRC)
    base = {"KERNELCACHE_REMOTE": file_remote.url, "PYTHONPATH": f"{Path(__file__).parents[2]}:{proj}",
            "TORCH_EXTENSIONS_DIR": str(tmp_path / "torch_ext")}
    a = Host("a", tmp_path / "a", {**_inherited(), **base, "KERNELCACHE_REMOTE_MODE": "readwrite"})
    assert a.load(proj)["status"] == "built" and _torch_load(a, ext)["builds"] == 1
    bare = {"PATH": compilerless_path(tmp_path / "bare-bin"), "KERNELCACHE_NO_BUILD": "1"}
    b = Host("b", tmp_path / "b", {**_inherited(), **base, **bare, "KERNELCACHE_REMOTE_MODE": "read"})
    b_env = {"CXX": ""}  # no compiler named either: the host finds none at all
    got = b.load(proj, **b_env)
    assert got["status"] == "remote" and got["value"] == 5, got
    t = _torch_load(b, ext, **b_env)
    assert t["seven"] == 7 and t["builds"] == 0 and t["file"].startswith(str(b.cache))
    assert b.compiles() == 0

    for args in (["fleet_k", "--spec", "kcspecs:specs"], ["fleet_k"], ["kc_fetched_ext"]):
        r = b.cli("explain", *args, **b_env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "status:  fetched" in r.stdout and "why miss" not in r.stdout, (args, r.stdout)
        assert f"entry:   {b.cache}" in r.stdout, r.stdout
        info = json.loads(b.cli("explain", *args, "--json", **b_env).stdout)
        assert info["status"] == "fetched" and info["reason"] == "" and "/fetched/" in info["entry"], info

    # a host that has loaded nothing yet: the fleet is the place a load would take it from
    c = Host("c", tmp_path / "c", {**_inherited(), **base, **bare, "KERNELCACHE_REMOTE_MODE": "read"})
    r = c.cli("explain", "fleet_k", "--spec", "kcspecs:specs", **b_env)
    assert r.returncode == 0 and "status:  remote" in r.stdout and "why miss" not in r.stdout, r.stdout + r.stderr
    assert not (c.cache / "v1" / "fetched").exists()  # read only: nothing downloaded
