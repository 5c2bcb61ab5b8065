"""8 processes cold-loading the same inline kernel through the drop-in: exactly one compile.

Real processes released together from a barrier file; the compile is slowed down (counting
wrapper's KC_SLOW_COMPILE) so every process arrives while the first one is still compiling.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from .conftest import tvm_env

N = 8
CODE = """
import os, sys, time
import tvm_ffi  # the slow import happens before the barrier
from kernelcache import tvm_ffi as dropin
go = sys.argv[1]
open(go + ".ready." + str(os.getpid()), "w").close()
while not os.path.exists(go):
    time.sleep(0.01)
mod = dropin.load_inline("flight", cpp_sources="int64_t sq(int64_t a) { return a * a; }", functions=["sq"])
print(mod.sq(12))
"""


def test_eight_cold_processes_compile_once(dropin_env, tmp_path: Path) -> None:
    go = tmp_path / "go"
    env = tvm_env(dropin_env, KC_SLOW_COMPILE="2")
    procs = [subprocess.Popen([sys.executable, "-c", CODE, str(go)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(N)]
    deadline = time.monotonic() + 240
    while len(list(tmp_path.glob("go.ready.*"))) < N and time.monotonic() < deadline:
        if any(p.poll() not in (None, 0) for p in procs):
            break
        time.sleep(0.05)
    go.touch()
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.split()[-1] == "144"
    assert dropin_env.compiles() == 1
    assert dropin_env.compiles("link") == 1
    assert len(dropin_env.entries("flight")) == 1
