"""``kernelcache doctor`` says whether the FlashInfer route would take the installed FlashInfer
(issue 46: it never said the route was off for an untested version), read from the installed
distribution's metadata: the real one, and another version's metadata earlier on the path."""
from __future__ import annotations

import os
from pathlib import Path

from .conftest import Cli


def _route_line(out: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith("flashinfer route"))


def test_doctor_says_the_route_is_available_for_the_tested_flashinfer(cli: Cli) -> None:
    p = cli.run("doctor")
    assert "available for FlashInfer 0.7.4" in _route_line(p.stdout), p.stdout


def test_doctor_says_the_route_is_off_for_another_flashinfer(cli: Cli, tmp_path: Path) -> None:
    site = tmp_path / "other-site"
    info = site / "flashinfer_python-0.0.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.0.9\n")
    path = os.pathsep.join(filter(None, [str(site), cli.env.get("PYTHONPATH", "")]))
    line = _route_line(cli.run("doctor", PYTHONPATH=path).stdout)
    assert line.split(None, 2)[2].startswith("off: FlashInfer 0.0.9 is not a version the route was tested with"), line
