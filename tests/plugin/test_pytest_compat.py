"""Installed but not asked for, kernelcache leaves a pytest run as it was (issue 26).

A small project that has never heard of kernelcache runs ``pytest -W error`` in this
environment (where kernelcache is installed: its ``pytest11`` entry point and its
``kernelcache-patch.pth`` hook are active) and must pass with the same output as the same run
with ``-p no:kernelcache``: plugin not enabled, then with ``KERNELCACHE_PATCH`` set, then under
xdist. ``.ci/run`` runs this file against the newest pytest (the suite's environment) and
against the oldest supported one (``ci/constraints-oldest.txt``).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HANG_S = 600  # only stops a hung run

PROJECT = {
    "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-rA"\nmarkers = ["slow: a slow test"]\n'
                      'filterwarnings = ["error"]\n',
    "conftest.py": "import pytest\n\n@pytest.fixture\ndef three():\n    return 3\n",
    "src_pkg/__init__.py": "def add(a, b):\n    return a + b\n",
    "tests/test_math.py": (
        "import pytest\nimport warnings\nfrom src_pkg import add\n\n"
        "def test_add(three):\n    assert add(1, 2) == three\n\n"
        "@pytest.mark.parametrize('a,b,c', [(1, 1, 2), (2, 3, 5)])\n"
        "def test_param(a, b, c):\n    assert add(a, b) == c\n\n"
        "@pytest.mark.slow\ndef test_marked():\n    assert True\n\n"
        "@pytest.mark.skip(reason='not today')\ndef test_skipped():\n    pass\n\n"
        "@pytest.mark.xfail(reason='known', strict=True)\ndef test_xfail():\n    assert add(1, 1) == 3\n\n"
        "def test_rewritten_assert():\n"
        "    with pytest.raises(AssertionError, match='assert 2 == 3'):\n"
        "        assert add(1, 1) == 3\n\n"
        "def test_warns_caught():\n"
        "    with pytest.warns(UserWarning):\n        warnings.warn('fine', UserWarning)\n"
    ),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("unrelated")
    for rel, text in PROJECT.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing of kernelcache's or of this session's pytest."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KERNELCACHE_", "PYTEST_", "KC_")) and k not in ("PYTHONPATH",)}
    env.update(extra)
    return env


def _run(project: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-W", "error", "-p", "no:cacheprovider", *args],
                          cwd=project, env=_env(**extra), capture_output=True, text=True, timeout=HANG_S)


def _normal(out: str, *, unordered: bool = False) -> list[str]:
    """Output without what legitimately differs: durations, and kernelcache's own name in the
    header's plugin list (``-p no:kernelcache`` removes it there)."""
    lines = []
    for line in out.splitlines():
        line = re.sub(r" in \d+(\.\d+)?s( \([0-9:]+\))?", " in Ns", line)
        if line.startswith("plugins:"):
            line = re.sub(r"kernelcache-[^,\s]+,? ?", "", line).rstrip(", ")
        if re.match(r"^(created|initialized|\d+ workers? \[)", line):  # xdist start-up chatter
            line = re.sub(r"\d+(\.\d+)?s", "Ns", line)
        line = re.sub(r"\[gw\d+\]", "[gw]", line) if unordered else line  # which worker ran it
        if unordered and re.match(r"^[.sxXFE]+\s*(\[\s*\d+%\])?$", line):
            line = "".join(sorted(line.split()[0])) if line.strip() else line  # xdist: any order
        lines.append(line)
    return sorted(lines) if unordered else lines


def _installed() -> bool:
    from importlib import metadata

    try:
        eps = metadata.entry_points(group="pytest11")
    except TypeError:  # pragma: no cover - Python < 3.10 API
        return False
    return any(ep.name == "kernelcache" for ep in eps)


pytestmark = pytest.mark.skipif(not _installed(), reason="kernelcache is not installed in this environment "
                                "(its pytest11 entry point is what this file checks)")


def _same(project: Path, args: tuple[str, ...], extra: dict[str, str], unordered: bool = False) -> str:
    with_kc = _run(project, *args, **extra)
    without = _run(project, *args, "-p", "no:kernelcache", **extra)
    assert with_kc.returncode == 0, with_kc.stdout + with_kc.stderr
    assert without.returncode == 0, without.stdout + without.stderr
    assert "kernelcache" not in with_kc.stderr, with_kc.stderr
    assert with_kc.stderr == without.stderr
    assert _normal(with_kc.stdout, unordered=unordered) == _normal(without.stdout, unordered=unordered)
    return with_kc.stdout


def test_plugin_not_enabled_changes_nothing_under_warnings_as_errors(project):
    out = _same(project, ("-v",), {})
    assert "6 passed, 1 skipped, 1 xfailed" in out, out
    assert "warning" not in out.lower(), out


@pytest.mark.parametrize("patch", ["tvm_ffi", "torch", "all"])
def test_patch_variable_trips_no_assertion_rewriting_warning(project, patch):
    # the .pth hook imports kernelcache at interpreter start; pytest later marks the package for
    # rewriting and used to warn "Module already imported so cannot be rewritten: kernelcache"
    out = _same(project, ("-v",), {"KERNELCACHE_PATCH": patch})
    assert "cannot be rewritten" not in out and "6 passed" in out, out


@pytest.mark.parametrize("patch", ["", "all"])
def test_under_xdist_each_worker_is_quiet(project, patch):
    pytest.importorskip("xdist")
    extra = {"KERNELCACHE_PATCH": patch} if patch else {}
    out = _same(project, ("-n", "2", "-q"), extra, unordered=True)
    assert "6 passed, 1 skipped, 1 xfailed" in out and "warning" not in out.lower(), out


def test_a_set_ini_key_is_seen_without_deprecated_config_attributes(project, tmp_path):
    # the not-enabled hint for a kernelcache_* ini key reads it through getini(): it still warns
    # (a deliberate hint), and nothing else does (no PytestRemovedIn10Warning from config.inicfg)
    (tmp_path / "pytest.ini").write_text("[pytest]\nkernelcache_no_build = true\n")
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-W",
                        "error::pytest.PytestRemovedIn10Warning" if hasattr(pytest, "PytestRemovedIn10Warning")
                        else "error::DeprecationWarning", "-q"],
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=HANG_S)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "kernelcache_no_build is set, but the kernelcache plugin is not enabled" in r.stdout, r.stdout
    assert "inicfg" not in r.stdout + r.stderr
