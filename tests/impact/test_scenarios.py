"""The three ordinary changes that used to deselect a failing test (issue 22), and the CLI/
precision defects of the same pass, each on a project written as a new user writes one
(:mod:`.gen_project`): the selection is checked, and the full run shows the selected test fails.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelcache.cli import main as cli_main

from .gen_project import ALL, Project, make_project


@pytest.fixture
def proj(tmp_path: Path, zygote) -> Project:
    p = make_project(tmp_path, zygote)
    run = p.record()
    assert run.rc == 0 and set(run.summary) == ALL, run.out
    return p


def selected(run) -> set[str]:
    sel = run.selection
    assert sel, run.out
    return set(sel["selected"])


def failing(proj: Project) -> set[str]:
    return {n for n, (o, _) in proj.pytest().summary.items() if o != "PASSED"}


def test_header_outside_the_kernels_root_selects_its_tests(proj):
    """Kernel A: root csrc/kern_a, a.h includes ../common/a_extra.h."""
    proj.edit("csrc/common/a_extra.h", "A_EXTRA 10", "A_EXTRA 11")
    run = proj.affected("HEAD", "--collect-only")
    assert run.selection["everything"] is None
    assert selected(run) == {"tests/test_a.py::test_a", "tests/test_a.py::test_a_plus"}
    assert "whose input csrc/common/a_extra.h (modified" in run.selection["selected"]["tests/test_a.py::test_a"]
    assert failing(proj) == {"tests/test_a.py::test_a", "tests/test_a.py::test_a_plus"}
    m = json.loads(proj.map.read_text())
    assert "csrc/common/a_extra.h" in m["kernels"]["ka"]["inputs"]
    assert "csrc/kern_a/shared.h" in m["kernels"]["ka"]["absent"]  # would shadow ../common/shared.h


def test_partial_recording_run_keeps_each_records_commit(proj):
    """B gains a header on a newer commit; a partial run (test_a only) there must not make B's
    old record look newer: a later edit of that header still selects B's tests."""
    c1 = proj.head()
    proj.write("csrc/kern_b/b_new.h", "#define B_NEW 0\n")
    proj.edit("csrc/kern_b/b.h", "#define B_VALUE (2 + B_CFG_VALUE)", '#include "b_new.h"\n#define B_VALUE (2 + B_CFG_VALUE + B_NEW)')
    c2 = proj.commit("B gains a header")
    part = proj.record("-o", "kernelcache_kernels=ka", "tests/test_a.py")  # B is not loaded at all
    assert part.rc == 0, part.out
    proj.edit("csrc/kern_b/b_new.h", "B_NEW 0", "B_NEW 1")
    run = proj.affected("HEAD", "--collect-only")
    assert run.selection["everything"] is None
    assert {"tests/test_b.py::test_b[0]", "tests/test_b.py::test_b[1]"} <= selected(run)
    assert "tests/test_c.py::test_c" not in selected(run)
    assert failing(proj) == {"tests/test_b.py::test_b[0]", "tests/test_b.py::test_b[1]"}
    m = json.loads(proj.map.read_text())
    assert m["tests"]["tests/test_a.py::test_a"]["commit"] == c2
    assert m["tests"]["tests/test_b.py::test_b[0]"]["commit"] == c1 and m["kernels"]["kb"]["commit"] == c1


def test_data_file_read_when_the_test_module_is_imported(proj):
    """golden.txt next to B's sources parametrizes test_b.py at import time."""
    proj.edit("csrc/kern_b/golden.txt", "22", "23")
    run = proj.affected("HEAD", "--collect-only")
    assert selected(run) == {"tests/test_b.py::test_b[0]", "tests/test_b.py::test_b[1]"}
    assert failing(proj) == {"tests/test_b.py::test_b[0]", "tests/test_b.py::test_b[1]"}
    m = json.loads(proj.map.read_text())
    assert "csrc/kern_b/golden.txt" in m["files"]["tests/test_b.py"]["reads"]


def test_cli_ignores_its_own_map_and_agrees_with_the_plugin(proj, capsys):
    """The map lives in the repository (untracked), as in the documented workflow."""
    inside = proj.path / "impact-map.json"
    proj.map.rename(inside)
    proj.map = inside
    proj.edit("csrc/kern_c/c.cuh", "(C_IMPL * 1)", "(C_IMPL * 2)")
    assert cli_main(["affected", "--since", "HEAD", "--map", str(inside), "--root", str(proj.path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["everything"] is None, out["everything"]
    assert set(out["selected"]) == {"tests/test_c.py::test_c"} == selected(proj.affected("HEAD", "--collect-only"))
    assert out["files"] == {"tests/test_c.py": out["selected"]["tests/test_c.py::test_c"]}


def test_one_specs_module_many_kernels_selects_per_kernel(proj):
    """test_b.py imports kspecs (which declares A, B and C) but only ever loaded B."""
    proj.edit("csrc/kern_c/c.cuh", "(C_IMPL * 1)", "(C_IMPL * 2)")
    assert selected(proj.affected("HEAD", "--collect-only")) == {"tests/test_c.py::test_c"}
    assert failing(proj) == {"tests/test_c.py::test_c"}


def test_readme_selects_its_doc_test_and_other_docs_nothing(proj):
    proj.edit("README.md", "answer: 42", "answer: 41")
    proj.edit("docs/notes.md", "Nothing", "Still nothing")
    run = proj.affected("HEAD", "--collect-only")
    assert run.selection["everything"] is None
    assert selected(run) == {"tests/test_doc.py::test_readme_answer"}
    assert failing(proj) == {"tests/test_doc.py::test_readme_answer"}


def test_backslash_continued_import(proj):
    """pyhelp.py: ``from pyutil import \\`` / ``    base`` (a submodule, imported at collection)."""
    proj.edit("pyutil/base.py", "return 7", "return 8")
    run = proj.affected("HEAD", "--collect-only")
    assert selected(run) == {"tests/test_py.py::test_py"}
    assert run.selection["selected"]["tests/test_py.py::test_py"].startswith("imports pyutil/base.py (modified")
    assert failing(proj) == {"tests/test_py.py::test_py"}


def test_a_full_rerecord_forgets_the_commits_it_reobserved(proj, capsys):
    """Issue 45, item 5: main recorded the map (the fixture), a conftest change landed, main
    re-recorded everything; a docs-only PR after that selects nothing (a map that unites every
    file record with its old commits says "conftest.py changed since <first commit>" forever).
    A run of part of a file still keeps the union of its commits."""
    c1 = proj.head()
    proj.edit("tests/conftest.py", "# shared fixtures would live here", "# shared fixtures live here")
    c2 = proj.commit("a conftest change")
    assert proj.affected(c1, "--collect-only").selection["everything"].startswith("tests/conftest.py (modified")
    assert proj.record().rc == 0
    main_map = json.loads(proj.map.read_text())
    proj.edit("docs/notes.md", "Nothing", "Still nothing")
    proj.commit("docs only")
    run = proj.affected(c2, "--collect-only")
    assert run.selection["everything"] is None, run.selection["everything"]
    assert selected(run) == set() and len(run.selection["deselected"]) == len(ALL)
    assert cli_main(["affected", "--since", c2, "--map", str(proj.map), "--root", str(proj.path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["everything"] is None and out["selected"] == {} and out["files"] == {}
    m = main_map  # as main wrote it (the selection runs above wrote it too)
    assert {c for f in m["files"].values() for c in f["commits"]} == {c2}
    assert {t["commit"] for t in m["tests"].values()} == {k["commit"] for k in m["kernels"].values()} == {c2}
    c4 = proj.head()
    assert proj.record("-k", "test_a_plus").rc == 0  # part of test_a.py: its record keeps both commits
    m = json.loads(proj.map.read_text())
    assert m["files"]["tests/test_a.py"]["commits"] == sorted([c2, c4])
    assert m["tests"]["tests/test_b.py::test_b[0]"]["commit"] == c2
    assert m["tests"]["tests/test_a.py::test_a"]["commit"] == c2
    assert m["tests"]["tests/test_a.py::test_a_plus"]["commit"] == c4
