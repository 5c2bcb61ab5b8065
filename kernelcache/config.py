"""Environment settings (KERNELCACHE_*), read at call time so tests and the plugin can change them.

Precedence elsewhere (plugin): ini < environment < command line < marker; the plugin writes
its resolved values back into the environment, so this module stays the one place that reads them.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """The writable cache root: KERNELCACHE_DIR, else ~/.cache/kernelcache."""
    v = os.environ.get("KERNELCACHE_DIR")
    base = Path(v).expanduser() if v else Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "kernelcache"
    return Path(os.path.abspath(base))


def lock_dir() -> Path:
    """Node-local lock dir: flock is only meaningful on the local kernel, never on NFS."""
    v = os.environ.get("KERNELCACHE_LOCK_DIR")
    if v:
        return Path(os.path.abspath(os.path.expanduser(v)))
    return Path(tempfile.gettempdir()) / f"kernelcache-{os.getuid()}" / "locks"


def lock_timeout() -> float:
    """Seconds to wait for another builder; 0 or negative = wait forever."""
    v = os.environ.get("KERNELCACHE_LOCK_TIMEOUT", "").strip()
    try:
        return float(v) if v else 1800.0
    except ValueError:
        raise ValueError(f"KERNELCACHE_LOCK_TIMEOUT must be a number of seconds, got {v!r}") from None


def no_build() -> bool:
    return os.environ.get("KERNELCACHE_NO_BUILD", "").strip().lower() in ("1", "true", "yes", "on")


def rebuild() -> bool:
    return os.environ.get("KERNELCACHE_REBUILD", "").strip().lower() in ("1", "true", "yes", "on")


def log_target() -> str | None:
    """KERNELCACHE_LOG: unset -> build progress only; '0' -> silent; '1'/'stderr' -> all events; else a file."""
    return os.environ.get("KERNELCACHE_LOG")


def prebuilt_roots() -> list[Path]:
    v = os.environ.get("KERNELCACHE_PREBUILT", "")
    return [Path(p).expanduser().resolve() for p in v.split(os.pathsep) if p.strip()]


def max_jobs() -> int | None:
    v = os.environ.get("MAX_JOBS", "").strip()
    return int(v) if v.isdigit() and int(v) > 0 else None
