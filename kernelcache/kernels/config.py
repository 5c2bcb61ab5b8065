"""The settings the shipped kernels load with: ``kernels.configure(settings)``, once per process.

Why a process-wide value: a shipped kernel is called through its Python API
(``NgramCorpus(...)``, ``tree_speculative_sampling_target_only(...)``), which has no room for a
``settings`` argument, yet it must load through the same cache, prebuilt roots and fleet as
``load(spec, settings=s)``. Nothing under ``kernels/`` reads the environment: without
``configure`` the default is ``settings.resolve(None)``, the loader's own default.
"""
from __future__ import annotations

import threading

from ..base import process_state
from ..base.settings import Settings, resolve

_lock = threading.Lock()
_configured: list[Settings] = []  # zero or one element


def configure(settings: Settings | None) -> None:
    """Load (and find headers for) the shipped kernels with ``settings``; None: the default.

    Call it before a kernel's first use: a kernel already loaded in this process keeps its
    module until ``kernelcache.reset_process_state()``.
    """
    if settings is not None and not isinstance(settings, Settings):
        raise TypeError(f"configure() takes a kernelcache.Settings or None, got {type(settings).__name__}")
    with _lock:
        _configured.clear()
        if settings is not None:
            _configured.append(settings)


def configured() -> Settings | None:
    """The settings given to :func:`configure`, or None."""
    with _lock:
        return _configured[0] if _configured else None


def resolved(settings: Settings | None = None) -> Settings:
    """``settings`` if given, else the configured ones, else the loader's default."""
    return resolve(settings if settings is not None else configured())


process_state.register("kernels.settings", lambda: configure(None))
