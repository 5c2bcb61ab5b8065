"""Real filesystem faults for tests: a read-only bind mount, a small tmpfs that fills up.

Why mounts: the tests run as root, and root ignores file modes, so ``chmod`` provokes neither a
read-only cache nor a full disk. Where the container may not mount (no CAP_SYS_ADMIN), the
context managers skip the test and say why. Every mount is undone when the block ends.
"""
from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


def _mount(*argv: str) -> None:
    proc = subprocess.run(["mount", *argv], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        pytest.skip(f"this machine does not let the tests mount ({' '.join(['mount', *argv])}: "
                    f"{(proc.stderr or proc.stdout).strip()})")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=60)


@contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """``path`` (an existing directory) made read-only in place by a read-only bind mount over it."""
    _mount("--bind", str(path), str(path))
    try:
        _mount("-o", "remount,ro,bind", str(path))
        probe = path / ".kc-probe"
        try:
            probe.touch()
        except OSError:
            pass
        else:
            probe.unlink()
            pytest.skip(f"a read-only bind mount over {path} still takes writes here")
        yield path
    finally:
        _umount(path)


@contextmanager
def small_tmpfs(path: Path, size: str = "256k") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (created): a disk that can really fill up."""
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size},mode=0755", "kc-test-tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


def fill(path: Path) -> int:
    """Write a file under ``path`` until its filesystem is full; the bytes written."""
    n = 0
    chunk = b"\0" * 4096
    with open(path / "filler", "wb", buffering=0) as f:
        try:
            while True:
                n += f.write(chunk)
        except OSError:
            pass
        try:
            while True:  # the last partial page
                n += f.write(b"\0")
        except OSError:
            pass
    st = os.statvfs(path)
    assert st.f_bavail == 0, f"{path} still has {st.f_bavail} free blocks"
    return n
