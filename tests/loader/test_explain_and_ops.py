"""Acceptance 9 and 10, and the operational CLI: explain, prune, ls, verify, clean, doctor."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import kernelcache as kc
from tests.support import HANG_S, REPO, project_spec, replace_file, spec_code


def test_explain_names_what_changed(kc_env, project):
    kc.load(project_spec(project))
    assert kc.explain(project_spec(project))["status"] == "hit"
    (project / "include" / "kc_add.h").write_text("#define KC_OFFSET 9\n")
    info = kc.explain(project_spec(project))
    assert info["status"] == "miss" and "${ROOT}/include/kc_add.h changed" in info["reason"]
    info = kc.explain(project_spec(project, cflags=["-DFOO=1"]))
    assert info["status"] == "miss" and "flags changed" in info["reason"] and "-DFOO=1" in info["reason"]
    (project / "add.cc").write_text((project / "add.cc").read_text() + "// x\n")
    assert "source add.cc changed" in kc.explain(project_spec(project))["reason"]


def _cli(kc_env, *args, check=True):
    p = subprocess.run([sys.executable, "-m", "kernelcache", *args], env=kc_env.env(), capture_output=True,
                       text=True, timeout=HANG_S, stdin=subprocess.DEVNULL)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_prune_evicts_without_breaking_a_process_that_uses_the_entry(kc_env, project):
    user = subprocess.Popen([sys.executable, "-c", spec_code(project) + textwrap.dedent("""
        import sys
        m = kc.load(spec)
        print("loaded", m.add(1, 1), flush=True)
        sys.stdin.readline()
        print("after", m.add(2, 2), flush=True)
    """)], env=kc_env.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert user.stdout.readline().split() == ["loaded", "2"]
    assert len(kc_env.entries()) == 1
    out = _cli(kc_env, "prune", "--max-size", "0").stdout
    assert "1 entry evicted" in out
    assert kc_env.entries() == []
    user.stdin.write("go\n")
    user.stdin.flush()
    assert user.stdout.readline().split() == ["after", "4"]
    user.communicate(timeout=HANG_S)  # closes the pipes too
    assert user.returncode == 0


def test_prune_by_age_keeps_recent_entries(kc_env, tmp_path):
    from tests.support import make_project

    old = make_project(tmp_path / "old", offset=1)
    new = make_project(tmp_path / "new", offset=2)
    kc.load(project_spec(old, name="old_k"))
    kc.load(project_spec(new, name="new_k"))
    old_entry = kc_env.entries("old_k")[0]
    past = time.time() - 40 * 86400
    os.utime(old_entry / "used", (past, past))
    assert "1 entry evicted" in _cli(kc_env, "prune", "--max-age", "30d").stdout
    assert kc_env.entries("old_k") == [] and len(kc_env.entries("new_k")) == 1


def test_ls_verify_clean(kc_env, project):
    kc.load(project_spec(project))
    ls = _cli(kc_env, "ls").stdout
    assert "adder" in ls and "cache" in ls
    assert "0 bad entries" in _cli(kc_env, "verify").stdout
    so = kc_env.entries()[0] / "adder.so"
    replace_file(so, so.read_bytes()[:100])
    p = _cli(kc_env, "verify", "--fix", check=False)
    assert p.returncode == 1 and "BAD" in p.stdout
    assert kc_env.entries() == []  # quarantined
    _cli(kc_env, "clean", "--yes")
    assert not (kc_env.cache / "v1").exists()


def test_doctor_reports_toolchain(kc_env):
    out = _cli(kc_env, "doctor", check=False).stdout
    assert "apache-tvm-ffi" in out and "c++" in out and "ninja" in out


def test_import_is_light():
    code = ("import sys, kernelcache, kernelcache.kernels; "
            "print(any(m in sys.modules for m in ('tvm_ffi', 'torch', 'numpy', 'pytest')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout.strip()
    assert out == "False"


def test_long_builds_report_progress(kc_env, project, monkeypatch, capfd):
    from kernelcache.build import ninja as ninja_run

    monkeypatch.setattr(ninja_run, "HEARTBEAT_S", 0.2)
    monkeypatch.setenv("KC_SLOW_COMPILE", "1")
    monkeypatch.delenv("KERNELCACHE_LOG")  # default: human progress lines on stderr
    kc.load(project_spec(project))
    err = capfd.readouterr().err
    assert "[kernelcache] building adder" in err
    assert "[kernelcache] still building adder" in err
    assert "[kernelcache] built adder in" in err


def test_warm_cli_reports_per_kernel_status(kc_env):
    p = _cli(kc_env, "warm", "--json", "no_such_kernel", check=False)
    assert p.returncode == 2 and "unknown kernel" in p.stderr
