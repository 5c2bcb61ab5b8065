"""Issue 39 (part A): locked serving (``KERNELCACHE_LOCK=PATH``) and ``preload`` / ``warm --lock``.

A kernel the lock lacks, and one whose header was edited with its mtime put back, are refused
at the load with one ``LockViolation`` naming the kernel and the input, and nothing compiles:
counted by the compiler wrapper and by the ``build_start`` events, also on a "node" whose PATH
has no compiler and whose cache is read-only. Warn mode logs the same line, builds, and counts
one compile after ready.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.support import compilerless_path, make_project, spec_code

from .lockhelp import edit_keep_mtime, events_of, kc_cli, last_json, run_app

REFUSED = """
try:
    kc.load(spec)
except kc.LockViolation as e:
    print("REFUSED", e.spec_name, "|", "; ".join(e.drift))
print(json.dumps(kc.stats()))
"""


@pytest.fixture
def locked(kc_env, project) -> Path:
    lock = kc_env.tmp / "kernels.lock"
    run_app(kc_env, project, extra={"KERNELCACHE_LOCK_RECORD": str(lock)})
    kc_env.reset_counts()
    return lock


def _read_only(tree: Path) -> None:
    for d, dirs, files in os.walk(tree):
        for n in files + dirs:
            p = Path(d) / n
            if not p.is_symlink():
                p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    tree.chmod(tree.stat().st_mode & ~stat.S_IWUSR)


def test_a_locked_kernel_is_served_and_one_the_lock_lacks_is_refused_without_compiling(kc_env, locked, tmp_path):
    log = tmp_path / "events.jsonl"
    served = run_app(kc_env, tmp_path / "proj", extra={"KERNELCACHE_LOCK": str(locked), "KERNELCACHE_LOG": str(log)})
    assert last_json(served.stdout)["hits"] == 1
    other = make_project(tmp_path / "other", offset=4)
    out = kc_env.run_py(spec_code(other, name="unlocked") + REFUSED, KERNELCACHE_LOCK=str(locked),
                        KERNELCACHE_LOG=str(log))
    assert f"REFUSED unlocked | not in the kernel lock {locked}" in out.stdout
    assert last_json(out.stdout)["builds"] == 0
    assert kc_env.compiles() == 0 and kc_env.compiles("link") == 0
    assert events_of(log, "build_start") == []
    assert [e["name"] for e in events_of(log, "lock_refused")] == ["unlocked"]


def test_a_drifted_header_is_refused_on_a_node_without_compiler_and_a_read_only_cache(kc_env, locked, tmp_path):
    proj = tmp_path / "proj"
    edit_keep_mtime(proj / "include" / "kc_add.h", "#define KC_OFFSET 9\n")
    _read_only(kc_env.cache)
    try:
        node = {"PATH": compilerless_path(tmp_path / "nodebin"), "CXX": "", "KERNELCACHE_LOCK": str(locked)}
        out = kc_env.run_py(spec_code(proj) + REFUSED, **node)
        assert "REFUSED adder | proj/include/kc_add.h changed" in out.stdout, out.stdout + out.stderr
        assert last_json(out.stdout)["builds"] == 0 and kc_env.compiles() == 0
        warm = kc_cli(kc_env, "warm", "--lock", str(locked), **node)
        assert warm.returncode == 1
        assert "adder: proj/include/kc_add.h changed" in warm.stderr and "nothing was compiled" in warm.stderr
        assert kc_env.compiles() == 0
    finally:
        for d, dirs, _files in os.walk(kc_env.cache):
            os.chmod(d, 0o755)


def test_preload_validates_the_set_and_warn_mode_builds_counting_a_compile_after_ready(kc_env, locked, tmp_path):
    proj = tmp_path / "proj"
    code = spec_code(proj) + f"""
from kernelcache import lockfile
results = lockfile.preload({str(locked)!r})
assert [r.name for r in results] == ["adder"] and results[0].error is None
assert kc.stats()["ready"] and kc.stats()["compiles_after_ready"] == 0
from tests.lockfile.lockhelp import edit_keep_mtime
edit_keep_mtime(Path({str(proj / "include" / "kc_add.h")!r}), "#define KC_OFFSET 5\\n")
assert kc.load(spec).add(2, 3) == 10
print(json.dumps(kc.stats()))
"""
    out = kc_env.run_py(code, KERNELCACHE_LOCK=str(locked), KERNELCACHE_LOCK_MODE="warn", KERNELCACHE_LOG="")
    stats = last_json(out.stdout)
    assert stats["builds"] == 1 and stats["compiles_after_ready"] == 1
    assert stats["kernels"]["adder"]["compiles_after_ready"] == 1
    assert kc_env.compiles() == 1
    assert "adder: proj/include/kc_add.h changed (kernel lock" in out.stderr  # the warn line, then the build
    assert out.stderr.index("kc_add.h changed (kernel lock") < out.stderr.index("building adder")


def test_a_locked_load_is_recalled_only_while_the_lock_it_was_checked_against_holds(kc_env, locked, tmp_path):
    proj = tmp_path / "proj"
    code = spec_code(proj) + """
try:
    print("SUM", kc.load(spec).add(2, 3))
except kc.LockViolation as e:
    print("REFUSED", e.spec_name, "|", "; ".join(e.drift))
import sys
print("LOADER", "kernelcache.lookup.loader" in sys.modules)
"""
    env = {"KERNELCACHE_LOCK": str(locked)}
    first = kc_env.run_py(code, **env)
    assert "SUM 5" in first.stdout and "LOADER True" in first.stdout  # checked against the lock, remembered
    again = kc_env.run_py(code, **env)
    assert "SUM 5" in again.stdout and "LOADER False" in again.stdout  # recalled: no loader, no check needed
    data = json.loads(locked.read_text())
    data["kernels"]["adder"]["archs"]["host"]["source_key"] = "0" * 64  # the lock moves under the memo
    locked.write_text(json.dumps(data, indent=1))
    refused = kc_env.run_py(code, **env)
    assert "LOADER True" in refused.stdout and "REFUSED adder | " in refused.stdout, refused.stdout
    assert kc_env.compiles() == 0
