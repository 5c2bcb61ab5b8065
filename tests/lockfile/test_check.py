"""Issue 39 (part A): ``kernelcache lock check PATH`` and ``lock update PATH``.

The lock is recorded by a real run of the app; then a header is edited with its mtime put back
(content, not mtimes, must decide) and a flag changes: ``lock check`` exits 1 naming each input
that moved, ``--json`` says the same, and ``lock update`` re-resolves the kernels without the app.
"""
from __future__ import annotations

import json

from kernelcache import lockfile

from .lockhelp import edit_keep_mtime, kc_cli, run_app


def test_check_names_a_header_edited_with_its_mtime_restored_then_update(kc_env, project):
    lock = kc_env.tmp / "kernels.lock"
    run_app(kc_env, project, extra={"KERNELCACHE_LOCK_RECORD": str(lock)})
    ok = kc_cli(kc_env, "lock", "check", str(lock))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.strip() == f"kernelcache: {lock}: 1 kernel(s) as locked"

    edit_keep_mtime(project / "include" / "kc_add.h", "#define KC_OFFSET 7\n")
    bad = kc_cli(kc_env, "lock", "check", str(lock))
    assert bad.returncode == 1
    assert bad.stdout.splitlines() == ["adder: proj/include/kc_add.h changed"]
    js = kc_cli(kc_env, "lock", "check", str(lock), "--json")
    assert js.returncode == 1
    report = json.loads(js.stdout)
    assert report["ok"] is False and report["kernels"][0]["drift"] == ["proj/include/kc_add.h changed"]

    before = lock.read_text()
    kc_env.reset_counts()
    up = kc_cli(kc_env, "lock", "update", str(lock))
    assert up.returncode == 0, up.stderr
    assert kc_env.compiles() == 1  # re-resolved: the kernel built from the edited header, no app run
    assert lock.read_text() != before
    assert kc_cli(kc_env, "lock", "check", str(lock)).returncode == 0
    assert lockfile.read(lock).kernels["adder"].inputs["include/kc_add.h"] != json.loads(before)["kernels"][
        "adder"]["inputs"]["include/kc_add.h"]


def test_check_names_a_removed_source_and_a_changed_flag(kc_env, project):
    lock = kc_env.tmp / "kernels.lock"
    run_app(kc_env, project, extra={"KERNELCACHE_LOCK_RECORD": str(lock)})
    data = json.loads(lock.read_text())
    data["kernels"]["adder"]["rebuild"]["spec"]["cflags"] = ["-DKC_EXTRA=1"]  # the repo's spec now has a flag
    lock.write_text(json.dumps(data))
    (project / "include" / "kc_add.h").unlink()
    bad = kc_cli(kc_env, "lock", "check", str(lock))
    assert bad.returncode == 1
    line, = bad.stdout.splitlines()
    assert line.startswith("adder: proj/include/kc_add.h removed; cflags: built with [], this spec has "
                           "['-DKC_EXTRA=1']"), line


def test_check_refuses_a_file_that_is_not_a_lock(kc_env):
    p = kc_env.tmp / "kernels.lock"
    p.write_text(json.dumps({"format": 99, "generator": "kernelcache", "kernels": {}}))
    out = kc_cli(kc_env, "lock", "check", str(p))
    assert out.returncode == 1 and "lock format 99" in out.stderr
    out = kc_cli(kc_env, "lock", "check", str(kc_env.tmp / "missing.lock"))
    assert out.returncode == 1 and "cannot read the kernel lock" in out.stderr
