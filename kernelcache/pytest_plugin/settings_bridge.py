"""Resolved options -> one :class:`kernelcache.settings.Settings` for the session.

Why: the loader takes its settings as an argument (``load_with_result(spec, settings=s)``,
``warm(specs, settings=s)``), so the plugin steers it by value, never by editing
``os.environ`` around a load. Per-test variants (a marker's ``no_build``) are
``s.replace(...)``. The one place that writes the environment is :func:`export_env`: test code
that starts subprocesses (or calls ``kernelcache.load()`` without settings) must see the same
settings, so the session's resolved settings are exported once at configure time and the
previous values are restored at unconfigure.
"""
from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

from kernelcache.settings import Settings

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
    if "remote" in overrides or "remote_mode" in overrides:  # the same rule as Settings.from_env
        remote = opts["remote"][0]
        mode = opts["remote_mode"][0] or ("read" if remote else "off")
        overrides["remote"] = remote
        overrides["remote_mode"] = mode if remote else "off"
    try:
        with warnings.catch_warnings():  # deprecated names were reported when options resolved
            warnings.simplefilter("ignore", DeprecationWarning)
            s = Settings.from_env(**overrides)
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
    out: dict[str, Any] = {}
    for f in dataclasses.fields(settings):
        v = getattr(settings, f.name)
        if isinstance(v, Path):
            v = str(v)
        elif isinstance(v, tuple):
            v = [str(p) for p in v]
        out[f.name] = v
    return out


def from_wire(data: dict[str, Any]) -> Settings:
    """The controller's Settings, rebuilt in a worker (so workers never re-resolve options)."""
    names = {f.name for f in dataclasses.fields(Settings)}
    values = {k: v for k, v in data.items() if k in names}
    for k in ("prebuilt", "remote_verify_keys"):
        if k in values:
            values[k] = tuple(Path(p) for p in values[k])
    return Settings(**values)
