"""Path options take ``--opt=PATH``: pytest reads a separate PATH as a test path when it picks
the rootdir and ini file (before any plugin is loaded), so the space form would silently move
the rootdir, drop the ini and change node ids. The space form is a usage error naming the fix."""
from __future__ import annotations

import json

import pytest

TESTS = "def test_a():\n    pass\n"


@pytest.fixture
def project(plain):
    proj = plain.path / "proj"
    (proj / "tests").mkdir(parents=True)
    (proj / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    (proj / "tests" / "test_a.py").write_text(TESTS)
    out = plain.path / "out"
    out.mkdir()
    (out / "r.json").write_text("{}")  # a report of an earlier run: the path exists
    plain.chdir()
    return proj, out


def _run(plain, proj, *args):
    import os

    os.chdir(proj)
    return plain.runpytest_subprocess("-p", "kernelcache", "--kc-warm=off", "-p", "no:cacheprovider", *args)


@pytest.mark.parametrize("flag", ["--kc-report-json", "--kc-cache-dir", "--kc-lock-dir", "--kc-failed-from"])
def test_space_form_of_a_path_option_is_a_usage_error(plain, project, flag):
    proj, out = project
    value = str(out / "r.json") if flag in ("--kc-report-json", "--kc-failed-from") else str(out)
    r = _run(plain, proj, flag, value)
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str() + r.stderr.str()
    assert f"{flag}={value}" in r.stderr.str() and "rootdir" in r.stderr.str()


def test_space_form_in_pytest_addopts_is_caught_too(plain, project, monkeypatch):
    proj, out = project
    monkeypatch.setenv("PYTEST_ADDOPTS", f"--kc-report-json {out / 'r.json'}")
    r = _run(plain, proj)
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str() + r.stderr.str()


def test_equals_form_keeps_the_rootdir_and_ini(plain, project):
    proj, out = project
    r = _run(plain, proj, f"--kc-report-json={out / 'r.json'}")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    data = json.loads((out / "r.json").read_text())
    assert data["session"]["rootdir"] == str(proj)
    assert [t["nodeid"] for t in data["tests"]] == ["tests/test_a.py::test_a"]
