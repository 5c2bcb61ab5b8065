"""The import graph (pytest's prepend rule, relative and lazy imports, imports in strings,
TYPE_CHECKING) and the selection rules, on small trees written by the tests."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernelcache.impact.changes import ADDED, DELETED, MODIFIED, Change, ChangeSet
from kernelcache.impact.graph import ImportGraph
from kernelcache.impact.impact_map import FileRecord, ImpactMap, KernelRecord, TestRecord
from kernelcache.impact.select import Selector, TestInfo

TREE = {
    "pkg/__init__.py": "from .core import run\n_LAZY = {'heavy': 'heavy'}\n"
                       "def __getattr__(n):\n    import importlib\n    return importlib.import_module('.' + _LAZY[n], __name__)\n",
    "pkg/core.py": "from . import util\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .typed import T\n",
    "pkg/util.py": "import os\n",
    "pkg/heavy.py": "X = 1\n",
    "pkg/typed.py": "T = int\n",
    "tests/helper.py": "def h():\n    return 1\n",
    "tests/test_a.py": "import helper\nfrom pkg import util\n",
    "tests/test_b.py": "import subprocess\nCODE = 'import pkg.heavy; print(1)'\n",
    "tests/sub/__init__.py": "",
    "tests/sub/test_c.py": "from .. import nothing\nimport pkg\n",
    "tests/test_gone.py": "import vanished_helper\n",
    "pkg/__main__.py": "from . import heavy\n",
    "tests/test_d.py": "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'pkg', 'x'])\n",
}


def build(tmp_path: Path, tree: dict = TREE) -> ImportGraph:
    for rel, text in tree.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return ImportGraph(tmp_path, list(tree))


def test_prepend_rule_names_and_edges(tmp_path):
    g = build(tmp_path)
    assert g.nodes["tests/test_a.py"].name == "test_a"
    assert g.nodes["tests/sub/test_c.py"].name == "sub.test_c"  # tests/sub is a package, tests is not
    files = g.closure(["tests/test_a.py"]).files
    assert {"tests/helper.py", "pkg/util.py", "pkg/__init__.py", "pkg/core.py"} <= set(files)


def test_lazy_import_module_strings_and_code_in_strings(tmp_path):
    g = build(tmp_path)
    assert "pkg/heavy.py" in g.nodes["pkg/__init__.py"].dynamic
    assert "pkg/heavy.py" in g.closure(["tests/sub/test_c.py"]).files
    assert "pkg/heavy.py" in g.closure(["tests/test_b.py"]).files  # `import pkg.heavy` in a string


def test_modules_run_with_python_dash_m(tmp_path):
    g = build(tmp_path)
    assert {"pkg/__main__.py", "pkg/heavy.py"} <= set(g.closure(["tests/test_d.py"]).files)


def test_type_checking_imports_only_count_on_the_safe_side(tmp_path):
    g = build(tmp_path)
    assert "pkg/typed.py" in g.nodes["pkg/core.py"].dynamic
    assert "pkg/typed.py" not in g.closure(["pkg/core.py"], dynamic=False).files
    assert "pkg/typed.py" in g.closure(["pkg/core.py"]).files


def test_deleted_module_is_found_by_name(tmp_path):
    g = build(tmp_path)
    assert "vanished_helper" in g.closure(["tests/test_gone.py"]).names
    assert g.module_names("tests/vanished_helper.py") == {"vanished_helper"}


# -- rules ---------------------------------------------------------------------------------------
def cs(tmp_path: Path, *changes: Change) -> ChangeSet:
    c = ChangeSet(tmp_path, "main", "b" * 40, "h" * 40)
    for ch in changes:
        c.add(ch)
    return c


def imap() -> ImpactMap:
    m = ImpactMap(commit="c" * 40)
    m.kernels["k1"] = KernelRecord("k1", "csrc", ["csrc/k1.cc", "csrc/inc/k1.h"], ["csrc/k1/inc/k1.h"],
                                   ["pkg/typed.py"], complete=True)
    m.kernels["k2"] = KernelRecord("k2", "csrc", ["csrc/k2.cc"], [], [], complete=True)
    for n, f, ks in (("tests/test_a.py::t", "tests/test_a.py", ["k1"]), ("tests/test_b.py::t", "tests/test_b.py", []),
                     ("tests/sub/test_c.py::t", "tests/sub/test_c.py", ["k2"])):
        m.tests[n] = TestRecord(n, f, ks, "passed")
    m.files["tests/test_b.py"] = FileRecord(reads=["data/x.json"], dirs=["data"])
    return m


def select(tmp_path, *changes):
    g = build(tmp_path)
    tests = [TestInfo(n, t.file, ()) for n, t in imap().tests.items()]
    tests.append(TestInfo("tests/test_new.py::t", "tests/test_new.py"))
    return Selector(cs(tmp_path, *changes), imap(), "", g).select(tests)


def test_header_selects_only_its_kernels_users(tmp_path):
    s = select(tmp_path, Change("csrc/inc/k1.h", MODIFIED))
    assert s.everything is None
    assert set(s.selected) == {"tests/test_a.py::t", "tests/test_new.py::t"}
    assert "uses k1, whose input csrc/inc/k1.h (modified) changed" in s.selected["tests/test_a.py::t"]
    assert "not in the impact map" in s.selected["tests/test_new.py::t"]


def test_shadowing_header_and_new_file_under_a_root(tmp_path):
    s = select(tmp_path, Change("csrc/k1/inc/k1.h", ADDED))
    assert "appeared where its compiler looked" in s.selected["tests/test_a.py::t"]
    s = select(tmp_path, Change("csrc/unrelated.h", ADDED))
    assert {"tests/test_a.py::t", "tests/sub/test_c.py::t"} <= set(s.selected)  # next to both kernels' sources
    s = select(tmp_path, Change("csrc/other/unrelated.h", ADDED))  # under the root, read by no compiler
    assert s.everything is None and "read by no compiler" in s.selected["tests/test_a.py::t"]
    s = select(tmp_path, Change("csrc/k1.cc", MODIFIED))  # k1's input: k2 (same root) is not affected
    assert set(s.selected) == {"tests/test_a.py::t", "tests/test_new.py::t"}
    s = select(tmp_path, Change("csrc/notes.md", MODIFIED))  # docs under the root, read by nothing
    assert set(s.selected) == {"tests/test_new.py::t"}


def test_python_module_reads_and_listed_dirs(tmp_path):
    s = select(tmp_path, Change("tests/helper.py", MODIFIED))
    assert set(s.selected) - {"tests/test_new.py::t"} == {"tests/test_a.py::t"}
    assert s.selected["tests/test_a.py::t"] == "imports tests/helper.py (modified) (tests/test_a.py -> tests/helper.py)"
    s = select(tmp_path, Change("pkg/util.py", MODIFIED))  # pkg/__init__ imports core, core imports util
    assert len(s.selected) == 4
    s = select(tmp_path, Change("data/x.json", MODIFIED))
    assert set(s.selected) - {"tests/test_new.py::t"} == {"tests/test_b.py::t"}
    s = select(tmp_path, Change("data/y.json", ADDED))
    assert "list data/" in s.selected["tests/test_b.py::t"]
    s = select(tmp_path, Change("tests/vanished_helper.py", DELETED))
    assert s.everything is None


def test_kernel_spec_module_is_an_input(tmp_path):
    s = select(tmp_path, Change("pkg/typed.py", MODIFIED))
    assert "tests/test_a.py::t" in s.selected  # k1's Python side
    s = select(tmp_path, Change("pkg/heavy.py", MODIFIED))
    assert "tests/test_b.py::t" in s.selected  # `import pkg.heavy` in a string (subprocess code)


@pytest.mark.parametrize("path,why", [
    ("tests/conftest.py", "a conftest"), ("pyproject.toml", "build metadata"), ("setup.py", "build metadata"),
    (".github/workflows/ci.yml", "CI config"), ("ci/suites.toml", "CI config"),
    ("Makefile", "cannot tell which tests"), ("data/unknown.bin", "cannot tell which tests"),
])
def test_everything_with_the_reason(tmp_path, path, why):
    s = select(tmp_path, Change(path, MODIFIED))
    assert s.everything and why in s.everything and path in s.everything
    assert len(s.selected) == 4 and not s.deselected


def test_docs_only_selects_nothing_but_new_tests(tmp_path):
    s = select(tmp_path, Change("docs/guide.md", MODIFIED), Change("README.md", MODIFIED))
    assert s.everything is None and set(s.selected) == {"tests/test_new.py::t"}
    assert len(s.deselected) == 3


def test_no_map_or_unknown_changes_run_everything(tmp_path):
    g = build(tmp_path)
    s = Selector(cs(tmp_path, Change("docs/guide.md", MODIFIED)), None, "no impact map at x", g).select(
        [TestInfo("tests/test_a.py::t", "tests/test_a.py")])
    assert s.everything == "no usable impact map: no impact map at x"
    bad = ChangeSet(tmp_path, "main", error="'main' is not a commit in this clone")
    s = Selector(bad, imap(), "", g).select([TestInfo("tests/test_a.py::t", "tests/test_a.py")])
    assert s.everything.startswith("changed files unknown:")


FORMS = {
    "pkg/__init__.py": "",
    "pkg/a.py": "", "pkg/b.py": "", "pkg/c.py": "", "pkg/d.py": "", "pkg/e.py": "", "pkg/f.py": "",
    "pkg/g.py": "", "pkg/h.py": "",
    "user.py": "from pkg import \\\n    a\n"                                   # backslash continuation
               "from pkg import (\n    b,  # a comment\n    c,\n)\n"            # parenthesised list
               "import os; import pkg.d\n"                                       # `;`-separated statements
               "import importlib\nM = importlib.import_module('pkg.e')\n"       # a literal module name
               "N = importlib.import_module('.f', 'pkg')\n"                     # relative, with a package
               "CODE = 'x = 1\\nimport pkg.g'\n"                                # code in a string (python -c)
               "def later():\n    try:\n        from pkg import h\n    except ImportError:\n        pass\n",
    "prose.py": '"""We import things in prose; pkg.h is not imported here."""\n',
}


def test_ast_forms_that_a_line_scanner_gets_wrong(tmp_path):
    g = build(tmp_path, FORMS)
    files = set(g.closure(["user.py"]).files)
    assert {f"pkg/{m}.py" for m in "abcdegh"} <= files
    assert "pkg/f.py" in files  # import_module('.f', 'pkg') is resolved against the importer's package
    assert set(g.closure(["prose.py"]).files) == {"prose.py"}


def test_import_facts_are_cached_per_blob_id(tmp_path):
    import json

    from kernelcache.impact.graph_scan import blob_id

    cache = tmp_path / "facts.json"
    tree = {"pkg/__init__.py": "", "pkg/a.py": "", "user.py": "from pkg import a\n"}
    for rel, text in tree.items():
        (tmp_path / "r" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "r" / rel).write_text(text)
    ImportGraph(tmp_path / "r", list(tree), cache=cache)
    facts = json.loads(cache.read_text())["facts"]
    assert blob_id(b"from pkg import a\n") in facts  # the id `git hash-object` prints
    (tmp_path / "r" / "user.py").write_text("import pkg.a as x\n")
    g = ImportGraph(tmp_path / "r", list(tree), cache=cache)
    assert "pkg/a.py" in g.closure(["user.py"]).files
    assert blob_id(b"import pkg.a as x\n") in json.loads(cache.read_text())["facts"]
    assert blob_id(b"from pkg import a\n") not in json.loads(cache.read_text())["facts"]  # pruned
