"""Issue 42 (the warm path): runs of one project that differ only in how they are observed, or in
an import path entry that resolves nothing relevant, share the recall memo; a recalled hit is
logged like a full one; an import path that resolves a relevant module elsewhere is not recalled.

Real processes (``python -c`` and a real pytest run), the counting compiler wrapper; a recall is
counted from the ``KERNELCACHE_LOG`` file (a hit event with ``recalled: true``) and from the
process itself (a recalled call never imports ``kernelcache.lookup.loader``).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import tvm_ffi

from tests.support import HANG_S, spec_code

PROBE = spec_code  # the spec of the test project, recreated in the subprocess
LOAD = """
mod = kc.load(spec)
print(json.dumps(dict(value=mod.add(1, 2), recalled="kernelcache.lookup.loader" not in sys.modules)))
"""
PYTEST_FILE = """
import sys
from pathlib import Path
import kernelcache as kc
from tests.support import project_spec


def test_load():
    assert kc.load(project_spec(Path({base!r}))).add(1, 2) == 3
"""


def _probe(kc_env, project: Path, **env: str) -> dict:
    before = kc_env.compiles()
    out = kc_env.run_py(PROBE(project) + LOAD, cwd=kc_env.tmp, **env)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["compiles"] = kc_env.compiles() - before
    return got


def _hits(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "hit"]


def test_another_log_target_recalls_and_the_recalled_hit_is_logged(kc_env, project, tmp_path):
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    built = _probe(kc_env, project, KERNELCACHE_LOG=str(first))
    assert (built["recalled"], built["compiles"]) == (False, 1)
    again = _probe(kc_env, project, KERNELCACHE_LOG=str(second))
    assert (again["value"], again["recalled"], again["compiles"]) == (3, True, 0), again
    [hit] = _hits(second)  # the recalled hit reached the file, as a full hit does
    assert hit["recalled"] is True and hit["name"] == "adder" and hit["entry_dir"].startswith(str(kc_env.cache))
    quiet = _probe(kc_env, project, KERNELCACHE_LOG="0")
    assert (quiet["recalled"], quiet["compiles"]) == (True, 0)


def test_an_unrelated_import_path_entry_recalls(kc_env, project, tmp_path):
    assert _probe(kc_env, project)["compiles"] == 1
    extra = tmp_path / "unrelated"
    (extra / "somepkg").mkdir(parents=True)
    (extra / "somepkg" / "__init__.py").write_text("")
    got = _probe(kc_env, project, PYTHONPATH=f"{extra}{os.pathsep}{kc_env.env()['PYTHONPATH']}")
    assert (got["value"], got["recalled"], got["compiles"]) == (3, True, 0), got


def test_a_pytest_run_shares_the_memo_of_a_plain_run(kc_env, project, tmp_path):
    """The plugin exports its settings for test subprocesses (KERNELCACHE_LOCK_TIMEOUT=1800.0,
    KERNELCACHE_NO_BUILD=0, ...) and puts the tests' directory first on sys.path: the same answer."""
    assert _probe(kc_env, project)["compiles"] == 1
    tests = tmp_path / "suite"
    tests.mkdir()
    (tests / "test_uses_adder.py").write_text(PYTEST_FILE.format(base=str(project)))
    log = tmp_path / "pytest.jsonl"
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "kernelcache", "-p", "no:cacheprovider", "-q",
                          str(tests)], cwd=kc_env.tmp, env=kc_env.env(KERNELCACHE_LOG=str(log)),
                         capture_output=True, text=True, timeout=HANG_S, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert [h.get("recalled") for h in _hits(log)] == [True], _hits(log)
    assert kc_env.compiles() == 1
    again = _probe(kc_env, project)  # and the plain run's memo is still there
    assert (again["recalled"], again["compiles"]) == (True, 0)


def test_a_second_copy_of_tvm_ffi_first_on_the_path_is_not_recalled(kc_env, project, tmp_path):
    """What resolves decides: the module would be loaded by another tvm-ffi, so the full path
    answers (and records that answer for that path)."""
    assert _probe(kc_env, project)["compiles"] == 1
    assert _probe(kc_env, project)["recalled"]
    shadow = tmp_path / "shadow"
    shutil.copytree(Path(tvm_ffi.__file__).parent, shadow / "tvm_ffi", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    path = f"{shadow}{os.pathsep}{kc_env.env()['PYTHONPATH']}"
    moved = _probe(kc_env, project, PYTHONPATH=path)
    assert moved["value"] == 3 and not moved["recalled"], moved
    assert _probe(kc_env, project, PYTHONPATH=path)["recalled"]  # that path's own answer, recorded
