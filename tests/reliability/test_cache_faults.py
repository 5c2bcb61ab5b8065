"""Faults of the cache's own filesystem, provoked for real: a full disk (a small tmpfs), names and
paths the layout cannot hold, the cache removed by a real ``kernelcache clean -y`` while real
builds run in other processes."""
from __future__ import annotations

import errno
import subprocess
import sys
import textwrap

import pytest
from kernelcache.base.errors import CacheWriteError, SpecError

import kernelcache as kc
from tests.mounts import fill, small_tmpfs
from tests.support import HANG_S, make_project, project_spec, spec_code


def test_disk_full_names_the_kernel_and_the_path(kc_env, project):
    with small_tmpfs(kc_env.cache, "256k"):
        fill(kc_env.cache)  # nothing left for the build's own files
        with pytest.raises(CacheWriteError) as ei:
            kc.load(project_spec(project))
    e = ei.value
    assert isinstance(e, OSError) and e.errno == errno.ENOSPC  # still an OSError to `except OSError`
    msg = str(e)
    assert "'adder'" in msg and "No space left on device" in msg and "disk is full" in msg
    assert e.path.startswith(str(kc_env.cache / "v1" / "tmp")) and e.path in msg
    assert kc_env.compiles() == 0  # refused before a compiler ran
    assert kc.stats()["build_failures"] == 1


def test_a_name_too_long_for_a_file_is_refused_before_compiling(kc_env, project):
    with pytest.raises(SpecError, match=r"255 bytes \(a kernel name at most 252\)"):
        project_spec(project, name="k" * 253)  # its binary would be k...k.so: 256 bytes
    assert kc_env.compiles() == 0
    longest = "k" * 252  # the longest that fits builds and loads
    assert kc.load(project_spec(project, name=longest)).add(1, 2) == 3
    assert [p.name for p in kc_env.entries(longest)[0].iterdir() if p.suffix == ".so"] == [longest + ".so"]


@pytest.mark.parametrize("char", ["\n", "|"])
def test_a_cache_dir_a_build_file_cannot_hold_is_refused_up_front(kc_env, project, char):
    cache = kc_env.tmp / f"ca{char}che"
    r = kc_env.run_py(spec_code(project) + "kc.load(spec)", check=False, KERNELCACHE_DIR=str(cache))
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: cache dir (KERNELCACHE_DIR)") and "ninja" in last, r.stderr
    assert "BuildError" not in r.stderr and kc_env.compiles() == 0 and not cache.exists()


def test_a_source_path_with_a_newline_is_refused_naming_it(kc_env, tmp_path):
    proj = make_project(tmp_path / "pro\nject")
    with pytest.raises(SpecError, match="kernel 'adder': cannot build .*add.cc'.*a newline"):
        kc.load(project_spec(proj))
    assert kc_env.compiles() == 0


def test_clean_while_others_build_retries_each_build_once(kc_env, tmp_path):
    """Real builds in N processes, each held in its compile step; a real ``kernelcache clean -y``
    removes the cache under them; released, each finds its build directory gone, says so in one
    line, builds once more in the fresh cache and succeeds."""
    n = 4
    gate = tmp_path / "compile-may-go"
    procs = []
    for i in range(n):
        proj = make_project(tmp_path / f"proj{i}", offset=i, fn=f"add{i}")
        code = spec_code(proj, name=f"k{i}", fn=f"add{i}") + f"print(kc.load(spec).add{i}(1, 2))"
        procs.append(subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)],
                                      env=kc_env.env(KC_HOLD_COMPILE=str(gate), KERNELCACHE_LOG=""),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      stdin=subprocess.DEVNULL))
    try:
        kc_env.wait_for("compile", n)  # every build is inside its compile step
        clean = subprocess.run([sys.executable, "-m", "kernelcache", "clean", "-y"], env=kc_env.env(),
                               capture_output=True, text=True, timeout=HANG_S, stdin=subprocess.DEVNULL)
        assert clean.returncode == 0 and "removed" in clean.stdout, clean.stderr
    finally:
        gate.touch()
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=HANG_S)
        assert p.returncode == 0, err
        assert out.strip() == str(3 + i)
        assert err.count("the cache was removed while building") == 1, err
        assert "cannot open output file" not in err and "FAILED" not in err
    assert kc_env.compiles() == 2 * n  # each built exactly twice: once removed, once kept
    assert sorted(p.parent.parent.name for p in kc_env.entries()) == [f"k{i}" for i in range(n)]
    assert list((kc_env.cache / "v1" / "tmp").iterdir()) == []
