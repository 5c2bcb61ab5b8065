"""Witnesses (issue 38): every test a selection deselects carries, in ``--kc-report-json``, the
inputs whose disjointness from the change justified it; ``kernelcache affected --verify REPORT``
recomputes them on the current tree and exits 1 naming each that no longer holds."""
from __future__ import annotations

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


def verify(proj: Project, capsys) -> tuple[int, str]:
    report = proj.path.parent / "report.json"
    rc = cli_main(["affected", "--verify", str(report), "--root", str(proj.path)])
    return rc, capsys.readouterr().out


def test_witnesses_verify_then_fail_after_an_edit(proj, capsys):
    proj.edit("csrc/kern_c/c_impl.cu", "C_IMPL 3", "C_IMPL 4")
    run = proj.affected("HEAD")
    sel = run.selection
    assert sel["everything"] is None and set(sel["selected"]) == {"tests/test_c.py::test_c"}, run.out
    w = sel["witness"]
    assert set(w["tests"]) == set(sel["deselected"]) == ALL - {"tests/test_c.py::test_c"}
    ka = w["groups"]["kernel:ka"]
    assert ka["files"]["csrc/kern_a/a.h"] and ka["files"]["csrc/kern_a/shared.h"] is None  # a blob; an absent probe
    assert ka["kernel"]["entry_id"] and ka["kernel"]["inputs_digest"] and ka["env"]["tool:cxx"]["version"]
    assert "kernel:ka" in w["tests"]["tests/test_a.py::test_a"]
    assert w["groups"]["reads:tests/test_doc.py"]["files"]["README.md"]

    rc, out = verify(proj, capsys)
    assert rc == 0, out
    assert f"{len(sel['deselected'])} of {len(sel['deselected'])} witness(es) hold" in out

    proj.edit("csrc/kern_a/a.h", "(1 + A_EXTRA)", "(2 + A_EXTRA)")  # a deselected test's kernel input
    proj.edit("README.md", "answer: 42", "answer: 43")  # a file a deselected test read
    rc, out = verify(proj, capsys)
    assert rc == 1, out
    broken = {line.split(": witness")[0] for line in out.splitlines() if ": witness no longer holds" in line}
    assert broken == {"tests/test_a.py::test_a", "tests/test_a.py::test_a_plus", "tests/test_doc.py::test_readme_answer"}
    assert "kernel:ka: csrc/kern_a/a.h " in out and "reads:tests/test_doc.py: README.md " in out
    assert "2 no longer hold" not in out and "3 no longer hold" in out


def test_verify_without_witnesses_says_so(tmp_path, capsys):
    report = tmp_path / "r.json"
    report.write_text('{"format": 1}')
    assert cli_main(["affected", "--verify", str(report), "--root", str(tmp_path)]) == 2
    assert "has no witnesses" in capsys.readouterr().out
