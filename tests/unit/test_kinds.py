"""One kind protocol: the kind is compared nowhere outside kernelcache/kinds/, and a new kind
is one more file (proved by building and loading a real kernel through a kind written here)."""
from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest
from kernelcache.base.errors import SpecError
from kernelcache.base.events import Status

import kernelcache as kc
from kernelcache import kinds
from tests.support import project_spec

PKG = Path(kc.__file__).resolve().parent
KIND_NAMES = {p.stem for p in (PKG / "kinds").glob("*.py") if p.stem not in ("__init__", "base", "torch_common", "registry", "surface")}
# The torch drop-in names the kind it asks for and adds pybind11's ABI facts for one of them;
# it may not import kernelcache.kinds (import-linter), so that one comparison stays there.
ALLOWED = {"cpp_extension/_flags.py": "pybind11 ABI facts of torch_python (the drop-in's own flag lines)"}


def _kind_side(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "kind") or (isinstance(node, ast.Attribute) and node.attr == "kind")


def test_no_module_compares_a_kind_by_name_outside_the_kinds_package():
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = str(path.relative_to(PKG))
        if rel.startswith("kinds/") or rel in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            names = {s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)}
            names |= {e.value for s in sides if isinstance(s, (ast.Tuple, ast.List, ast.Set))
                      for e in s.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if names & KIND_NAMES and any(_kind_side(s) for s in sides):
                found.append(f"{rel}:{node.lineno}")
    assert not found, f"kind compared by name outside kernelcache/kinds/: {found}"


def test_every_kind_file_supplies_the_protocol():
    for name in KIND_NAMES:
        k = kinds.of(name)
        assert k.name == name and k.label and isinstance(k.key_inputs(), dict)
        assert k.so_name("x") in ("x", "x.so")
    assert kinds.label("tvm_ffi") == "" and kinds.label("torch_python") == "torch extension"
    for bad in ("no_such_kind", "base", "torch_common", "../x"):
        with pytest.raises(SpecError):
            kinds.of(bad)


NEW_KIND = '''
"""A kind written outside the package: a tvm-ffi module under another name."""
from kernelcache.kinds.tvm_ffi import TvmFfi


class Demo(TvmFfi):
    name = "demo_kind"
    label = "demo module"
    report_label = "demo"

    def key_inputs(self):
        return {"kind": self.name}


KIND = Demo()
'''


def test_a_new_kind_is_one_more_file(kc_env, project, tmp_path, monkeypatch):
    extra = tmp_path / "more_kinds"
    extra.mkdir()
    (extra / "demo_kind.py").write_text(textwrap.dedent(NEW_KIND))
    monkeypatch.setattr(kinds, "__path__", [*kinds.__path__, str(extra)])  # a file among the kinds
    spec = project_spec(project, kind="demo_kind")
    mod, res = kc.load_with_result(spec)
    assert mod.add(2, 3) == 5 and res.status is Status.BUILT
    m = json.loads((Path(res.entry_path) / "manifest.json").read_text())
    assert m["kind"] == "demo_kind" and m["inputs"]["kind"] == "demo_kind"
    # its own key: the same sources as a tvm-ffi module are another entry
    plain = kc.load_with_result(project_spec(project))[1]
    assert plain.status is Status.BUILT and plain.entry_id != res.entry_id
    assert kc.load_with_result(spec)[1].status is Status.HIT
    assert kinds.label("demo_kind") == "demo"


RACE = r"""
import importlib.abc, json, sys, threading
from kernelcache import kinds

started, release = threading.Event(), threading.Event()


class Gate(importlib.abc.MetaPathFinder):
    # holds thread A inside the import of kinds/tvm_ffi.py (at its import of kinds.base), the
    # window in which that module is in sys.modules without its KIND
    def find_spec(self, name, path, target=None):
        if name == "kernelcache.kinds.base" and threading.current_thread().name == "A":
            started.set()
            release.wait(60)
        return None


sys.meta_path.insert(0, Gate())
got = {}


def of(tag):
    try:
        got[tag] = type(kinds.of("tvm_ffi")).__name__
    except Exception as e:
        got[tag] = f"{type(e).__name__}: {e}"


a = threading.Thread(target=of, args=("A",), name="A")
a.start()
assert started.wait(60)
assert "kernelcache.kinds.tvm_ffi" in sys.modules and not hasattr(sys.modules["kernelcache.kinds.tvm_ffi"], "KIND")
b = threading.Thread(target=of, args=("B",), name="B")
b.start()
b.join(2.0)  # unfixed, B has failed by now; fixed, it waits on A's import
release.set()
a.join(60)
b.join(60)
print(json.dumps(got))
"""


def test_a_kind_imported_by_another_thread_is_waited_for_not_unknown():
    """Found on a 16-core machine: the plugin warmed two kernels in parallel threads and one of
    them failed with "unknown module kind 'tvm_ffi'" (it saw the module another thread was still
    executing). Provoked here by holding that other thread inside the import."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=180,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[-1]) == {"A": "TvmFfi", "B": "TvmFfi"}
