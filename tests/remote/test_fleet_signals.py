"""Signals and the fleet lease, with real processes on a real store (issue 42).

- Ctrl-C (a real SIGINT) to a parallel ``kc.warm`` whose kernel waits on another host's lease:
  the worker thread's wait ends at once (the wait's deadline is an hour; the test's timeout only
  stops a hung process) and nothing is built or uploaded;
- SIGTERM to a process building under its lease: the lease object is gone from the store, and
  the process still dies of SIGTERM.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from .hosts import Host, make_project

WARM = """
import sys
from pathlib import Path
import kernelcache as kc
spec = kc.KernelSpec(name="fleet_k", sources=["add.cc"], root=Path(sys.argv[1]), include_dirs=["include"],
                     functions={"add": "Callable[[int, int], int]"})
if sys.argv[2] == "warm":
    print("RESULTS", [r.as_dict() for r in kc.warm([spec], jobs=2)], flush=True)
else:
    print("RESULT", kc.load_with_result(spec)[1].as_dict(), flush=True)
"""


def _rw(remote, **extra: str) -> dict:
    return remote.subprocess_env(**{"KERNELCACHE_REMOTE": remote.url, "KERNELCACHE_REMOTE_MODE": "readwrite",
                                    **extra})


def _start(host: Host, project, how: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WARM, str(project), how], env=host.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def _leases(remote) -> list[str]:
    return [o.key for o in remote.open("read").store.list("leases/")]


def _until(cond, what: str, proc: subprocess.Popen, limit: float = 120) -> None:
    """Poll ``cond`` (bounded); fail with the process's output if it ended or never got there."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and not cond():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the process ended before {what}: {proc.returncode}\n{out}\n{err}")
        time.sleep(0.05)
    assert cond(), what


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    if proc.stdout is not None and not proc.stdout.closed:
        proc.communicate(timeout=30)


def test_ctrl_c_stops_a_parallel_warm_waiting_on_a_lease(fleet_remote, tmp_path):
    project = make_project(tmp_path / "proj")
    holder = Host("holder", tmp_path / "holder", _rw(fleet_remote, KC_SLOW_COMPILE="600"))
    waiter = Host("waiter", tmp_path / "waiter", _rw(fleet_remote, KERNELCACHE_REMOTE_WAIT="3600"))
    h = _start(holder, project, "load")
    w = None
    try:
        _until(lambda: _leases(fleet_remote) and holder.compiles() >= 1, "the holder builds under its lease", h)
        w = _start(waiter, project, "warm")
        _until(lambda: waiter.events("remote_lease_wait"), "the warm's worker waits on the lease", w)
        w.send_signal(signal.SIGINT)
        out, err = w.communicate(timeout=60)  # only stops a hung process: the wait's deadline is an hour
        assert w.returncode != 0 and "KeyboardInterrupt" in err, (w.returncode, out, err)
        assert "RESULTS" not in out
        done = waiter.events("remote_lease_wait_done")
        assert len(done) == 1 and done[0].get("interrupted") is True, done
        assert waiter.compiles() == 0 and waiter.events("build_start") == [] and waiter.events("remote_upload") == []
        assert h.poll() is None  # the holder still builds, still holding its lease
    finally:
        if w is not None and w.poll() is None:
            w.kill()
            w.communicate(timeout=30)
        _stop(h)


@pytest.mark.parametrize("how", ["load", "warm"])
def test_sigterm_mid_build_releases_the_lease(fleet_remote, tmp_path, how):
    project = make_project(tmp_path / "proj")
    builder = Host("builder", tmp_path / "builder", _rw(fleet_remote, KC_SLOW_COMPILE="600"))
    p = _start(builder, project, how)
    try:
        _until(lambda: _leases(fleet_remote) and builder.compiles() >= 1, "the build runs under the lease", p)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)  # only stops a hung process
        assert p.returncode == -signal.SIGTERM, (p.returncode, out, err)  # still dies of SIGTERM
        assert _leases(fleet_remote) == [], "the lease outlived its SIGTERMed holder"
        assert builder.events("remote_upload") == [] and builder.events("build_done") == []
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate(timeout=30)
