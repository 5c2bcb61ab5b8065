"""Acceptance 3: a builder SIGKILLed mid-compile or mid-link leaves no lock or partial entry."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.support import spec_code


def _wait_for(kc_env, kind: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if kc_env.compiles(kind) >= 1:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {kind} step started: {kc_env.count_log.read_text() if kc_env.count_log.exists() else ''}")


@pytest.mark.parametrize("phase,env", [("compile", {"KC_SLOW_COMPILE": "30"}), ("link", {"KC_SLOW_LINK": "30"})])
def test_sigkill_mid_build_leaves_nothing_and_next_load_succeeds(kc_env, project, phase, env):
    code = spec_code(project) + "kc.load(spec)"
    proc = subprocess.Popen([sys.executable, "-c", code], env=kc_env.env(**env), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    _wait_for(kc_env, phase)
    os.killpg(proc.pid, signal.SIGKILL)  # the builder, ninja and the compiler all die
    proc.wait(timeout=30)
    assert kc_env.entries() == []  # nothing published
    out = kc_env.run_py(spec_code(project) + textwrap.dedent("""
        print(kc.load(spec).add(2, 3), kc.stats()['lock_waits'])
    """), timeout=120).stdout.split()
    assert out == ["5", "0"]  # no wait on a dead builder's lock
    assert len(kc_env.entries()) == 1
    # the dead builder's private dir is swept by the next warm()
    kc_env.run_py(spec_code(project) + "kc.warm([spec])")
    assert list((kc_env.cache / "v1" / "tmp").iterdir()) == []
