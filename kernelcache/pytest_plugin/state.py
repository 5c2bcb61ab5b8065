"""The state of one active pytest process (controller, worker or plain run).

Its own module so that the modules the session hooks call (report, xdist, impact) can name it
without importing the hooks that import them (no import cycle, type-level included).
"""
from __future__ import annotations

import time
from typing import Any

import pytest

from kernelcache.base.settings import Settings

from .kernels import Kernels
from .options import Resolved

STATE = pytest.StashKey["SessionState"]()


class SessionState:
    """Everything one process of an active session knows (controller, worker or plain run)."""

    def __init__(self, config: pytest.Config, opts: Resolved, settings: Settings, hw: dict, arch_text: str):
        self.config = config
        self.is_worker = hasattr(config, "workerinput")
        self.worker_id: str = config.workerinput.get("workerid", "") if self.is_worker else ""  # type: ignore[attr-defined]
        self.opts = opts
        self.settings = settings
        self.hw = hw
        self.arch_text = arch_text
        self.kernels = Kernels(config, settings, opts["specs"][0], opts["warm"][0], opts["jobs"][0], self.worker_id)
        self.declared: list[str] = []  # kernels the controller warms
        self.worker_out: dict[str, dict] = {}  # worker id -> its workeroutput[PLUGIN_NAME]
        self.tests: dict[str, dict] = {}
        self.policy_failures: list[str] = []
        self.saved_env: dict[str, str | None] = {}
        self.patched: tuple[str, ...] = ()  # drop-ins armed by --kc-patch (kernelcache.patch)
        self.impact: dict | None = None  # test impact: selection and map written (pytest_plugin.impact)
        self.t0 = time.time()

    def opt(self, dest: str) -> Any:
        return self.opts[dest][0]
