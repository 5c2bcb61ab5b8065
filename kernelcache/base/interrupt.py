"""Stopping this process's kernelcache work: every thread of a parallel warm, every held lease.

Why a flag: Python raises KeyboardInterrupt (and runs signal handlers) in the main thread only.
A worker thread of a parallel ``warm`` waiting on another host's fleet lease would wait out
``KERNELCACHE_REMOTE_WAIT`` (15 minutes by default), then build and upload for a process that is
being stopped. Waits that can be long (fleet lease waits, a running ninja) sleep on this flag
instead, and raise :class:`Interrupted` once it is set.

Why a SIGTERM handler: the default action kills Python without unwinding, so no ``finally``
releases the fleet lease and every other host waits its TTL for a process that is gone.
:func:`sigterm_cleanup` installs one for the stretch that holds a lease or runs a warm, and only
where a library may: in the main thread, over the default action or a Python handler (an ignored
SIGTERM or a C-level handler is left alone). The handler runs the registered cleanups (release
every lease this process holds), sets the flag, then chains: a previous Python handler is
called; the default action becomes :class:`Terminated`, raised in the main thread so that every
``finally`` runs (ninja and its compilers stopped), and once the outermost stretch is left the
process dies of SIGTERM, the status a job runner expects.
"""
from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from . import process_state

_stop = threading.Event()
_cleanups: list[Callable[[], None]] = []
_lock = threading.Lock()
_installed: list[Any] = []  # the previous SIGTERM disposition while ours is installed (one entry)
_depth = 0


class Interrupted(KeyboardInterrupt):
    """This thread stopped waiting or building: the process is being interrupted or terminated."""


class Terminated(BaseException):
    """SIGTERM arrived while kernelcache's handler was installed; the process dies of it once
    the stack has unwound (see :func:`sigterm_cleanup`)."""


def request_stop() -> None:
    """Make every interruptible wait of every thread raise :class:`Interrupted`."""
    _stop.set()


def clear() -> None:
    """The interrupt was handled (a parallel warm returned): later waits run normally."""
    _stop.clear()


process_state.register("interrupt.stop", clear)


def stopping() -> bool:
    return _stop.is_set()


def check() -> None:
    """Raise :class:`Interrupted` if the process is being stopped."""
    if _stop.is_set():
        raise Interrupted("kernelcache: interrupted")


def sleep(seconds: float) -> None:
    """``time.sleep`` that ends at once, raising :class:`Interrupted`, when the process stops."""
    if _stop.wait(max(0.0, seconds)):
        raise Interrupted("kernelcache: interrupted while waiting")


def add_cleanup(fn: Callable[[], None]) -> None:
    """Run ``fn`` when SIGTERM arrives under :func:`sigterm_cleanup` (release held leases)."""
    with _lock:
        if fn not in _cleanups:
            _cleanups.append(fn)


def run_cleanups() -> None:
    with _lock:
        fns = list(_cleanups)
    for fn in fns:
        try:
            fn()
        except Exception:  # noqa: BLE001 - best effort: a lease that stays expires on its own
            pass


def _on_sigterm(signum: int, frame: Any) -> None:
    run_cleanups()
    if not _installed:  # delivered just after the stretch ended: nothing left to unwind for
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    previous = _installed[0]
    if callable(previous):  # the application's handler decides what SIGTERM means
        previous(signum, frame)
        return
    request_stop()
    raise Terminated()


@contextmanager
def sigterm_cleanup() -> Iterator[None]:
    """SIGTERM runs the same cleanup as Ctrl-C while the body runs (see the module docstring).

    Nested uses and other threads are no-ops: the outermost main-thread stretch owns the handler."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _depth == 0:
        previous = signal.getsignal(signal.SIGTERM)
        installed = previous is not signal.SIG_IGN and previous is not None  # else not ours to change
        if installed:
            try:
                signal.signal(signal.SIGTERM, _on_sigterm)
            except ValueError:  # not the main interpreter
                installed = False
        if not installed:
            yield
            return
        _installed[:] = [previous]
    _depth += 1
    try:
        yield
    except Terminated:
        if _depth == 1:
            _restore()
            os.kill(os.getpid(), signal.SIGTERM)  # the default action, now that the stack has unwound
        raise
    finally:
        _depth -= 1
        if _depth == 0:
            _restore()


def _restore() -> None:
    if _installed:
        signal.signal(signal.SIGTERM, _installed.pop())
