"""Acceptance 4: an unusable lock path never spins; waits are logged and bounded."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import kernelcache as kc
from kernelcache.build import lock
from tests.support import HANG_S, project_spec, spec_code


def _lock_file(kc_env, project):
    from kernelcache import kinds
    from kernelcache.key import level1

    s = kc.Settings.from_env()
    l1 = level1.level1(kinds.make_plan(project_spec(project), s), s)
    return lock.lock_path_for(l1.key, s)


def test_lock_path_is_a_directory_builds_privately(kc_env, project):
    lf = _lock_file(kc_env, project)
    lf.mkdir(parents=True)  # EISDIR
    assert kc.load(project_spec(project)).add(1, 2) == 3
    assert kc.stats()["lock_waits"] == 0 and kc.stats()["builds"] == 1  # built at once, privately


def test_lock_dir_is_a_file_builds_privately(kc_env, project, monkeypatch):
    bad = kc_env.tmp / "not_a_dir"
    bad.write_text("x")
    monkeypatch.setenv("KERNELCACHE_LOCK_DIR", str(bad / "locks"))  # ENOTDIR
    assert kc.load(project_spec(project)).add(1, 2) == 3


def test_lock_dir_permission_denied_builds_privately(kc_env, project, monkeypatch):
    # /sys refuses file creation even to root (EACCES), a real permission error.
    monkeypatch.setenv("KERNELCACHE_LOCK_DIR", "/sys/kernelcache-locks")
    assert kc.load(project_spec(project)).add(4, 4) == 8
    assert kc.stats()["lock_waits"] == 0 and kc.stats()["builds"] == 1


def test_waiter_logs_holder_and_deadline_ends_wait(kc_env, project):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from kernelcache.build.lock import single_flight
        from pathlib import Path
        import kernelcache as kc
        from kernelcache import kinds
        from kernelcache.key import level1
        from tests.support import project_spec
        s = kc.Settings.from_env()
        l1 = level1.level1(kinds.make_plan(project_spec(Path({str(project)!r})), s), s)
        with single_flight(l1.key, "adder", s):
            print("held", flush=True)
            time.sleep(60)
    """)], env=kc_env.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert holder.stdout.readline().strip() == "held"
        log = kc_env.tmp / "events.jsonl"
        proc = kc_env.run_py(spec_code(project) + textwrap.dedent("""
            try:
                kc.load(spec)
            except kc.LockTimeout as e:
                print("TIMEOUT", e.holder)
        """), check=False, KERNELCACHE_LOCK_TIMEOUT="2", KERNELCACHE_LOG=str(log))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("TIMEOUT"), proc.stdout + proc.stderr
        assert f"pid {holder.pid}" in proc.stdout
        events = [json.loads(l) for l in log.read_text().splitlines()]
        waits = [e for e in events if e["event"] == "lock_wait_start"]
        assert waits and f"pid {holder.pid}" in waits[0]["holder"]
        assert kc_env.compiles() == 0
    finally:
        holder.kill()
        holder.communicate(timeout=HANG_S)  # closes the pipes too
        holder.wait()
    # the holder died: the kernel released its flock, the next load builds at once
    assert kc.load(project_spec(project)).add(1, 1) == 2
