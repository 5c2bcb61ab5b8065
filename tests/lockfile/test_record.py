"""Issue 39 (part A): ``KERNELCACHE_LOCK_RECORD=PATH`` records every kernel a real process loads.

The app runs in a fresh process (a user tvm-ffi kernel and the shipped n-gram corpus); the lock
must name both with what rebuilds them, their inputs by content, and per arch the keys and the
binary's sha256. Re-running the unchanged app (every load a hit, recall included) must leave the
identical bytes; two processes recording at once must leave one valid lock with both kernels.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap

from kernelcache import lockfile
from tests.support import HANG_S, make_project, spec_code

from .lockhelp import app_code, last_json, run_app


def test_records_user_kernel_and_shipped_ngram_byte_identical_on_rerecord(kc_env, project):
    lock = kc_env.tmp / "kernels.lock"
    first = run_app(kc_env, project, extra={"KERNELCACHE_LOCK_RECORD": str(lock), "NGRAM": "1"})
    assert last_json(first.stdout)["builds"] == 2
    got = lockfile.read(lock)
    assert sorted(got.kernels) == ["adder", "ngram_corpus"]

    adder = got.kernels["adder"]
    assert adder.root == "proj" and adder.kind == "tvm_ffi"
    assert adder.rebuild["route"] == "spec" and adder.rebuild["spec"]["sources"] == ["add.cc"]
    header = (project / "include" / "kc_add.h").read_bytes()
    assert adder.inputs["add.cc"] == "sha256:" + hashlib.sha256((project / "add.cc").read_bytes()).hexdigest()
    assert adder.inputs["include/kc_add.h"].startswith("xxh3:")
    assert list(adder.archs) == ["host"]
    arch = adder.archs["host"]
    entry = kc_env.entries("adder")[0]
    assert arch.binary_sha256 == hashlib.sha256((entry / "adder.so").read_bytes()).hexdigest()
    manifest = json.loads((entry / "manifest.json").read_text())
    assert arch.key == manifest["key1"] and arch.source_key == manifest["skey"]
    assert arch.toolchain["tvm_ffi"] and "cxx" in arch.toolchain
    assert adder.schema == {"add": "Callable[[int, int], int]"}

    ngram = got.kernels["ngram_corpus"]
    assert ngram.rebuild["route"] == "shipped"
    assert ngram.rebuild["ref"] == "kernelcache.kernels.ngram_corpus.spec:spec"
    assert ngram.root == "${KERNELCACHE}/csrc"  # no path of this machine
    assert any(k.endswith(".h") and v.startswith("xxh3:") for k, v in ngram.inputs.items())
    assert header  # the project header is an input, the n-gram's headers are too

    before = lock.read_bytes()
    mtime = lock.stat().st_mtime_ns
    kc_env.reset_counts()
    again = run_app(kc_env, project, extra={"KERNELCACHE_LOCK_RECORD": str(lock), "NGRAM": "1"})
    assert last_json(again.stdout)["builds"] == 0 and kc_env.compiles() == 0  # hits, recorded all the same
    assert lock.read_bytes() == before
    assert lock.stat().st_mtime_ns == mtime  # identical bytes: the file is not even rewritten
    # a third run that recalls (the lock not armed) records nothing, and the next recording run records again
    run_app(kc_env, project, extra={"NGRAM": "1"})
    lock.unlink()
    run_app(kc_env, project, extra={"KERNELCACHE_LOCK_RECORD": str(lock), "NGRAM": "1"})
    assert lock.read_bytes() == before


def test_two_processes_recording_at_once_leave_one_lock_with_both(kc_env, tmp_path):
    lock = tmp_path / "kernels.lock"
    one, two = make_project(tmp_path / "one", offset=1), make_project(tmp_path / "two", offset=2)
    env = kc_env.env(KERNELCACHE_LOCK_RECORD=str(lock), KC_COMPILE_BARRIER="2")  # both compile at once
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(app_code(base, off, name=name))], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
             for base, off, name in ((one, 1, "adder_one"), (two, 2, "adder_two"))]
    for p in procs:
        out, err = p.communicate(timeout=HANG_S)
        assert p.returncode == 0, err
    got = lockfile.read(lock)
    assert sorted(got.kernels) == ["adder_one", "adder_two"]
    assert got.kernels["adder_one"].root == "one" and got.kernels["adder_two"].root == "two"
    assert lock.read_text() == got.dumps()


def test_recording_keeps_other_arch_records_and_refuses_a_damaged_lock(kc_env, project):
    lock = kc_env.tmp / "kernels.lock"
    lock.write_text("{not json")
    bad = run_app(kc_env, project, check=False, extra={"KERNELCACHE_LOCK_RECORD": str(lock)})
    assert bad.returncode != 0 and "not a kernel lock file" in bad.stderr
    lock.unlink()
    run_app(kc_env, project, extra={"KERNELCACHE_LOCK_RECORD": str(lock)})
    data = json.loads(lock.read_text())
    data["kernels"]["adder"]["archs"]["9.0"] = dict(data["kernels"]["adder"]["archs"]["host"])  # another job's
    lock.write_text(json.dumps(data))
    code = spec_code(project) + "kc.load(spec)\n"
    kc_env.run_py(code, KERNELCACHE_LOCK_RECORD=str(lock))
    assert sorted(lockfile.read(lock).kernels["adder"].archs) == ["9.0", "host"]
