"""One ninja run per build: what the compilers read is recorded while the linker runs
(kernelcache.build.ninja reads ninja's finished-edge count); the log keeps ninja's usual status.

Real builds through the counting compiler wrapper; the link is held at a gate, so the order of
events is observed, not timed.
"""
from __future__ import annotations

import threading
import time

from kernelcache.entry import deprecord

import kernelcache as kc
from tests.support import HANG_S, project_spec


def test_dependencies_are_recorded_while_the_link_is_held(kc_env, project, monkeypatch) -> None:
    gate = kc_env.tmp / "release-link"
    monkeypatch.setenv("KC_HOLD_LINK", str(gate))
    got: dict = {}

    def load() -> None:
        try:
            got["value"] = kc.load(project_spec(project)).add(1, 2)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            got["error"] = e

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        kc_env.wait_for("link")
        deadline = time.monotonic() + HANG_S
        while not deprecord._prepared and "error" not in got and time.monotonic() < deadline:
            time.sleep(0.01)
        # the record (its trusted packages found ahead) exists while the linker still waits
        assert deprecord._prepared and "error" not in got
        assert not gate.exists() and t.is_alive()
    finally:
        gate.touch()
        t.join(HANG_S)
    assert got == {"value": 3}
    assert (kc_env.compiles("compile"), kc_env.compiles("link")) == (1, 1)


def test_the_build_log_shows_every_step_with_ninja_status(kc_env, project) -> None:
    kc.load(project_spec(project))
    (entry,) = kc_env.entries("adder")
    lines = [ln for ln in (entry / "build.log").read_text().splitlines() if ln.startswith("[")]
    assert [ln.split("] ", 1)[1].split(" ")[0] for ln in lines][-1] == "link"
    assert sorted(ln.split("] ", 1)[0] for ln in lines) == ["[1/3", "[2/3", "[3/3"]
    assert "kernelcache-ninja" not in (entry / "build.log").read_text()
