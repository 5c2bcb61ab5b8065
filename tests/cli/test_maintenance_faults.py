"""``prune`` and ``clean`` on a cache they cannot change: an error naming the path, exit 1.

The cache is made read-only by a read-only bind mount (the tests run as root: file modes do not
stop root). Nothing may be reported as evicted or removed that is still there.
"""
from __future__ import annotations

import shutil

from tests.mounts import read_only


def _cached_copy(cli, built_adder) -> list:
    shutil.copytree(built_adder.settings.cache_dir, cli.cache)
    entries = sorted(p for p in (cli.cache / "v1" / "entries").glob("*/*/*") if p.is_dir())
    assert len(entries) == 1
    return entries


def test_prune_of_a_read_only_cache_fails_naming_the_entry(cli, built_adder):
    entries = _cached_copy(cli, built_adder)
    with read_only(cli.cache):
        r = cli.run("prune", "--max-size", "0")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "1 entry evicted" not in r.stdout and "evicted adder" not in r.stdout
    assert "0 entries evicted" in r.stdout
    assert str(entries[0]) in r.stderr and "Read-only file system" in r.stderr
    assert all(e.is_dir() for e in entries)  # still there, as the output says


def test_clean_of_a_read_only_cache_fails_naming_the_path(cli, built_adder):
    entries = _cached_copy(cli, built_adder)
    with read_only(cli.cache):
        r = cli.run("clean", "-y")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "removed" not in r.stdout
    assert str(cli.cache / "v1") in r.stderr and "Read-only file system" in r.stderr
    assert all(e.is_dir() for e in entries)


def test_prune_and_clean_still_succeed_on_a_writable_cache(cli, built_adder):
    entries = _cached_copy(cli, built_adder)
    r = cli.run("prune", "--max-size", "0")
    assert r.returncode == 0, r.stderr
    assert "1 entry evicted" in r.stdout and not entries[0].exists()
    r = cli.run("clean", "-y")
    assert r.returncode == 0, r.stderr
    assert f"removed {cli.cache / 'v1'}" in r.stdout and not (cli.cache / "v1").exists()
    assert list(cli.cache.iterdir()) == []  # nothing left beside it either
