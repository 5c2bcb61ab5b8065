"""A vendored library as a git submodule (issue 45, item 2): a bump of the submodule, or an edit
inside its working tree, shows in the superproject as one gitlink path. Selection looks inside:
the tests whose kernel read a header there run (or everything runs, with a reason), never the
other way round. Real repositories, a real ``git submodule add``, a map recorded by a real run.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelcache.cli import main as cli_main
from kernelcache.impact.changes import MODIFIED, changed_files, repo_files

from .gen_project import ALL
from .project import Project, git
from .submodule_project import (HEADER, SUB, SUB_TESTS, VERSION, add_submodule, checkout, init_repo,
                                make_library, make_project)

TEST_C = "tests/test_c.py::test_c"


@pytest.fixture
def proj(tmp_path: Path, zygote) -> Project:
    p = make_project(tmp_path, zygote)
    run = p.record()
    assert run.rc == 0 and set(run.summary) == ALL | SUB_TESTS, run.out
    return p


def selected(run) -> set[str]:
    assert run.selection, run.out
    assert run.selection["everything"] is None, run.selection["everything"]
    return set(run.selection["selected"])


def failing(proj: Project) -> set[str]:
    return {n for n, (o, _) in proj.pytest().summary.items() if o != "PASSED"}


def cli(proj: Project, since: str, capsys) -> dict:
    capsys.readouterr()
    assert cli_main(["affected", "--since", since, "--map", str(proj.map), "--root", str(proj.path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_map_records_files_inside_the_submodule(proj):
    m = json.loads(proj.map.read_text())
    assert HEADER in m["kernels"]["kc"]["inputs"]
    assert VERSION in m["files"]["tests/test_vendor.py"]["reads"]  # a repository file, though in a submodule
    assert HEADER in repo_files(proj.path) and SUB not in repo_files(proj.path)


def test_a_submodule_bump_selects_the_tests_whose_kernel_read_its_header(proj, capsys):
    base = proj.head()
    checkout(proj.path / SUB, "v2")  # the header moves, nothing else
    proj.commit("bump minilib to v2")
    run = proj.affected(base, "--collect-only")
    assert selected(run) == {TEST_C}
    assert f"whose input {HEADER} (modified, in submodule {SUB}" in run.selection["selected"][TEST_C]
    out = cli(proj, base, capsys)
    assert out["everything"] is None and set(out["selected"]) == {TEST_C}
    assert failing(proj) == {TEST_C}


def test_an_edit_inside_the_submodule_selects_what_reads_it(proj, capsys):
    proj.write(HEADER, "#define MINILIB_CLAMP 2\n")  # uncommitted, in the submodule's working tree
    run = proj.affected("HEAD", "--collect-only")
    assert selected(run) == {TEST_C}
    assert set(cli(proj, "HEAD", capsys)["selected"]) == {TEST_C}
    assert failing(proj) == {TEST_C}
    proj.write(VERSION, "2\n")  # read by a test (and under kb's root: no compiler read it)
    run = proj.affected("HEAD", "--collect-only")
    assert {TEST_C, "tests/test_vendor.py::test_vendored_version"} <= selected(run)
    assert "read csrc/third_party/minilib/VERSION (modified" in \
        run.selection["selected"]["tests/test_vendor.py::test_vendored_version"]
    assert failing(proj) == {TEST_C, "tests/test_vendor.py::test_vendored_version"}


def test_an_untracked_header_inside_the_submodule_counts(proj):
    proj.write(f"{SUB}/include/minilib/extra.h", "#define EXTRA 1\n")
    run = proj.affected("HEAD", "--collect-only")
    assert TEST_C in selected(run), run.selection
    assert "extra.h (added, untracked, in submodule" in run.selection["selected"][TEST_C]


def superproject(tmp_path: Path) -> tuple[Path, Path]:
    lib = make_library(tmp_path / "minilib")
    sup = tmp_path / "sup"
    sup.mkdir()
    init_repo(sup)
    (sup / "README.md").write_text("superproject\n")
    git(sup, "add", "-A")
    git(sup, "commit", "-q", "-m", "init")
    add_submodule(sup, lib, "vendor/minilib", "v1")
    git(sup, "commit", "-q", "-am", "vendor v1")
    return sup, sup / "vendor" / "minilib"


def test_a_submodule_that_cannot_be_diffed_means_changes_unknown(tmp_path):
    sup, sub = superproject(tmp_path)
    (sub / "local.h").write_text("#define LOCAL 1\n")  # a commit only this clone of the submodule has
    git(sub, "add", "-A")
    git(sub, "commit", "-q", "-m", "local")
    git(sup, "commit", "-q", "-am", "vendor a local commit")
    base = git(sup, "rev-parse", "HEAD").strip()
    checkout(sub, "v2")
    git(sub, "reflog", "expire", "--expire=now", "--all")
    git(sub, "gc", "-q", "--prune=now")  # ... and then lost (a fresh or shallow clone of the submodule)
    git(sup, "commit", "-q", "-am", "bump to v2")
    cs = changed_files(sup, base)
    assert not cs.known and "vendor/minilib: commit" in cs.error and "not in its object store" in cs.error
    git(sup, "submodule", "deinit", "-q", "-f", "vendor/minilib")  # not checked out at all
    cs = changed_files(sup, "HEAD~2")
    assert not cs.known and "vendor/minilib changed but is not checked out" in cs.error, cs.error


def test_nested_submodules_are_opened_too(tmp_path):
    deep = make_library(tmp_path / "deep")
    outer = tmp_path / "outer"
    outer.mkdir()
    init_repo(outer)
    (outer / "outer.h").write_text("#define OUTER 1\n")
    git(outer, "add", "-A")
    git(outer, "commit", "-q", "-m", "outer")
    add_submodule(outer, deep, "deep", "v1")
    git(outer, "commit", "-q", "-am", "outer vendors deep v1")
    sup = tmp_path / "sup"
    sup.mkdir()
    init_repo(sup)
    (sup / "a.txt").write_text("a\n")
    git(sup, "add", "-A")
    git(sup, "commit", "-q", "-m", "init")
    git(sup, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(outer), "vendor/outer")
    git(sup, "-c", "protocol.file.allow=always", "submodule", "update", "-q", "--init", "--recursive")
    git(sup, "commit", "-q", "-am", "vendor outer")
    base = git(sup, "rev-parse", "HEAD").strip()
    nested = "vendor/outer/deep/include/minilib/clamp.h"
    assert nested in repo_files(sup)
    checkout(sup / "vendor/outer/deep", "v2")  # bump deep inside outer, then outer inside sup
    git(sup / "vendor/outer", "commit", "-q", "-am", "deep v2")
    git(sup, "commit", "-q", "-am", "bump outer")
    cs = changed_files(sup, base)
    assert cs.known, cs.error
    assert set(cs.changes) == {nested} and cs.changes[nested].kind == MODIFIED
    (sup / nested).write_text("#define MINILIB_CLAMP 7\n")  # and an edit two levels down
    cs = changed_files(sup, "HEAD")
    assert cs.known and set(cs.changes) == {nested} and "uncommitted" in cs.changes[nested].note
