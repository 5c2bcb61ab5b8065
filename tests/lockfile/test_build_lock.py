"""``kernelcache build --lock PATH --out ROOT`` on its own: a CPU runner with an empty cache builds
the locked kernel from its lock block; a kernel whose inputs moved since the lock is reported
and not built; an unreadable lock builds nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import HANG_S, KcEnv, spec_code


def _kc(env: KcEnv, *argv: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelcache", *argv], capture_output=True, text=True,
                          env=env.env(**extra), stdin=subprocess.DEVNULL, timeout=HANG_S, cwd=env.tmp)


def _record(kc_env: KcEnv, project: Path) -> Path:
    lock = project.parent / "kernels.lock"
    kc_env.run_py(spec_code(project) + "assert kc.load(spec).add(2, 3) == 5\n", KERNELCACHE_LOCK_RECORD=str(lock))
    return lock


def test_a_fresh_runner_builds_the_locked_kernel(kc_env: KcEnv, project: Path) -> None:
    lock = _record(kc_env, project)
    before = kc_env.compiles()
    r = _kc(kc_env, "build", "--lock", str(lock), "--arch", "9.0", "--out", str(kc_env.tmp / "root"),
            KERNELCACHE_DIR=str(kc_env.tmp / "runner-cache"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split()[:3] == ["adder", "built", "cpu"]  # a CPU kernel: once, whatever --arch says
    assert kc_env.compiles() == before + 1
    (mf,) = (kc_env.tmp / "root").glob("v1/entries/adder/*/*/manifest.json")
    locked = json.loads(lock.read_text())["kernels"]["adder"]["archs"]["host"]
    assert json.loads(mf.read_text())["key1"] == locked["key"]  # the locked key, built again


def test_a_kernel_that_drifted_from_the_lock_is_not_built(kc_env: KcEnv, project: Path) -> None:
    lock = _record(kc_env, project)
    header = project / "include" / "kc_add.h"
    st = header.stat()
    header.write_text("#define KC_OFFSET 9\n")
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))  # only the bytes say it changed
    before = kc_env.compiles()
    r = _kc(kc_env, "build", "--lock", str(lock), "--out", str(kc_env.tmp / "root"))
    assert r.returncode == 1
    assert "adder" in r.stdout and "failed" in r.stdout and "proj/include/kc_add.h changed" in r.stdout, r.stdout
    assert kc_env.compiles() == before and not (kc_env.tmp / "root" / "v1" / "entries" / "adder").exists()


def test_an_unreadable_lock_builds_nothing(kc_env: KcEnv, tmp_path: Path) -> None:
    bad = tmp_path / "kernels.lock"
    bad.write_text("{not json")
    r = _kc(kc_env, "build", "--lock", str(bad), "--out", str(tmp_path / "root"))
    assert r.returncode == 1 and str(bad) in r.stderr and "Traceback" not in r.stderr
    r = _kc(kc_env, "build", "--lock", str(bad), "ngram_corpus", "--out", str(tmp_path / "root"))
    assert r.returncode == 2 and "exactly the locked set" in r.stderr
    assert not (tmp_path / "root").exists() and kc_env.compiles() == 0
