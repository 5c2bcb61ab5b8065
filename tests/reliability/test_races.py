"""Publish races without a shared lock (two "hosts") and the build-time race guard."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support import HANG_S, spec_code


def _spawn(kc_env, code: str, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=kc_env.env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def test_two_hosts_with_separate_lock_dirs_publish_one_entry(kc_env, project, tmp_path):
    """Like two nodes sharing a cache on NFS: no common flock, both build, the rename decides."""
    code = spec_code(project) + textwrap.dedent("""
        import kernelcache.lookup.loader as L
        m, r = L.load_with_result(spec)
        print(m.add(1, 2), r.entry_id, kc.stats()["publish_races_lost"])
    """)
    # each compile waits until both have started: the two "hosts" really build at the same time
    a = _spawn(kc_env, code, KC_COMPILE_BARRIER="2", KERNELCACHE_LOCK_DIR=str(tmp_path / "host_a_locks"))
    b = _spawn(kc_env, code, KC_COMPILE_BARRIER="2", KERNELCACHE_LOCK_DIR=str(tmp_path / "host_b_locks"))
    outs = []
    for p in (a, b):
        out, err = p.communicate(timeout=HANG_S)
        assert p.returncode == 0, err
        outs.append(out.split())
    assert kc_env.compiles() == 2  # no shared lock: both compiled
    assert [o[0] for o in outs] == ["3", "3"] and outs[0][1] == outs[1][1]
    assert sorted(o[2] for o in outs) == ["0", "1"]  # exactly one lost the rename race
    assert len(kc_env.entries()) == 1
    assert list((kc_env.cache / "v1" / "tmp").iterdir()) == []  # the loser cleaned up


def test_header_changed_during_compile_is_not_published(kc_env, project):
    hdr = project / "include" / "kc_add.h"
    gate = kc_env.tmp / "compile-may-go"
    p = _spawn(kc_env, spec_code(project) + "print(kc.load(spec).add(0, 0))", KC_HOLD_COMPILE=str(gate),
               KERNELCACHE_LOG="stderr")
    kc_env.wait_for("compile")
    hdr.write_text("#define KC_OFFSET 42\n")  # while the compile step waits (it reads the header after)
    gate.touch()
    out, err = p.communicate(timeout=HANG_S)
    assert p.returncode == 0, err
    assert out.strip() in ("0", "42")  # the process got a working module either way
    assert '"event": "race_guard"' in err
    assert kc_env.entries() == []  # but nothing was published under a possibly wrong key
    kc_env.reset_counts()
    assert kc_env.run_py(spec_code(project) + "print(kc.load(spec).add(0, 0))").stdout.strip() == "42"
    assert kc_env.compiles() == 1 and len(kc_env.entries()) == 1
