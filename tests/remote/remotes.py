"""What the fleet fixtures hand a test: a remote of any kind (file://, moto, SeaweedFS)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from .servers import S3Server

REPO = Path(__file__).resolve().parents[2]


def need(module: str) -> None:
    """Skip (with the install hint) when an optional module of the remote extra is missing."""
    try:
        __import__(module)
    except ImportError:
        pytest.skip(f"{module} is not installed (pip install -e '.[remote,test]')")


@dataclass
class FileRemote:
    path: Path
    env: dict = field(default_factory=dict)  # no credentials for a shared directory

    @property
    def url(self) -> str:
        return f"file://{self.path}"


@dataclass
class Remote:
    """One remote of any kind, as the protocol tests see it."""

    kind: str  # "file" | "moto" | "seaweed"
    url: str
    env: dict
    server: S3Server | None
    path: Path | None
    _make: Callable[..., Any]

    def settings(self, mode: str = "read", **kw: Any):
        return self._make(self.url, mode, **kw)

    def open(self, mode: str = "read", environ: dict | None = None, **kw: Any):
        from kernelcache.storage.remote import open_remote

        return open_remote(self.settings(mode, **kw), environ=self.env if environ is None else environ)

    def subprocess_env(self, **extra: str) -> dict[str, str]:
        return clean_env(**{**self.env, **extra})

    def require_arbitrated_creates(self) -> None:
        """Skip a test of racing creates on moto: moto_server checks ``If-None-Match`` and stores
        the object in two steps without a lock, so under load two racing creates of one key both
        get 200 (3-6 of 150 races of 8 writers, cores busy; a shuffled suite run hit it once).
        One winner is the store's guarantee, not ours: the file remote and SeaweedFS show it."""
        if self.kind == "moto":
            pytest.skip("moto_server does not arbitrate racing conditional creates (check, then store)")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without AWS_* and KERNELCACHE_*, this checkout first on
    PYTHONPATH, then ``extra``: the base of a 'host' subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KERNELCACHE_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env
