"""Issue 38, the record side: what a fixture's setup (any scope), a test file's collection and a
conftest's import did belongs to every test that depends on it, whichever test happened to run
it first; what no record can see (a subprocess, a read outside the repository) always runs unless
declared. Each on the generated project (:mod:`.scope_project`), recorded by a real run: the
selection is checked, and a full run shows that the selected tests are the ones that fail.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from .project import Project, make_project
from .scope_project import FILES, S, SCOPED_TESTS

SUB = f"{S}test_sub.py::test_sub"  # runs a subprocess: opaque, always selected


@pytest.fixture
def proj(tmp_path: Path, zygote) -> Project:
    p = make_project(tmp_path, FILES, zygote)
    assert p.pytest().rc == 0  # recorded on a warm cache, as CI's: a load there is recalled, reading no source
    run = p.record()
    assert run.rc == 0 and SCOPED_TESTS <= set(run.summary), run.out[-3000:]
    return p


def select(proj: Project) -> dict[str, str]:
    run = proj.affected("HEAD", "--collect-only")
    assert run.selection, run.out[-3000:]
    assert run.selection["everything"] is None, run.selection["everything"]
    return run.selection["selected"]


def failing(proj: Project) -> set[str]:
    return {n for n, (o, _) in proj.pytest().summary.items() if o != "PASSED"}


def test_a_session_fixture_in_a_conftest_belongs_to_every_test_that_uses_it(proj):
    """kern_e (session scope) is set up once, by test_s1.py::test_e1; test_s2.py's two tests used
    the cached kernel. An edit of its header selects all three (it selected only the first)."""
    proj.edit("csrc/kern_e/e.h", "50", "51")
    three = {f"{S}test_s1.py::test_e1", f"{S}test_s2.py::test_e2a", f"{S}test_s2.py::test_e2b"}
    sel = select(proj)
    assert set(sel) == three | {SUB}, sel
    assert sel[f"{S}test_s2.py::test_e2b"] == "uses ke, whose input csrc/kern_e/e.h (modified, uncommitted) changed"
    assert failing(proj) == three
    m = json.loads(proj.map.read_text())
    assert m["fixtures"][f"{S[:-1]}::kern_e"]["loaded"] == ["ke"] and "csrc/kern_e/e.h" in m["kernels"]["ke"]["inputs"]


def test_a_package_fixture_belongs_to_every_test_of_the_package(proj):
    proj.edit("csrc/kern_f/f.h", "60", "61")
    two = {f"{S}test_s1.py::test_f1", f"{S}test_s2.py::test_f2"}
    assert set(select(proj)) == two | {SUB}
    assert failing(proj) == two


def test_a_module_fixture_in_a_conftest_used_by_two_files(proj):
    """mod_value (module scope, in the conftest) reads a data file at setup, once per module."""
    proj.edit("data/mod_value.txt", "5", "6")
    two = {f"{S}test_s2.py::test_mod_a", f"{S}test_s3.py::test_mod_b"}
    sel = select(proj)
    assert set(sel) == two | {SUB}
    assert sel[f"{S}test_s3.py::test_mod_b"].startswith(f"its fixture {S[:-1]}::mod_value read data/mod_value.txt")
    assert failing(proj) == two


def test_a_class_fixture_belongs_to_the_tests_of_its_class(proj):
    proj.edit("csrc/kern_h/h.h", "80", "81")
    two = {f"{S}test_s2.py::TestH::test_h1", f"{S}test_s2.py::TestH::test_h2"}
    assert set(select(proj)) == two | {SUB}
    assert failing(proj) == two


def test_a_kernel_loaded_at_module_import(proj):
    """``MOD = kc.load(spec)`` at the top of test_m.py: its header selects that file's tests (it ran
    everything: "cannot tell which tests csrc/kern_g/g.h affects")."""
    proj.edit("csrc/kern_g/g.h", "70", "71")
    two = {f"{S}test_m.py::test_g1", f"{S}test_m.py::test_g2"}
    assert set(select(proj)) == two | {SUB}
    assert failing(proj) == two
    assert "kg" in json.loads(proj.map.read_text())["files"][f"{S}test_m.py"]["loaded"]


def test_a_golden_value_a_conftest_reads_at_import(proj):
    """tests/scoped/conftest.py reads data/conftest_golden.txt at import: every test under its
    directory depends on it (it ran everything); the tests above it do not."""
    proj.edit("data/conftest_golden.txt", "7", "8")
    sel = select(proj)
    assert set(sel) == SCOPED_TESTS
    assert sel[f"{S}test_s1.py::test_golden"] == \
        f"{S}conftest.py (at import) read data/conftest_golden.txt (modified, uncommitted)"
    assert failing(proj) == {f"{S}test_s1.py::test_golden"}


def test_a_subprocess_test_always_runs_unless_its_inputs_are_declared(proj):
    """test_sub reads data/sub_input.txt through a subprocess: opaque, selected for any change,
    with the reason. test_sub_declared does the same and declares that input in
    ``kernelcache_impact_declared``: it runs when that file changes, else not."""
    proj.edit("docs/notes.md", "Nothing", "Still nothing")
    sel = select(proj)
    assert set(sel) == {SUB}
    assert sel[SUB].startswith("opaque: it started a subprocess (subprocess.Popen: ")
    proj.edit("data/sub_input.txt", "9", "8")
    sel = select(proj)
    assert set(sel) == {SUB, f"{S}test_sub.py::test_sub_declared"}
    assert sel[f"{S}test_sub.py::test_sub_declared"] == \
        "its declared input data/sub_input.txt (modified, uncommitted) changed (data/sub_input.txt)"
    assert failing(proj) == {SUB, f"{S}test_sub.py::test_sub_declared"}


def test_a_read_outside_the_repository_is_opaque(proj):
    """A test that reads a file beside the checkout (not the environment, not made by this run)."""
    (proj.path.parent / "outside.txt").write_text("3\n")
    proj.write("tests/test_outside.py", "from pathlib import Path\n\n\ndef test_outside():\n"
               "    assert (Path(__file__).resolve().parents[2] / 'outside.txt').read_text() == '3\\n'\n")
    proj.commit("a test reading outside the checkout")
    assert proj.record().rc == 0
    (proj.path.parent / "outside.txt").write_text("4\n")
    proj.edit("docs/notes.md", "Nothing", "Still nothing")
    sel = select(proj)
    assert set(sel) == {SUB, "tests/test_outside.py::test_outside"}
    assert sel["tests/test_outside.py::test_outside"].startswith(f"opaque: it read {proj.path.parent / 'outside.txt'}")
    assert failing(proj) == {"tests/test_outside.py::test_outside"}


def test_xdist_workers_fixture_records_apply_to_every_test(tmp_path):
    """Under xdist each worker sets kern_e up itself; the map unites the workers' records."""
    proj = make_project(tmp_path, FILES)
    run = proj.record(workers=2)
    assert run.rc == 0 and SCOPED_TESTS <= set(run.outcomes), run.out[-3000:]
    m = json.loads(proj.map.read_text())
    proj.edit("csrc/kern_e/e.h", "50", "51")
    run = proj.affected("HEAD", workers=2)
    three = {f"{S}test_s1.py::test_e1", f"{S}test_s2.py::test_e2a", f"{S}test_s2.py::test_e2b"}
    assert set(run.selection["selected"]) == three | {SUB}, run.out[-3000:]
    assert {n for n, o in run.outcomes.items() if o == "failed"} == three
    users = {n for n, t in m["tests"].items() if f"{S[:-1]}::kern_e" in t["fixtures"]}
    assert len(users) == 3 and m["fixtures"][f"{S[:-1]}::kern_e"]["loaded"] == ["ke"]


def test_a_deselected_tests_witness_holds_what_its_fixtures_read_and_loaded(proj, capsys):
    """The witness of a deselected test names what its fixtures read and loaded, whichever test
    set them up: test_e2b used kern_e (a session fixture test_e1 set up) and test_mod_b a module
    fixture reading data/mod_value.txt; editing either input afterwards breaks their witnesses
    (before, neither was in them: both witnesses still held)."""
    from kernelcache.cli import main as cli_main

    proj.edit("csrc/kern_h/h.h", "80", "81")
    run = proj.affected("HEAD")
    sel = run.selection
    e2b, mod_b = f"{S}test_s2.py::test_e2b", f"{S}test_s3.py::test_mod_b"
    assert {e2b, mod_b} <= set(sel["deselected"]), run.out[-3000:]
    w = sel["witness"]
    assert "kernel:ke" in w["tests"][e2b]
    assert any("data/mod_value.txt" in w["groups"][g]["files"] for g in w["tests"][mod_b])
    report = proj.path.parent / "report.json"

    def verify() -> tuple[int, str]:
        rc = cli_main(["affected", "--verify", str(report), "--root", str(proj.path)])
        return rc, capsys.readouterr().out

    assert verify()[0] == 0
    proj.edit("csrc/kern_e/e.h", "50", "51")
    proj.edit("data/mod_value.txt", "5", "6")
    rc, out = verify()
    broken = {line.split(": witness")[0] for line in out.splitlines() if ": witness no longer holds" in line}
    assert rc == 1 and {e2b, mod_b} <= broken, out
