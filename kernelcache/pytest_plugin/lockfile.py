"""The kernel lock in a pytest session: ready when tests start, compiles after it reported.

``--kc-lock-record=PATH`` and ``--kc-lock=PATH`` are settings (``Settings.lock_record`` /
``.lock``): the session exports them to every test process and xdist worker, whose loads record
into (merged under a file lock) or are checked against the one lock. What this module adds is
the moment a test session is ready (its kernels warmed, the test loop starting, in the
controller and in each worker): a compile after it is what a locked service must never do, so
it is counted (``kc.stats()["compiles_after_ready"]``, the report's totals line, the step summary).
"""
from __future__ import annotations

import pytest

from .state import SessionState


class LockHooks:
    def __init__(self, state: SessionState) -> None:
        self.state = state

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        from kernelcache.base import events

        events.mark_ready()
