"""The mutation study, small and fast: real edits to a tiny project (a header and a source of
each kernel, a Python helper, a data file, a test, a conftest, docs, a renamed module); for
each, the selected run and the full run are both executed and compared with an unedited
baseline: every test whose outcome the edit changed was selected (0 missed), docs select
nothing, and one kernel's header never selects the other kernel's tests.
(benchmarks/impact_mutations.py does the same over this repository.)"""
from __future__ import annotations

import shutil

from .impact_project import ALL, git, make_project

EDITS = [
    # name, action, expected: "only:<file part>" | "nothing" | "everything"
    ("adder header", ("edit", "csrc/include/add_bias.h", "KC_ADD_BIAS 0", "KC_ADD_BIAS 1"), "only:test_add.py"),
    ("muler source", ("edit", "csrc/mul.cc", "a * b * KC_MUL_SCALE", "a * b * KC_MUL_SCALE + 1"), "only:test_mul.py"),
    ("python helper", ("edit", "mathlib.py", "2 * x", "3 * x"), "only:test_math.py"),
    ("data file", ("edit", "data/expected.json", "42", "43"), "only:test_data.py"),
    ("test file", ("edit", "tests/test_plain.py", "1 + 1 == 2", "1 + 1 == 3"), "only:test_plain.py"),
    ("docs only", ("edit", "docs/guide.md", "Nothing", "Still nothing"), "nothing"),
    ("conftest", ("edit", "tests/conftest.py", "# shared", "import pytest  # shared"), "everything"),
    # test_math.py no longer imports: a collection error, reported by the selected run too
    ("renamed module", ("mv", "mathlib.py", "mathlib_renamed.py"), "broken:test_math.py"),
]


def test_every_outcome_change_is_selected(tmp_path):
    proj = make_project(tmp_path)
    base = proj.record()
    assert base.rc == 0 and set(base.outcomes) == ALL and set(base.outcomes.values()) == {"passed"}, base.out
    pristine = tmp_path / "map-pristine.json"
    shutil.copy(proj.map, pristine)
    changed_somewhere = 0
    for name, action, expected in EDITS:
        if action[0] == "edit":
            proj.edit(*action[1:])
        else:
            git(proj.path, "mv", action[1], action[2])
        shutil.copy(pristine, proj.map)
        sel_run = proj.affected()
        full = proj.pytest()
        git(proj.path, "reset", "-q", "--hard")
        git(proj.path, "clean", "-fdq")
        sel = sel_run.selection
        selected = set(sel["selected"])
        # outcome changes: a different outcome, or gone (its file no longer imports: a collection
        # error, which the selected run reports too)
        changed = {n for n in ALL if full.outcomes.get(n) != base.outcomes[n]}
        gone = {n for n in changed if n not in full.outcomes}
        assert all(f"ERROR {n.split('::')[0]}" in sel_run.out for n in gone), (name, sel_run.out)
        assert changed - gone <= selected, (name, changed - selected, sel)
        for n in changed - gone:  # the selected run saw the same outcome as the full run
            assert sel_run.outcomes[n] == full.outcomes[n], (name, n)
        changed_somewhere += bool(changed)
        if expected == "nothing":
            assert not selected and not changed and sel_run.rc == 0, (name, sel)
        elif expected == "everything":
            assert sel["everything"] and selected == ALL, (name, sel)
        elif expected.startswith("broken:"):
            assert gone == {n for n in ALL if expected[7:] in n} and sel["everything"] is None, (name, sel)
            assert not selected - gone, (name, sel)
        else:
            part = expected.split(":", 1)[1]
            assert sel["everything"] is None and selected == {n for n in ALL if part in n}, (name, sel)
            assert sel["n_deselected"] == len(ALL) - len(selected)
    assert changed_somewhere >= 6  # the edits really broke things
