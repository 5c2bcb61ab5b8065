"""ninja in the background: one run for objects and link, the objects' end seen as it happens.

Why one run: a second ninja for the link costs a process start and a manifest parse on the
critical path of every cold build. The build records what the compilers read while the linker
runs (``build._record``); it learns that the objects are done from ninja's own status lines,
which report the number of finished edges: once that count covers every object edge (the link
is the only edge left), the depfiles are complete. Older ninja releases print a status line
when an edge starts rather than when it ends; the count is then the finished edges before it,
so the link's line is the one that reaches the count: the same moment, read the same way.

Process control: ninja runs each command in a process group of its own, so a signal to the
Python process alone (``kill -INT <pid>``, a job runner's SIGTERM) reaches neither ninja nor
``cc1plus``: they would run on as orphans. On any exception in the body (KeyboardInterrupt
included) ninja gets SIGTERM, which it forwards to each running command's group, then is waited
for. SIGTERM itself kills Python without unwinding, so while a build runs in the main thread
with the default SIGTERM action, a handler turns it into an exception; after the cleanup the
process dies of SIGTERM as it would have.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from ..base import interrupt
from ..base.errors import BuildError

HEARTBEAT_S = 30.0
STOP_POLL_S = 0.25  # how often a waiting build looks at the interrupt flag
STOP_GRACE_S = 10.0  # how long ninja may take to stop its commands after SIGTERM
# ninja's status line, spelled so that no compiler message is mistaken for it; the log shows
# ninja's usual "[finished/total] " instead
_STATUS = "kernelcache-ninja %f %t: "
_STATUS_RE = re.compile(r"^kernelcache-ninja (\d+) (\d+): ")


class NinjaRun:
    """A running ninja. ``objects()`` waits until ``n_objects`` edges have finished (or ninja
    ended); ``finish()`` waits for the end. Either raises BuildError once ninja failed.
    ``progress(seconds)`` is called every HEARTBEAT_S of waiting: long CUDA builds take minutes."""

    def __init__(self, proc: subprocess.Popen, name: str, argv: list[str], n_objects: int,
                 progress: Callable[[float], None]) -> None:
        self._proc, self._name, self._argv, self._n = proc, name, argv, n_objects
        self._progress = progress
        self._lines: list[str] = []
        self._objects_done = threading.Event()
        self._t0 = time.monotonic()
        self._reader = threading.Thread(target=self._read, name="kernelcache-ninja-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for line in self._proc.stdout:  # type: ignore[union-attr]
                m = _STATUS_RE.match(line)
                if m is not None:
                    line = f"[{m.group(1)}/{m.group(2)}] {line[m.end():]}"
                    if int(m.group(1)) >= self._n:
                        self._objects_done.set()
                self._lines.append(line)
        except (OSError, ValueError):  # the pipe closed under us: ninja was stopped
            pass
        finally:
            self._objects_done.set()

    def _wait(self, done: Callable[[float], bool]) -> None:
        """Wait for ``done``; a heartbeat every HEARTBEAT_S; ``interrupt.Interrupted`` once the
        process is being stopped (a worker thread of a parallel warm sees no KeyboardInterrupt:
        the exception stops ninja like one)."""
        beat = time.monotonic() + HEARTBEAT_S
        while not done(STOP_POLL_S):
            interrupt.check()
            if time.monotonic() >= beat:
                self._progress(time.monotonic() - self._t0)
                beat = time.monotonic() + HEARTBEAT_S

    def objects(self) -> None:
        self._wait(self._objects_done.wait)
        if self._proc.poll() is not None or not self._reader.is_alive():
            self.finish()  # ninja ended before (or as) the objects were done: its verdict now

    def finish(self) -> None:
        self._wait(self._output_ended)
        rc = self._proc.wait()
        if rc != 0:
            out = self.output()
            raise BuildError(self._name, _failed_command(out) or shlex.join(self._argv), out, rc)

    def _output_ended(self, timeout: float) -> bool:
        self._reader.join(timeout)
        return not self._reader.is_alive()

    def output(self) -> str:
        return "".join(self._lines)


def _failed_command(output: str) -> str:
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("FAILED:") and i + 1 < len(lines):
            return lines[i + 1]
    return ""


@contextmanager
def ninja(argv: list[str], name: str, n_objects: int, progress: Callable[[float], None]) -> Iterator[NinjaRun]:
    """Run ``argv`` (ninja) in the background for the body; leaving the body by an exception
    stops ninja and every compiler it started. The run is finished when the body returns."""
    env = {**os.environ, "NINJA_STATUS": _STATUS}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, env=env)
    previous = _catch_sigterm()
    run = None
    try:
        run = NinjaRun(proc, name, argv, n_objects, progress)
        yield run
        run.finish()
    except BaseException as e:
        _stop(proc)
        if run is not None:
            run._output_ended(STOP_GRACE_S)  # the compilers are gone: the pipe ends
        if isinstance(e, _Terminated):
            _restore_sigterm(previous)
            previous = None
            os.kill(os.getpid(), signal.SIGTERM)  # the default action, now that nothing is left running
        raise
    finally:
        if previous is not None:
            _restore_sigterm(previous)
        if run is None or not run._reader.is_alive():
            proc.stdout.close()  # type: ignore[union-attr]


class _Terminated(BaseException):
    """SIGTERM arrived during a build (raised by the handler installed for the build's duration)."""


def _catch_sigterm() -> Any:
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return None  # the application handles SIGTERM: its handler decides

        def raise_terminated(signum: int, frame: Any) -> None:
            raise _Terminated()

        signal.signal(signal.SIGTERM, raise_terminated)
        return signal.SIG_DFL
    except ValueError:  # not the main interpreter
        return None


def _restore_sigterm(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to ninja (it stops its commands' process groups), SIGKILL if it does not exit."""
    if proc.poll() is not None:
        return
    groups = _child_groups(proc.pid)
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        for pgid in groups:  # ninja's commands, each the leader of its own group
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        proc.wait()


def _child_groups(pid: int) -> list[int]:
    """Process groups led by ``pid``'s children (ninja's running commands), from /proc."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    out = []
    for k in kids:
        try:
            if os.getpgid(int(k)) == int(k):
                out.append(int(k))
        except OSError:
            pass
    return out
