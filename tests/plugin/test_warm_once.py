"""Acceptance 1: warm once per session under real xdist; count real compiler runs."""
from __future__ import annotations

import json
import re

TESTS = '''
import os
import time
import pytest

def _record(kernel):
    wid = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(os.path.dirname(__file__), "uses.log"), "a") as f:
        f.write(f"{wid} {kernel}\\n")

@pytest.mark.kernel("kc_add_a")
@pytest.mark.parametrize("i", range(8))
def test_add(kc_kernel, i):
    assert kc_kernel.add(i, 2) == i + 2
    _record("kc_add_a")
    time.sleep(0.05)

@pytest.mark.kernel("kc_add_b")
@pytest.mark.parametrize("i", range(8))
def test_sub(kernelcache_module, i):
    assert kernelcache_module("kc_add_b").sub(i, 2) == i - 2
    _record("kc_add_b")
    time.sleep(0.05)
'''


def _row(out: str, name: str) -> list[str]:
    for line in out.splitlines():
        if line.startswith(name + " "):
            return line.split()
    raise AssertionError(f"no summary row for {name}:\n{out}")


def test_xdist_cold_builds_each_kernel_once_then_warm_hits(kcp):
    kcp.ini()
    kcp.pytester.makepyfile(test_kernels=TESTS)
    report = kcp.path / "report.json"

    cold = kcp.run("-p", "xdist", "-n", "4", "-p", "kernelcache", f"--kc-report-json={report}")
    assert cold.ret == 0, cold.stdout.str() + cold.stderr.str()
    cold.assert_outcomes(passed=16)
    # Each kernel's own source was compiled exactly once in the whole session (4 workers).
    assert kcp.compiles("add_a.cc") == 1
    assert kcp.compiles("add_b.cc") == 1
    out = cold.stdout.str()
    assert _row(out, "kc_add_a")[1:2] == ["built"] and _row(out, "kc_add_a")[3] == "controller"
    assert _row(out, "kc_add_b")[1:2] == ["built"]
    assert "no cached entry for this kernel" in out
    assert "4 xdist worker(s)" in out

    # Every worker ran tests that called the module, and no worker built anything.
    uses = (kcp.path / "uses.log").read_text().split("\n")
    workers = {line.split()[0] for line in uses if line}
    assert workers == {"gw0", "gw1", "gw2", "gw3"}
    data = json.loads(report.read_text())
    assert {k["name"]: k["status"] for k in data["kernels"]} == {"kc_add_a": "built", "kc_add_b": "built"}
    assert sorted(data["stats"]["workers"]) == ["gw0", "gw1", "gw2", "gw3"]
    for wid, s in data["stats"]["workers"].items():
        assert s["builds"] == 0 and s["misses"] == 0 and s["hits"] >= 1, (wid, s)
    assert data["stats"]["total"]["builds"] == 2
    assert {k["name"]: k["uses"].get("test") for k in data["kernels"]} == {"kc_add_a": 8, "kc_add_b": 8}
    assert {k["name"]: k["uses"].get("hit") for k in data["kernels"]} == {"kc_add_a": 8, "kc_add_b": 8}
    assert data["summary"] == {"passed": 16}
    t = next(t for t in data["tests"] if t["nodeid"].endswith("test_add[0]"))
    assert t["outcome"] == "passed" and t["kernels"] == ["kc_add_a"] and re.fullmatch(r"gw\d", t["worker"])

    # Warm rerun: zero compiles, the summary says "hit" for both.
    (kcp.path / "uses.log").unlink()
    warm = kcp.run("-p", "xdist", "-n", "4", "-p", "kernelcache")
    assert warm.ret == 0, warm.stdout.str() + warm.stderr.str()
    warm.assert_outcomes(passed=16)
    assert kcp.compiles("add_a.cc") == 1 and kcp.compiles("add_b.cc") == 1  # unchanged
    out = warm.stdout.str()
    assert _row(out, "kc_add_a")[1] == "hit"
    assert _row(out, "kc_add_b")[1] == "hit"
    assert "builds 0" in out


def test_autoload_disabled_xdist_needs_both_plugins_named(kcp, monkeypatch):
    """PYTEST_DISABLE_PLUGIN_AUTOLOAD=1: `-p xdist -p kernelcache -n 2` still warms once."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    kcp.ini()
    kcp.pytester.makepyfile(test_kernels=TESTS)
    r = kcp.run("-p", "xdist", "-p", "kernelcache", "-n", "2")
    assert r.ret == 0, r.stdout.str() + r.stderr.str()
    r.assert_outcomes(passed=16)
    assert kcp.compiles("add_a.cc") == 1 and kcp.compiles("add_b.cc") == 1
    r.stdout.fnmatch_lines(["*kc_add_a*built*controller*", "*2 xdist worker(s)*"])
