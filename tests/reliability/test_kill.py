"""Acceptance 3: a builder SIGKILLed mid-compile or mid-link leaves no lock or partial entry."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.support import HANG_S, spec_code


# the step is held until a file that never appears: the kill always lands inside it
@pytest.mark.parametrize("phase,hold", [("compile", "KC_HOLD_COMPILE"), ("link", "KC_HOLD_LINK")])
def test_sigkill_mid_build_leaves_nothing_and_next_load_succeeds(kc_env, project, phase, hold):
    code = spec_code(project) + "kc.load(spec)"
    proc = subprocess.Popen([sys.executable, "-c", code], env=kc_env.env(**{hold: str(kc_env.tmp / "never")}),
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    kc_env.wait_for(phase)
    os.killpg(proc.pid, signal.SIGKILL)  # the builder, ninja and the compiler all die
    proc.wait(timeout=HANG_S)
    assert kc_env.entries() == []  # nothing published
    out = kc_env.run_py(spec_code(project) + textwrap.dedent("""
        print(kc.load(spec).add(2, 3), kc.stats()['lock_waits'])
    """)).stdout.split()
    assert out == ["5", "0"]  # no wait on a dead builder's lock
    assert len(kc_env.entries()) == 1
    # the dead builder's private dir is swept by the next warm()
    kc_env.run_py(spec_code(project) + "kc.warm([spec])")
    assert list((kc_env.cache / "v1" / "tmp").iterdir()) == []


def test_sigint_mid_compile_is_logged_as_interrupted_not_an_empty_error(kc_env, project):
    """Issue 46: an interrupted build was logged ``build_failed`` with ``error: ""``."""
    log = kc_env.tmp / "events.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", spec_code(project) + "kc.load(spec)"],
                            env=kc_env.env(KC_HOLD_COMPILE=str(kc_env.tmp / "never"), KERNELCACHE_LOG=str(log)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    kc_env.wait_for("compile")
    proc.send_signal(signal.SIGINT)  # Ctrl-C to the Python process alone
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    import json

    (failed,) = [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "build_failed"]
    assert failed["interrupted"] is True and failed["error"].startswith("interrupted (KeyboardInterrupt"), failed
    assert kc_env.entries() == []
