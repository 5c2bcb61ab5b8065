"""The property test's own ground truth (issue 38, seed 33): its reference run must describe the
tree the next edit starts from, and compare the same in and outside CI.

Seed 33 "missed" ``tests/test_vendor.py::test_vendored_version`` at edit 17, in CI only: edit 14
changed the vendored ``VERSION`` in the submodule's working tree without committing it there (the
superproject's ``git add -A`` leaves it), so the reference run saw ``assert '5' == '1'``; edit 16
selected everything and the harness went back to the base commit with a submodule checkout, which
dropped that change (``VERSION`` back to the tag's ``3``); edit 17's full run then failed with
``assert '3' == '1'`` — an outcome "change" no edit made, and the selector rightly ran nothing
for it. Outside CI pytest trims the summary's message to ``AssertionError: assert...``, so the
two runs compared equal there: that is why it passed alone.
"""
from __future__ import annotations

from .project import Project
from .project import make_project as make_plain_project
from .submodule_project import SUB, make_project, reset_hard, sub_worktree
from .test_property import required

LONG = "tests/test_long.py::test_long"


def test_back_to_base_keeps_the_submodules_uncommitted_changes(tmp_path, zygote):
    proj = make_project(tmp_path, zygote)
    proj.write(f"{SUB}/VERSION", "5\n")  # edited inside the submodule, not committed there
    base = proj.commit("a superproject commit leaves the submodule's working tree as it is")
    ref = proj.pytest()
    assert ref.summary["tests/test_vendor.py::test_vendored_version"] == ("FAILED", "AssertionError: assert '5' == '1'")
    state = sub_worktree(proj)
    assert state == {"VERSION": b"5\n"}

    proj.write("tests/conftest.py", "# touched\n")  # an edit that selects everything: reverted
    reset_hard(proj, base)  # the checkout alone: the change is gone, the reference no longer holds
    assert (proj.path / SUB / "VERSION").read_text() == "1\n"
    assert required(ref.summary, proj.pytest().summary) == {"tests/test_vendor.py::test_vendored_version"}

    reset_hard(proj, base, state)
    assert sub_worktree(proj) == state
    assert required(ref.summary, proj.pytest().summary) == set()


def test_the_reference_keeps_each_failures_whole_message_outside_ci(tmp_path, monkeypatch):
    """A fresh ``python -m pytest`` (not the zygote, whose environment is the outer run's) with
    no CI variable: the summary still carries the whole message, as it does in CI."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)
    proj: Project = make_plain_project(tmp_path, {
        ".gitignore": "__pycache__/\n",
        "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
        "tests/test_long.py": "def test_long():\n    version = 5\n    assert version == 1, "
                              "f'the vendored library reads {version}, its test expects 1'\n",
    })
    run = proj.pytest()
    assert run.summary[LONG] == ("FAILED", "AssertionError: the vendored library reads 5, its test expects 1"), \
        run.out[-2000:]
