"""CLI tests run ``python -m kernelcache`` in subprocesses with a private cache and environment."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Cli:
    tmp: Path
    env: dict[str, str]

    @property
    def cache(self) -> Path:
        return Path(self.env["KERNELCACHE_DIR"])

    def run(self, *args: str, timeout: float = 300, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
        e = {**self.env, **env}
        return subprocess.run([sys.executable, "-m", "kernelcache", *args], env=e, cwd=str(cwd or self.tmp),
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def make_cli(tmp_path: Path) -> Cli:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELCACHE_")
           and k not in ("TVM_FFI_CUDA_ARCH_LIST", "CPATH", "CPLUS_INCLUDE_PATH")}
    env.update(KERNELCACHE_DIR=str(tmp_path / "cache"), KERNELCACHE_LOCK_DIR=str(tmp_path / "locks"),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return Cli(tmp_path, env)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """A private cache and environment for ``python -m kernelcache`` (one per test)."""
    return make_cli(tmp_path)
