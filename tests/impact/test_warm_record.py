"""A map recorded on a warm cache (issue 45, item 4): a kernel a test loads with ``kc.load(spec)``,
declared nowhere the plugin looks, is answered by the recalled warm path, which opens none of its
sources. Its record must still name its inputs (from what the load's answer rests on: the
answering entry's manifest under the spec's root), so an edit of its header selects its test.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from .gen_project import FILES, UNDECLARED_FILES, Project, make_project

@pytest.fixture
def proj(tmp_path: Path, zygote) -> Project:
    return make_project(tmp_path, zygote, {**FILES, **UNDECLARED_FILES})


def _recorded(proj: Project) -> dict:
    return json.loads(proj.map.read_text())["kernels"]["kd"]


def test_a_recalled_load_inside_a_test_records_its_inputs(proj):
    warm = proj.pytest("tests/test_d.py")  # builds kd, and writes the recall memo of its call
    assert warm.rc == 0, warm.out
    memos = list((proj.cache / "v1" / "recall").iterdir())
    assert memos, "the full load wrote no recall memo: the warm path this test is about is not taken"
    run = proj.record()  # kd is answered by recall now: no source of it is opened
    assert run.rc == 0, run.out
    kd = _recorded(proj)
    assert kd["root"] == "csrc/kern_d", kd
    assert {"csrc/kern_d/d.cc", "csrc/kern_d/d.h"} <= set(kd["inputs"]), kd
    assert kd["complete"] is True
    assert "kd" in json.loads(proj.map.read_text())["tests"]["tests/test_d.py::test_d"]["kernels"]

    proj.edit("csrc/kern_d/d.h", "D_VALUE 40", "D_VALUE 41")
    sel = proj.affected("HEAD", "--collect-only")
    assert sel.selection["everything"] is None, sel.out
    assert "tests/test_d.py::test_d" in sel.selection["selected"], sel.selection
    assert "csrc/kern_d/d.h" in sel.selection["selected"]["tests/test_d.py::test_d"]
    # and the selected test really fails on the full run (the ground truth)
    full = proj.pytest("tests/test_d.py")
    assert full.summary["tests/test_d.py::test_d"][0] == "FAILED", full.out
