"""Issue 42, items 3 and 4: what the fleet bucket holds is bounded before it is read or parsed.

Real objects planted on the real remotes of conftest.py (a shared directory, SeaweedFS, moto):
a deeply nested envelope (raised ``RecursionError`` out of a load, with or without verify keys),
an envelope larger than the 64 MiB cap (read whole before the cap was checked: memory grew by
its size), a FIFO in a blob's place on a shared directory (hung the reader until its deadline,
then marked the remote down). Each is a miss with its reason, then a local build.
"""
from __future__ import annotations

import json
import os
import tracemalloc

import pytest

from .helpers import ids, make_files, raw_get, raw_put
from .hosts import Host, make_project


def _env(remote, mode: str, **extra: str) -> dict:
    return remote.subprocess_env(KERNELCACHE_REMOTE=remote.url, KERNELCACHE_REMOTE_MODE=mode, **extra)


def _published(remote, tmp_path, **extra: str):
    """Host A built the tiny kernel and published it: (project, the envelope's ref, the entry)."""
    project = make_project(tmp_path / "proj")
    a = Host("a", tmp_path / "host_a", _env(remote, "readwrite", **extra))
    assert a.load(project)["status"] == "built"
    rc = remote.open("read")
    [ref] = [r for r in rc.all_entries() if r.name == "fleet_k"]
    return project, ref, rc.read_entry(ref)


def test_deeply_nested_envelope_is_a_miss_with_or_without_verify_keys(fleet_remote, tmp_path):
    from kernelcache.storage.remote.ops import keygen

    keys = tmp_path / "keys"
    keygen(keys / "ci.pem", keys / "ci.pub")
    project, ref, _ = _published(fleet_remote, tmp_path, KERNELCACHE_REMOTE_SIGNING_KEY=str(keys / "ci.pem"))
    rc = fleet_remote.open("readwrite")
    deep = b'{"format": 1, "manifest": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    raw_put(rc, ref.key, deep)
    for label, extra in (("plain", {}), ("verify", {"KERNELCACHE_REMOTE_VERIFY_KEYS": str(keys / "ci.pub")})):
        b = Host(f"b_{label}", tmp_path / f"host_b_{label}", _env(fleet_remote, "read", **extra))
        out = b.load(project)
        assert out.get("status") == "built" and out["value"] == 5, (label, out)
        misses = b.events("remote_miss")
        assert [e.get("reason_code") for e in misses] == ["remote_corrupt"], (label, misses)
        assert "nested" in misses[0]["reason"], misses
    assert raw_get(rc, ref.key) == deep  # a reader never writes


def _envelope_of(size: int, body: dict) -> bytes:
    """A well-formed envelope padded with JSON whitespace to ``size`` bytes."""
    text = json.dumps(body).encode()
    return text[:-1] + b" " * (size - len(text)) + b"}"


def test_envelope_past_the_cap_is_refused_without_being_read(remote, tmp_path):
    rc = remote.open("readwrite")
    skey, eid = ids()
    rc.publish("hostile_k", skey, eid, {"tag": "small"}, make_files(tmp_path / "e", so_size=1000))
    [listed_small] = rc.list_entries("hostile_k", skey)
    body = json.loads(raw_get(rc, listed_small.key))
    raw_put(rc, listed_small.key, _envelope_of((64 << 20) + 4096, body))  # 4 KiB past the 64 MiB cap
    from kernelcache.storage.remote import RemoteCorrupt

    # listed at its size: refused before any request for its bytes
    [listed_big] = rc.list_entries("hostile_k", skey)
    gets = rc.request_counts()["get"]
    tracemalloc.start()
    try:
        with pytest.raises(RemoteCorrupt, match="larger than any manifest"):
            rc.read_entry(listed_big)
        peak_listed = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc.request_counts()["get"] == gets
    # listed while small, replaced before the read (a race): the read stops at the object's size
    tracemalloc.start()
    try:
        with pytest.raises(RemoteCorrupt):
            rc.read_entry(listed_small)
        peak_raced = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert max(peak_listed, peak_raced) < (8 << 20), (peak_listed, peak_raced)  # not the 64 MiB object


def test_fifo_in_a_blobs_place_is_a_corrupt_blob_not_an_outage(file_remote, make_settings, tmp_path):
    from .remotes import Remote

    remote = Remote("file", file_remote.url, {}, None, file_remote.path, make_settings)
    project, _, entry = _published(remote, tmp_path)
    sha = next(sha for name, (sha, _) in entry.files.items() if name.endswith(".so"))
    blob = file_remote.path / "blobs" / sha
    blob.unlink()
    os.mkfifo(blob)
    b = Host("b", tmp_path / "host_b", _env(remote, "read", KERNELCACHE_REMOTE_TIMEOUT="2"))
    out = b.load(project)
    assert out.get("status") == "built" and out["value"] == 5, out
    assert b.events("remote_down") == [], b.events("remote_down")  # the share is up: one object is bad
    misses = b.events("remote_miss")
    assert [e.get("reason_code") for e in misses] == ["remote_corrupt"] and "FIFO" in misses[0]["reason"], misses
