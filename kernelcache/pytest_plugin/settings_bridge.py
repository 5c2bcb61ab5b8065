"""Resolved options -> one :class:`kernelcache.base.settings.Settings` for the session.

Why: the loader takes its settings as an argument (``load_with_result(spec, settings=s)``,
``warm(specs, settings=s)``), so the plugin steers it by value, never by editing
``os.environ`` around a load. Per-test variants (a marker's ``no_build``) are
``s.replace(...)``. The one place that writes the environment is :func:`export_env`: test code
that starts subprocesses (or calls ``kernelcache.load()`` without settings) must see the same
settings, so the session's resolved settings are exported once at configure time and the
previous values are restored at unconfigure.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest

from kernelcache.base.settings import Settings

from .options import BY_DEST, OPTIONS, Resolved


def build_settings(opts: Resolved, detected_archs: tuple[str, ...] = ()) -> tuple[Settings, bool]:
    """The session's Settings: the environment's, overridden by options given in ini or on the
    command line; without any target arch, the detected GPUs' archs (one probe for every worker
    and every test subprocess). Also: whether the arch is the detected one."""
    overrides: dict[str, Any] = {}
    for o in OPTIONS:
        value, source = opts[o.dest]
        if o.setting and source in ("ini", "cli"):
            overrides[o.setting] = Path(value) if o.kind == "path" else value
    # the remote's URL and mode are layered over the environment's; RemoteSettings owns the
    # default-mode rule (read with a URL and no mode, else off)
    remote_url, remote_mode = overrides.pop("remote", None), overrides.pop("remote_mode", None)
    try:
        with warnings.catch_warnings():  # deprecated names were reported when options resolved
            warnings.simplefilter("ignore", DeprecationWarning)
            s = Settings.from_env(remote_url=remote_url, remote_mode=remote_mode, **overrides)
    except ValueError as e:  # e.g. KERNELCACHE_LOCK_TIMEOUT=soon
        raise pytest.UsageError(f"kernelcache: {e}") from None
    if s.cuda_arch is None and detected_archs:
        return s.replace(cuda_arch=",".join(detected_archs)), True
    return s, False


def arch_source(opts: Resolved, settings: Settings, detected: bool) -> str:
    """Where the target arch came from, for the header and the summary."""
    if not settings.cuda_arch:
        return "unset (CUDA kernels need --kc-arch or a GPU)"
    o = BY_DEST["cuda_arch"]
    source = opts["cuda_arch"][1]
    where = {"cli": o.cli, "ini": f"ini {o.ini}", "env": o.env}.get(source)
    if where is None:
        where = "detected GPUs" if detected else "TVM_FFI_CUDA_ARCH_LIST"
    return f"{settings.cuda_arch} ({where})"


# -- the one environment write --------------------------------------------------------------
def export_env(settings: Settings) -> dict[str, str | None]:
    """Export ``settings.to_env()`` into ``os.environ`` for test subprocesses; returns the
    previous values for :func:`restore_env`. The only function of the plugin that writes the
    environment; called once, at configure time."""
    saved: dict[str, str | None] = {}
    for name, value in settings.to_env().items():
        saved[name] = os.environ.get(name)
        os.environ[name] = value
    return saved


def restore_env(saved: dict[str, str | None]) -> None:
    """Put back what :func:`export_env` replaced (unset what was unset)."""
    for name, old in saved.items():
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
    saved.clear()


# -- to xdist workers ---------------------------------------------------------------------------
def to_wire(settings: Settings) -> dict[str, Any]:
    """Settings as plain data for ``workerinput`` (execnet carries only builtin types)."""
    return settings.to_wire()


def from_wire(data: dict[str, Any]) -> Settings:
    """The controller's Settings, rebuilt in a worker (so workers never re-resolve options)."""
    return Settings.from_wire(data)
