"""The FlashInfer route against FlashInfer's own JIT: what rebuilds, what does not, what races.

Each test runs real processes on the session's state (conftest: one build by FlashInfer, one
through the route) and counts link steps; none asserts on time.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from .conftest import HANG_S, FiEnv


def test_a_fresh_process_compiles_nothing_and_every_path_names_the_loaded_entry(fi: FiEnv) -> None:
    before = fi.links()
    out = fi.probe(fi.tmp / "ws-a")
    assert fi.links() == before
    assert out["fn"] and out["compiled"]
    # the cubin loader CDLLs get_library_path(): it must be the file actually loaded
    assert out["library"] == out["jit"] and out["library"].startswith(str(fi.cache))


def test_fresh_moved_or_touched_workspace_and_cuda_home_spelled_twice_rebuild_nothing(fi: FiEnv) -> None:
    before = fi.links()
    fresh = fi.tmp / "ws-fresh"
    out = fi.probe(fresh)  # an empty FlashInfer workspace, the same kernelcache cache
    moved = fi.tmp / "ws-moved"
    shutil.move(str(fresh), str(moved))
    fi.probe(moved)
    now = time.time() + 5
    os.utime(out["source"].replace(str(fresh), str(moved)), (now, now))  # touch the generated source
    st = fi.probe_h.stat()
    os.utime(fi.probe_h, (now, now))  # and a header every compile reads
    try:
        fi.probe(moved)
        real = os.path.realpath("/usr/local/cuda")
        other = fi.probe(moved, CUDA_HOME=real)  # /usr/local/cuda-13.0 instead of /usr/local/cuda
    finally:
        os.utime(fi.probe_h, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert fi.links() == before
    assert other["library"] == out["library"]


def test_one_header_byte_changed_with_mtime_restored_rebuilds_once_for_eight_cold_processes(fi: FiEnv) -> None:
    old = fi.probe_h.read_bytes()
    st = fi.probe_h.stat()
    try:
        fi.probe_h.write_bytes(old.replace(b"1", b"2"))
        os.utime(fi.probe_h, ns=(st.st_atime_ns, st.st_mtime_ns))
        before = fi.links()
        # FlashInfer's own cache is keyed by mtimes: it serves the module built from the old header
        fi.probe(fi.tmp / "ws-own", route=False)
        assert fi.links() == before
        # eight processes, one fresh shared workspace (each renders the generated source unlocked)
        shared = fi.tmp / "ws-eight"
        procs = [fi.start(shared) for _ in range(8)]
        outs = [p.communicate(timeout=HANG_S) for p in procs]
        bad = [(p.returncode, err[-2000:]) for p, (_, err) in zip(procs, outs) if p.returncode != 0]
        assert not bad, bad
        libraries = {json.loads(o.splitlines()[-1])["library"] for o, _ in outs}
        assert fi.links() == before + 1 and len(libraries) == 1  # one compile, one entry for all eight
        fi.probe(shared)
        assert fi.links() == before + 1
    finally:
        fi.probe_h.write_bytes(old)
        os.utime(fi.probe_h, ns=(st.st_atime_ns, st.st_mtime_ns))
    before = fi.links()
    fi.probe(fi.tmp / "ws-a")  # the old bytes again: the first entry, no build
    assert fi.links() == before


NO_BUILD = """
from flashinfer.jit.core import MissingJITCacheError
from kernelcache.base.errors import CacheMissError
from flashinfer.jit import activation
try:
    activation.gen_act_and_mul_module("silu").build_and_load()
except MissingJITCacheError as e:
    # the type as users see it in a traceback, and the switch the message blames
    print("missing", isinstance(e, CacheMissError), f"{type(e).__module__}.{type(e).__qualname__}",
          "FLASHINFER_DISABLE_JIT is set" in str(e), "KERNELCACHE_NO_BUILD" in str(e))
"""


def test_a_builder_killed_mid_link_leaves_nothing_loadable(fi: FiEnv) -> None:
    variant = "-DKC_KILLED_VARIANT=1"  # another key: a cold build
    entries = fi.entries()
    hold = fi.tmp / "never-released"
    before = fi.links()
    p = fi.start(fi.tmp / "ws-kill", extra_cuda=variant, KC_HOLD_LINK=str(hold))
    deadline = time.monotonic() + HANG_S
    while fi.links() == before:
        assert p.poll() is None, p.communicate()
        if time.monotonic() > deadline:  # only stops a hung test
            raise AssertionError("no link step started")
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=60)  # reaps it and closes its pipes
    assert fi.entries() == entries  # nothing published
    # no build allowed: the killed build must not be found, and the error is FlashInfer's own type
    out = fi.run(fi.tmp / "ws-kill", extra_cuda=variant, check=False, FLASHINFER_DISABLE_JIT="1", code=NO_BUILD)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "missing True kernelcache.flashinfer.FlashInferCacheMiss True False"
    assert fi.links() == before + 1  # only the killed link ever started


def test_disable_jit_means_no_build_not_no_cache(fi: FiEnv) -> None:
    before = fi.links()
    out = fi.probe(fi.tmp / "ws-nojit", FLASHINFER_DISABLE_JIT="1")
    assert out["fn"] and fi.links() == before
    own = fi.run(fi.tmp / "ws-own", route=False, check=False, FLASHINFER_DISABLE_JIT="1")
    assert own.returncode != 0 and "MissingJITCacheError" in own.stderr  # FlashInfer's own: its .so exists


UNTESTED = """
import sys
import flashinfer.version
flashinfer.version.__version__ = "0.0.1-untested"
import kernelcache.flashinfer as kf
from flashinfer.jit.core import JitSpecNvcc
installed = kf.install()
print(installed, "build_and_load" in vars(JitSpecNvcc))
"""

ROUND_TRIP = """
import kernelcache.flashinfer as kf
from flashinfer.jit.core import JitSpec, JitSpecNvcc
own = {n: JitSpecNvcc.__dict__.get(n) for n in ("get_library_path", "jit_library_path", "is_compiled")}
assert kf.install() and kf.is_installed() and JitSpecNvcc.build_and_load is not JitSpec.build_and_load
kf.install()  # again: the originals stay FlashInfer's
kf.uninstall()
assert "build_and_load" not in vars(JitSpecNvcc) and JitSpecNvcc.build_and_load is JitSpec.build_and_load
assert {n: JitSpecNvcc.__dict__.get(n) for n in own} == own
print("ok")
"""


def test_an_untested_version_is_left_to_flashinfer_with_one_line_and_uninstall_restores(fi: FiEnv) -> None:
    out = fi.run(fi.tmp / "ws-gate", route=False, code=UNTESTED)
    assert out.stdout.split() == ["False", "False"]
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("kernelcache.flashinfer")]
    assert len(lines) == 1 and "0.0.1-untested" in lines[0], out.stderr
    assert "the route is off" in lines[0] and "*:" not in lines[0], lines[0]  # no placeholder module name
    assert fi.run(fi.tmp / "ws-gate", route=False, code=ROUND_TRIP).stdout.strip() == "ok"


def test_the_runner_routes_a_program(fi: FiEnv, tmp_path) -> None:
    app = tmp_path / "app.py"
    from .conftest import PROBE

    app.write_text(PROBE)
    env = fi.env(fi.tmp / "ws-runner", route=False)
    before = fi.links()
    p = subprocess.run([sys.executable, "-m", "kernelcache.flashinfer", str(app)], env=env, capture_output=True,
                       text=True, timeout=HANG_S)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.splitlines()[-1])["library"].startswith(str(fi.cache)) and fi.links() == before
