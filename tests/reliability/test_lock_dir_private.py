"""Issue 42, item 6: the default lock dir under the shared temp dir is used only when it is private.

Another local user (a real process running as uid 4242) creates the victim's default lock dir
``<tmp>/kernelcache-<uid>/locks`` first, in a real sticky world-writable temp dir. It plants a
symlink for a lock's holder file (the victim's build wrote through it: any file the victim can
write was overwritten), or holds the lock itself (the victim's builds waited for the lock
timeout). The victim is a real subprocess loading a real kernel with that temp dir as TMPDIR.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

import kernelcache as kc
from kernelcache import kinds
from kernelcache.build import lock
from kernelcache.key import level1
from tests.support import HANG_S, project_spec, spec_code

ATTACKER = 4242
SYSTEM_PYTHON = "/usr/bin/python3"  # the venv's interpreter lives under /root (0700): not runnable as 4242

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                                reason="needs root (a directory of another uid, a process of another uid)")


@pytest.fixture
def shared_tmp():
    """A temp dir like /tmp (sticky, world-writable), reachable by other users."""
    base = Path(tempfile.mkdtemp(prefix="kc-lockdir-", dir="/tmp"))
    base.chmod(0o755)
    tmp = base / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    yield tmp
    shutil.rmtree(base, ignore_errors=True)


def _as_attacker(code: str) -> subprocess.Popen:
    def drop() -> None:
        os.setgroups([])
        os.setgid(ATTACKER)
        os.setuid(ATTACKER)

    return subprocess.Popen([SYSTEM_PYTHON, "-c", textwrap.dedent(code)], preexec_fn=drop, cwd="/",
                            env={"PATH": "/usr/bin:/bin"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)


def _squat(shared_tmp: Path) -> str:
    """Attacker code creating the victim's default lock dir, open to everyone."""
    return f"""
        import os
        locks = os.path.join({str(shared_tmp)!r}, "kernelcache-{os.geteuid()}", "locks")
        os.makedirs(locks)
        for d in (os.path.dirname(locks), locks):
            os.chmod(d, 0o777)
    """


def _lock_name(project: Path) -> str:
    s = kc.Settings.from_env()
    return lock.lock_path_for(level1.level1(kinds.make_plan(project_spec(project), s), s).key, s).name


def _victim(kc_env, project: Path, shared_tmp: Path, **env: str) -> tuple[dict, list[dict], str]:
    """The victim's load: its result, its events, its stderr (``KERNELCACHE_LOG=""``: progress lines)."""
    log = kc_env.tmp / "victim-events.jsonl"
    env.setdefault("KERNELCACHE_LOG", str(log))
    code = spec_code(project) + textwrap.dedent("""
        try:
            m, r = kc.load_with_result(spec)
            out = {"status": r.status, "value": m.add(2, 3)}
        except kc.KernelCacheError as e:
            out = {"error": type(e).__name__, "message": str(e)}
        print("RESULT " + json.dumps(out))
    """)
    proc = kc_env.run_py(code, check=False, TMPDIR=str(shared_tmp), KERNELCACHE_LOCK_DIR="", **env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, proc.stderr[-3000:]
    events = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
    return json.loads(lines[0][len("RESULT "):]), events, proc.stderr


def test_planted_holder_symlink_is_never_written_through(kc_env, project, shared_tmp):
    precious = kc_env.tmp / "precious.txt"  # a file only the victim (root) may write
    precious.write_text("the victim's data\n")
    precious.chmod(0o600)
    name = _lock_name(project)
    attacker = _as_attacker(_squat(shared_tmp) + textwrap.indent(textwrap.dedent(f"""
        os.symlink({str(precious)!r}, os.path.join(locks, {name + '.holder'!r}))
    """), "        "))
    assert attacker.wait(HANG_S) == 0, attacker.stderr.read()
    attacker.stdout.close()
    attacker.stderr.close()
    locks = shared_tmp / f"kernelcache-{os.geteuid()}" / "locks"
    assert (locks / f"{name}.holder").is_symlink() and os.stat(locks).st_uid == ATTACKER

    out, events, _ = _victim(kc_env, project, shared_tmp)
    assert out.get("status") == "built" and out["value"] == 5, out
    assert precious.read_text() == "the victim's data\n"  # nothing written through the planted link
    [unusable] = [e for e in events if e["event"] == "lock_unusable"]
    assert f"owned by uid {ATTACKER}" in unusable["error"] and "KERNELCACHE_LOCK_DIR" in unusable["error"], unusable


def test_lock_held_by_another_user_does_not_block_builds(kc_env, project, shared_tmp):
    name = _lock_name(project)
    attacker = _as_attacker(_squat(shared_tmp) + textwrap.indent(textwrap.dedent(f"""
        import fcntl, json, time
        with open(os.path.join(locks, {name + '.holder'!r}), "w") as f:
            json.dump({{"pid": 1, "host": "elsewhere", "since": time.time()}}, f)
        fd = os.open(os.path.join(locks, {name!r}), os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep({HANG_S})
    """), "        "))
    try:
        assert attacker.stdout.readline().strip() == "held", attacker.stderr.read()
        # a short lock timeout: the code before the fix gives up waiting on the squatter's lock;
        # the default log target: what a user sees are the progress lines
        out, _, stderr = _victim(kc_env, project, shared_tmp, KERNELCACHE_LOCK_TIMEOUT="3", KERNELCACHE_LOG="")
        assert out.get("status") == "built" and out["value"] == 5, out
        assert "waiting" not in stderr and "elsewhere" not in stderr, stderr  # the fake holder is never shown
        assert f"building adder without the build lock: lock dir {shared_tmp}" in stderr, stderr
        assert f"owned by uid {ATTACKER}" in stderr, stderr
    finally:
        attacker.kill()
        attacker.communicate()


def test_default_lock_dir_is_created_private(kc_env, project, shared_tmp):
    out, events, _ = _victim(kc_env, project, shared_tmp)
    assert out.get("status") == "built", out
    per_user = shared_tmp / f"kernelcache-{os.geteuid()}"
    for d in (per_user, per_user / "locks"):
        st = os.lstat(d)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid(), d
        assert stat.S_IMODE(st.st_mode) == 0o700, (d, oct(st.st_mode))
    assert any(e["event"] == "lock_acquired" for e in events)  # the private dir is used
    assert [p.name for p in (per_user / "locks").iterdir() if p.name.endswith(".holder")]
