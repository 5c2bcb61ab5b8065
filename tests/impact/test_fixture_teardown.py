"""A fixture's teardown is part of the fixture (issue 38): what its finalizer reads (or loads)
belongs to every test that uses it, not to the test that happens to be running when it is torn
down. A session fixture is torn down after the session's last test — here one that does not use
it: its record took the read, the edit selected that test alone, and the selected run was green
while the full run errs.
"""
from __future__ import annotations

import json

from .project import make_project

FILES = {
    ".gitignore": "__pycache__/\n",
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
    "data/teardown.txt": "ok\n",
    "tests/conftest.py": """\
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="session")
def checked():
    yield 1
    assert (DATA / "teardown.txt").read_text() == "ok\\n", "checked at teardown"
""",
    "tests/test_one.py": "def test_one(checked):\n    assert checked == 1\n",
    "tests/test_two.py": "def test_two(checked):\n    assert checked == 1\n",
    "tests/test_z.py": "def test_z():\n    assert True\n",  # the last: the session fixture's teardown runs in it
}
USERS = {"tests/test_one.py::test_one", "tests/test_two.py::test_two"}


def test_what_a_fixtures_teardown_reads_selects_every_test_that_uses_it(tmp_path, zygote):
    proj = make_project(tmp_path, FILES, zygote)
    run = proj.record()
    assert run.rc == 0, run.out[-3000:]
    m = json.loads(proj.map.read_text())
    assert m["fixtures"]["tests::checked"]["reads"] == ["data/teardown.txt"], m["fixtures"]
    assert m["tests"]["tests/test_z.py::test_z"]["fixtures"] == []

    proj.edit("data/teardown.txt", "ok", "changed")
    full = proj.pytest()
    assert full.summary["tests/test_z.py::test_z"][0] == "ERROR", full.out[-3000:]  # at its teardown
    sel = proj.affected("HEAD")
    assert sel.selection["everything"] is None, sel.selection["everything"]
    assert set(sel.selection["selected"]) == USERS, sel.selection["selected"]
    assert sel.summary["tests/test_two.py::test_two"][0] == "ERROR", sel.out[-3000:]  # the selected run errs too
