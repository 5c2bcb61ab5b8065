"""SIGINT or SIGTERM to the Python process during a build leaves no compiler behind.

ninja runs each command in a process group of its own, so a signal sent to the Python process
alone (a job runner, ``kill -INT <pid>``) reaches neither ninja nor the compiler; before the fix
both ran on as orphans. Here the compiler really runs: ``cc1plus`` evaluates a constexpr loop
that takes far longer than the test, the signal is sent once it is seen in /proc, and every
process whose command line names this test's private directory must be gone afterwards. Whatever
survives is killed by pid at the end, so a failing run leaves nothing behind either.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..support import HANG_S

# cc1plus spends minutes on this (the loop limit is raised so it is not an error), far longer
# than the test waits: the compiler is running when the signal arrives.
SLOW = """constexpr unsigned long long spin(unsigned long long n) {
  unsigned long long s = 0;
  for (unsigned long long i = 0; i < n; ++i) s += i % 7;
  return s;
}
constexpr unsigned long long value = spin(1ULL << 40);
int main() { return static_cast<int>(value & 1); }
"""
FLAGS = ["-fconstexpr-loop-limit=2147483647", "-fconstexpr-ops-limit=4611686018427387904"]
BUILD = r"""
import faulthandler, signal, sys
faulthandler.register(signal.SIGUSR1)  # a hung run: the test asks for every thread's stack
from kernelcache import cpp_extension
cpp_extension.load("kc_interrupted", [sys.argv[1]], extra_cflags=sys.argv[2:], is_python_module=False,
                   is_standalone=True)
"""


def _procs_naming(marker: str) -> dict[int, str]:
    """pid -> command line of every process whose command line contains ``marker``."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            out[int(d.name)] = cmd
    return out


STOPPED_S = 120.0  # ninja stops its commands within seconds; this only ends a failing run sooner


def _wait_for(pred, what: str, limit: float = HANG_S) -> None:
    deadline = time.monotonic() + limit
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _hung_report(proc: subprocess.Popen, marker: str) -> str:
    """What a run that did not end left: the Python process's stacks and the processes still
    running (killed by pid here, so the pipes they may hold close and the output can be read)."""
    alive = proc.poll() is None
    if alive:
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(2)
    left = _procs_naming(marker)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.kill()
    _, err = proc.communicate(timeout=60)
    return f"the interrupted build did not end (python alive: {alive}); still running: {left}\n{err[-6000:]}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_python_mid_compile_leaves_no_ninja_or_compiler_running(torch_env, sig):
    work = torch_env.tmp / f"interrupt-{sig.name}"
    work.mkdir()
    src = work / "slow.cpp"
    src.write_text(SLOW)
    proc = subprocess.Popen([sys.executable, "-c", BUILD, str(src), *FLAGS], env=torch_env.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    marker = str(torch_env.tmp)  # the cache, the build dirs and the source all live under it
    try:
        _wait_for(lambda: any("cc1plus" in c for c in _procs_naming(str(src)).values()) or proc.poll() is not None,
                  "cc1plus to start")
        assert proc.poll() is None, f"the build ended early: {proc.communicate()}"
        running = _procs_naming(marker)
        assert any("ninja" in c for c in running.values()), running
        os.kill(proc.pid, sig)  # the Python process only, not its group
        try:
            _, err = proc.communicate(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(_hung_report(proc, marker)) from None
        assert proc.returncode != 0
        if sig == signal.SIGINT:
            assert "KeyboardInterrupt" in err
        else:
            assert proc.returncode == -signal.SIGTERM  # still dies of SIGTERM, after cleaning up
        _wait_for(lambda: not (set(_procs_naming(marker)) & set(running)), "the compiler processes to exit", STOPPED_S)
        assert _procs_naming(marker) == {}
        assert torch_env.entries("kc_interrupted") == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in _procs_naming(marker):  # a failing run: stop what it left, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
