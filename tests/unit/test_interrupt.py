"""interrupt.py: the SIGTERM handler a library may install (main thread only, chained to an
application's handler, never over an ignored SIGTERM) and the flag that ends worker waits.
Real signals to this process; the default action (dying of SIGTERM) is covered with real
processes in tests/remote/test_fleet_signals.py."""
from __future__ import annotations

import os
import signal
import threading

import pytest
from kernelcache.base import interrupt


@pytest.fixture
def sigterm_restored():
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)
    interrupt.clear()


def test_an_application_handler_is_chained_after_the_cleanups(sigterm_restored):
    seen: list[str] = []
    app = lambda signum, frame: seen.append("application")  # noqa: E731
    signal.signal(signal.SIGTERM, app)
    cleanup = lambda: seen.append("cleanup")  # noqa: E731
    interrupt.add_cleanup(cleanup)
    try:
        with interrupt.sigterm_cleanup():
            assert signal.getsignal(signal.SIGTERM) is not app
            os.kill(os.getpid(), signal.SIGTERM)
            assert seen == ["cleanup", "application"]  # the application decides: no exception here
            assert not interrupt.stopping()
        assert signal.getsignal(signal.SIGTERM) is app  # put back as it was
    finally:
        interrupt._cleanups.remove(cleanup)


def test_an_ignored_sigterm_and_other_threads_are_left_alone(sigterm_restored):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with interrupt.sigterm_cleanup():
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    got: list = []

    def in_thread() -> None:
        with interrupt.sigterm_cleanup():
            got.append(signal.getsignal(signal.SIGTERM))

    t = threading.Thread(target=in_thread)
    t.start()
    t.join(10)
    assert got == [signal.SIG_DFL]


def test_the_default_action_unwinds_as_terminated_when_caught_inside(sigterm_restored):
    """Inside the stretch, SIGTERM with the default action raises Terminated in the main thread
    (so every finally runs) and sets the flag that stops worker threads' waits."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with interrupt.sigterm_cleanup():
        with pytest.raises(interrupt.Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
        assert interrupt.stopping()
        with pytest.raises(interrupt.Interrupted):
            interrupt.sleep(3600)  # ends at once: the test's own timeout would stop a hang
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
