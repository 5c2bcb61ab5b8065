"""Report mode (issue 38): ``--kc-affected-mode=report`` runs every test and reports what the
selection would have deselected and whether any of those failed — in the terminal summary, the
JSON report and the GitHub step summary. The miss here is real: a test whose outcome depends on
an environment variable (no input the map can see) fails while the selection would skip it."""
from __future__ import annotations

from pathlib import Path

from .gen_project import ALL, FILES, make_project

FLAVOURED = {**FILES, "tests/test_flavour.py": "import os\n\n\ndef test_flavour():\n"
                                               "    assert os.environ.get('KC_TEST_FLAVOUR', '1') == '1'\n"}


def test_report_mode_runs_everything_and_counts_what_it_would_have_missed(tmp_path: Path, zygote):
    proj = make_project(tmp_path, zygote, FLAVOURED)
    everyone = ALL | {"tests/test_flavour.py::test_flavour"}
    run = proj.record()
    assert run.rc == 0 and set(run.summary) == everyone, run.out
    enforce = proj.affected("HEAD", "--collect-only")
    assert enforce.selection["deselected"] and "mode" in enforce.selection
    assert enforce.selection["mode"] == "enforce" and "report" not in enforce.selection

    proj.edit("csrc/kern_c/c_impl.cu", "C_IMPL 3", "C_IMPL 4")  # test_c fails, and is selected
    summary = tmp_path / "step-summary.md"
    base_env = proj.env
    proj.env = lambda: {**base_env(), "KC_TEST_FLAVOUR": "2", "GITHUB_STEP_SUMMARY": str(summary)}  # type: ignore[method-assign]
    run = proj.affected("HEAD", "--kc-affected-mode=report")
    sel = run.selection
    assert set(run.summary) == everyone, run.out  # everything ran
    assert sel["mode"] == "report" and set(sel["selected"]) == {"tests/test_c.py::test_c"}
    n = len(everyone) - 1
    assert sel["report"] == {"would_deselect": n, "failed": ["tests/test_flavour.py::test_flavour"],
                             "line": f"would deselect {n}; of those 1 failed"}
    assert f"report mode: would deselect {n}; of those 1 failed" in run.out
    assert "would have missed: tests/test_flavour.py::test_flavour" in run.out
    assert "deselected" not in run.out.splitlines()[-1]  # pytest's own summary: nothing deselected
    assert f"test impact (report mode): would deselect {n}; of those 1 failed" in summary.read_text()
    assert {n for n, (o, _) in run.summary.items() if o != "PASSED"} == {"tests/test_c.py::test_c",
                                                                           "tests/test_flavour.py::test_flavour"}
