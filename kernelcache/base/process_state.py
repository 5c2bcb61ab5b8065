"""One reset for every process-wide memo (loaded modules, tool identities, clients, counters).

Why a registry: memos live next to the code that fills them (admit, toolchain, fleet clients,
prebuilt entry points ...). Tests and long-lived REPLs need to forget all of them at once
without reaching into private globals, so each memo registers its own reset here when its
module is imported, and ``kernelcache.reset_process_state()`` calls them all.
"""
from __future__ import annotations

import threading
from typing import Callable

_resets: dict[str, Callable[[], None]] = {}
_lock = threading.Lock()


def register(name: str, reset: Callable[[], None]) -> None:
    """Register (or replace) the reset of one memo; ``name`` is ``module.memo`` for messages."""
    with _lock:
        _resets[name] = reset


def registered() -> list[str]:
    """Names of the registered memos (tests check that a new memo registered itself)."""
    with _lock:
        return sorted(_resets)


def reset_all() -> None:
    """Call every registered reset (in registration order)."""
    with _lock:
        resets = list(_resets.values())
    for reset in resets:
        reset()


def reset_process_state() -> None:
    """Forget every process-wide memo: loaded modules, verified checksums, tool identities,
    GPU detection, companion roots, counters, shipped kernels' modules (tests; a long-lived REPL).

    A memo whose module was never imported is empty, so only registered ones need a reset.
    """
    reset_all()
