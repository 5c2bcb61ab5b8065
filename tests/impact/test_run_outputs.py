"""A run's own outputs inside the checkout are no change (issue 46): a kernel cache (and its
lock dir) under the workspace without a ``.gitignore`` entry, and the JSON report a recording run
wrote there, used to make every later selection run everything ("cannot tell which tests
.kc-cache/locks/... affects"). Real runs, real git, the plugin and the CLI."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelcache.cli import main as cli_main

from .gen_project import FILES, Project, make_project


@pytest.fixture
def proj(tmp_path: Path, zygote) -> Project:
    p = make_project(tmp_path, zygote, FILES)
    p.cache = p.path / ".kc-cache"  # the cache inside the checkout, as `.ci/run` puts it; not ignored
    return p


def test_a_cache_and_a_report_inside_the_checkout_select_nothing(proj, capsys, monkeypatch):
    report = proj.path / "kc-report.json"
    run = proj.record(f"--kc-report-json={report}")
    assert run.rc == 0, run.out
    assert report.is_file() and any((proj.path / ".kc-cache").rglob("manifest.json"))
    assert json.loads(proj.map.read_text())["outputs"] == ["kc-report.json"]

    sel = proj.affected("HEAD", "--collect-only")
    assert sel.selection["everything"] is None, sel.selection["everything"]
    assert sel.selection["n_selected"] == 0 and sel.selection["changed"] == [], sel.selection

    monkeypatch.setenv("KERNELCACHE_DIR", str(proj.cache))
    monkeypatch.setenv("KERNELCACHE_LOCK_DIR", str(proj.cache / "locks"))
    assert cli_main(["affected", "--since", "HEAD", "--map", str(proj.map), "--root", str(proj.path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["everything"] is None and out["changed"] == [] and not out["selected"], out

    # a real change beside them is still seen
    proj.edit("csrc/kern_a/a.h", "(1 + A_EXTRA)", "(2 + A_EXTRA)")
    sel = proj.affected("HEAD", "--collect-only")
    assert sel.selection["everything"] is None
    assert "tests/test_a.py::test_a" in sel.selection["selected"]
