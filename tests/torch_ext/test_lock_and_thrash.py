"""Acceptance 2-4: a builder SIGKILLed mid-compile (torch's lock file vs kernelcache's flock),
two checkouts alternating on one cache (thrash), 8 cold processes (one compile)."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .helpers import PARAM_V1, PARAM_V2, SEED_NAME, load_cmd, load_in_fresh_process, result, write_seed

HANG_DEADLINE_S = 25.0  # how long a plain-torch waiter is given before the test kills it


def _start(env: dict, side: str, src: Path) -> subprocess.Popen:
    return subprocess.Popen(load_cmd(side, SEED_NAME, [src]), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, stdin=subprocess.DEVNULL)


def _kill_mid_compile(kc, proc: subprocess.Popen) -> None:
    """SIGKILL the builder's whole process group once its compiler is running."""
    deadline = time.monotonic() + 300
    try:
        while kc.compiles() == 0:
            assert proc.poll() is None, f"builder exited early: {proc.communicate()}"
            if time.monotonic() > deadline:  # only stops a hung test
                raise AssertionError("the builder never started compiling")
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def test_plain_torch_waits_forever_on_the_lock_a_killed_builder_left(torch_env, capsys):
    src = write_seed(torch_env.tmp / "pkg", PARAM_V1)
    _kill_mid_compile(torch_env, _start(torch_env.env(KC_SLOW_COMPILE="600"), "torch", src))
    lock = torch_env.tmp / "torch_extensions" / SEED_NAME / "lock"
    assert lock.exists(), "torch's FileBaton lock should be left behind by the killed builder"
    waiter = _start(torch_env.env(), "torch", src)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            waiter.communicate(timeout=HANG_DEADLINE_S)
    finally:
        os.killpg(waiter.pid, signal.SIGKILL)
        waiter.communicate()
    with capsys.disabled():
        print(f"\n[plain torch] still waiting on {lock.name} after {HANG_DEADLINE_S:.0f}s; killed")
    assert lock.exists() and torch_env.compiles() == 1  # only the killed compile ever started


def test_dropin_finishes_with_one_build_after_a_builder_was_killed(torch_env):
    src = write_seed(torch_env.tmp / "pkg", PARAM_V1)
    _kill_mid_compile(torch_env, _start(torch_env.env(KC_SLOW_COMPILE="600"), "dropin", src))
    torch_env.reset_counts()
    out = load_in_fresh_process(torch_env.env(), "dropin", SEED_NAME, [src], timeout=600)
    assert out["version"] == 1
    assert torch_env.compiles() == 1 and len(torch_env.entries(SEED_NAME)) == 1


def _alternate(kc, side: str, a: Path, b: Path) -> list[int]:
    return [load_in_fresh_process(kc.env(), side, SEED_NAME, [src])["version"] for src in (a, b, a, b)]


def test_two_checkouts_alternating_dropin_builds_each_once(torch_env, capsys):
    a = write_seed(torch_env.tmp / "checkout-a", PARAM_V1)
    b = write_seed(torch_env.tmp / "checkout-b", PARAM_V2)
    assert _alternate(torch_env, "dropin", a, b) == [1, 2, 1, 2]
    dropin_builds = torch_env.compiles()
    torch_env.reset_counts()
    assert _alternate(torch_env, "torch", a, b) == [1, 2, 1, 2]
    torch_builds = torch_env.compiles()
    with capsys.disabled():
        print(f"\n[4 processes alternating two checkouts] builds: drop-in {dropin_builds}, plain torch {torch_builds}")
    assert dropin_builds == 2
    assert torch_builds == 4  # torch's extensions dir is named by the extension: every switch rebuilds


def test_eight_cold_processes_one_compile(torch_env):
    src = write_seed(torch_env.tmp / "pkg", PARAM_V2)
    procs = [_start(torch_env.env(), "dropin", src) for _ in range(8)]
    outs = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=900)
            assert p.returncode == 0, stderr
            outs.append(result(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
    assert [o["min_match_window_size"] for o in outs] == [4] * 8
    assert len({o["file"] for o in outs}) == 1
    assert torch_env.compiles() == 1 and torch_env.compiles("link") == 1
