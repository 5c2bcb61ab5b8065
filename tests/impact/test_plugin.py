"""The plugin end to end on a tiny git project: recording the map (also under xdist),
selecting by change with reasons, deselection reported like ``-k``, and the safe fallbacks."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .impact_project import ALL, Project, git, make_project


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Project:
    """Recorded once per module (kernels built, map written); tests work on copies."""
    base = tmp_path_factory.mktemp("impact-template")
    proj = make_project(base)
    run = proj.record()
    assert run.rc == 0, run.out
    return proj


@pytest.fixture
def proj(template: Project, tmp_path: Path) -> Project:
    for name in ("proj", "kc-cache"):
        shutil.copytree(template.path.parent / name, tmp_path / name, symlinks=True)
    shutil.copy(template.map, tmp_path / "impact-map.json")
    return Project(tmp_path / "proj", tmp_path / "kc-cache", tmp_path / "impact-map.json")


def test_map_records_kernels_inputs_lazy_loads_and_reads(proj):
    m = json.loads(proj.map.read_text())
    assert m["kind"] == "kernelcache-impact-map" and m["commit"] == git(proj.path, "rev-parse", "HEAD").strip()
    assert set(m["tests"]) == ALL
    assert m["tests"]["tests/test_add.py::test_add"]["kernels"] == ["adder"]
    assert m["tests"]["tests/test_mul.py::test_mul_lazy"]["kernels"] == ["muler"]  # loaded, no marker
    adder = m["kernels"]["adder"]
    assert adder["complete"] and adder["root"] == "csrc"
    assert {"csrc/add.cc", "csrc/include/add_bias.h"} <= set(adder["inputs"])
    assert "csrc/include/mul_scale.h" not in adder["inputs"] and adder["modules"] == ["kspecs.py"]
    assert "csrc/include/tvm/ffi/function.h" in adder["absent"]  # a header there would shadow tvm-ffi's
    assert "data/expected.json" in m["files"]["tests/test_data.py"]["reads"]


def test_header_change_selects_only_that_kernels_tests(proj):
    proj.edit("csrc/include/add_bias.h", "KC_ADD_BIAS 0", "KC_ADD_BIAS 1")
    run = proj.affected()
    sel = run.selection
    assert sel["everything"] is None
    assert set(sel["selected"]) == {n for n in ALL if "test_add.py" in n}
    assert sel["selected"]["tests/test_add.py::test_add"] == \
        "uses adder, whose input csrc/include/add_bias.h (modified, uncommitted) changed"
    assert sel["n_deselected"] == 5 and set(run.outcomes) == set(sel["selected"])
    assert run.outcomes["tests/test_add.py::test_add"] == "failed"  # the change is caught
    assert "5 deselected" in run.out and "kernelcache impact" in run.out
    assert "deselected 5" in run.out


def test_lazy_load_python_helper_and_data_file(proj):
    proj.edit("csrc/include/mul_scale.h", "KC_MUL_SCALE 1", "KC_MUL_SCALE 1 * 1")
    proj.edit("mathlib.py", "2 * x", "x + x")
    proj.edit("data/expected.json", "42", "42 ")
    sel = proj.affected("HEAD", "--collect-only").selection
    assert set(sel["selected"]) == {"tests/test_mul.py::test_mul", "tests/test_mul.py::test_mul_lazy",
                                    "tests/test_math.py::test_double", "tests/test_data.py::test_answer"}
    assert "uses muler" in sel["selected"]["tests/test_mul.py::test_mul_lazy"]
    assert sel["selected"]["tests/test_math.py::test_double"].startswith("imports mathlib.py (modified")
    assert sel["selected"]["tests/test_data.py::test_answer"].startswith("its file's tests read data/expected.json")


def test_docs_only_runs_nothing_and_passes(proj):
    proj.edit("docs/guide.md", "Nothing", "Still nothing")
    proj.commit("docs")
    run = proj.affected("HEAD~1")
    assert run.rc == 0, run.out
    assert run.selection["n_selected"] == 0 and run.selection["n_deselected"] == len(ALL), run.selection
    assert run.outcomes == {} and f"{len(ALL)} deselected" in run.out


@pytest.mark.parametrize("path,why", [("tests/conftest.py", "a conftest"), ("pyproject.toml", "build metadata"),
                                      ("Makefile", "cannot tell which tests")])
def test_changes_that_select_everything(proj, path, why):
    proj.write(path, (proj.path / path).read_text() + "\n" if (proj.path / path).exists() else "all:\n")
    sel = proj.affected("HEAD", "--collect-only").selection
    assert why in sel["everything"] and path in sel["everything"]
    assert sel["n_selected"] == len(ALL)


def test_new_and_deleted_test_files(proj):
    proj.write("tests/test_new.py", "def test_new():\n    assert True\n")
    git(proj.path, "rm", "-q", "tests/test_plain.py")
    sel = proj.affected("HEAD", "--collect-only").selection
    assert sel["everything"] is None
    assert sel["selected"] == {"tests/test_new.py::test_new": "its test file tests/test_new.py (added, untracked) changed"}


@pytest.mark.parametrize("setup,why", [
    ("missing", "no impact map at"), ("corrupt", "is corrupt"), ("old", "an old map"), ("stale", "does not have"),
])
def test_unusable_map_runs_everything(proj, setup, why):
    if setup == "missing":
        proj.map.unlink()
    elif setup == "corrupt":
        proj.map.write_text(proj.map.read_text()[:100])
    else:
        m = json.loads(proj.map.read_text())
        if setup == "old":
            m["format"] = 0
        else:
            m["commit"] = "0123456789" * 4
        proj.map.write_text(json.dumps(m))
    proj.edit("docs/guide.md", "Nothing", "Still nothing")
    sel = proj.affected("HEAD", "--collect-only").selection
    assert sel["everything"].startswith("no usable impact map") and why in sel["everything"]
    assert sel["n_selected"] == len(ALL)


def test_shallow_clone_without_ref_runs_everything(proj, tmp_path):
    proj.edit("docs/guide.md", "Nothing", "Still nothing")
    proj.commit("docs")
    clone = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{proj.path}", str(clone))
    shallow = Project(clone, proj.cache, proj.map)
    sel = shallow.affected("HEAD~1", "--collect-only").selection
    assert "changed files unknown" in sel["everything"] and "shallow clone" in sel["everything"]


def test_xdist_records_and_selects_like_a_single_process(proj):
    proj.map.unlink()
    rec = proj.record(workers=2)
    assert rec.rc == 0, rec.out
    m = json.loads(proj.map.read_text())
    assert set(m["tests"]) == ALL and m["tests"]["tests/test_mul.py::test_mul_lazy"]["kernels"] == ["muler"]
    assert "csrc/include/add_bias.h" in m["kernels"]["adder"]["inputs"]
    proj.edit("csrc/include/add_bias.h", "KC_ADD_BIAS 0", "KC_ADD_BIAS 1")
    run = proj.affected(workers=2)
    sel = run.selection
    assert set(sel["selected"]) == {n for n in ALL if "test_add.py" in n} and sel["n_deselected"] == 5
    assert set(run.outcomes) == set(sel["selected"]) and "5 deselected" in run.out
    # the selected run merged its records: the map still knows every test
    assert set(json.loads(proj.map.read_text())["tests"]) == ALL
    # a full re-record at a new commit: every file's tests ran (across the workers), so each file
    # record is replaced, not united with its older commits
    proj.edit("csrc/include/add_bias.h", "KC_ADD_BIAS 1", "KC_ADD_BIAS 0")
    head = proj.commit("a later commit")
    assert proj.record(workers=2).rc == 0
    m = json.loads(proj.map.read_text())
    assert {c for f in m["files"].values() for c in f["commits"]} == {head}, m["files"]
