"""The fleet protocol against every backend: file://, moto and SeaweedFS (real servers).

Commit point: the envelope is created last with create-if-absent; a second publish of the same
entry returns False and changes nothing. Bytes: every fetched file is size- and sha256-checked
while streaming; overwritten, truncated, grown or deleted blobs are RemoteCorrupt/RemoteMissing
and leave no partial file. Envelopes are refused when they do not describe their own path.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from kernelcache.base.errors import KernelCacheError

from kernelcache.storage.remote import RemoteCorrupt, RemoteMissing, RemoteReadOnly, RemoteRefused
from kernelcache.storage.remote.client import blob_key, entry_key

from .helpers import ids, make_files, raw_delete, raw_get, raw_put


def _published(remote, tmp_path: Path, name: str = "adder", size: int = 200_000):
    rc = remote.open("readwrite")
    skey, eid = ids()
    files = make_files(tmp_path / "src", size)
    assert rc.publish(name, skey, eid, {"entry": eid, "deps": ["a.h"]}, files) == "uploaded"
    return rc, skey, eid, files


def test_publish_list_read_fetch_roundtrip(remote, tmp_path):
    rc, skey, eid, files = _published(remote, tmp_path)
    reader = remote.open("read")
    refs = reader.list_entries("adder", skey)
    assert [r.entry_id for r in refs] == [eid]
    assert reader.request_counts()["list"] == 1
    entry = reader.read_entry(refs[0])
    assert entry.manifest == {"entry": eid, "deps": ["a.h"]}
    assert set(entry.files) == {"kernel.so", "manifest.json"}
    assert entry.signed_by is None
    dest = tmp_path / "staging"
    reader.fetch_files(entry, dest)
    for fname, src in files.items():
        assert (dest / fname).read_bytes() == src.read_bytes()
    assert reader.list_entries("adder", ids()[0]) == []  # another source key: nothing, no error


def test_second_publish_never_overwrites(remote, tmp_path):
    rc, skey, eid, files = _published(remote, tmp_path)
    before = raw_get(rc, entry_key("adder", skey, eid))
    other = make_files(tmp_path / "other", tag="loser")
    puts = rc.request_counts()["put"]
    assert rc.publish("adder", skey, eid, {"entry": "loser"}, other) == "exists"
    assert rc.request_counts()["put"] == puts  # the loser uploads nothing
    assert raw_get(rc, entry_key("adder", skey, eid)) == before
    if remote.server is not None:  # and the server saw no PUT for it either
        seen = remote.server.request_counts().get("PUT", 0)
        assert rc.publish("adder", skey, eid, {"entry": "loser2"}, other) == "exists"
        assert remote.server.request_counts().get("PUT", 0) == seen


def test_conditional_create_race_has_one_winner(remote):
    """Eight writers create one key at once: exactly one wins, its bytes stay, and the losers'
    wait is contention, not an outage. SeaweedFS answers the creates of one key a second apart,
    so with a 2 s timeout the later writers' requests time out for real (CI saw the eighth one
    raise and mark the store down): what the key holds then decides, and the store stays up."""
    remote.require_arbitrated_creates()
    rc = remote.open("readwrite", timeout=2.0)
    key = f"entries/adder/{ids()[0]}/{ids()[1]}.json"
    results: dict[int, bool] = {}
    barrier = threading.Barrier(8)

    def writer(i: int) -> None:
        barrier.wait(timeout=10)
        results[i] = rc.store.put_if_absent(key, b"writer %d" % i)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    winners = [i for i, ok in results.items() if ok]
    assert len(results) == 8 and len(winners) == 1, results
    assert raw_get(rc, key) == b"writer %d" % winners[0]
    assert rc.down_reason is None


def test_new_entry_publishable_beside_old_ones_newest_first(remote, tmp_path):
    rc, skey, eid1, _ = _published(remote, tmp_path)
    time.sleep(1.1)  # S3 last-modified has one-second resolution
    eid2 = ids()[1]
    assert rc.publish("adder", skey, eid2, {"entry": eid2}, make_files(tmp_path / "v2", tag="v2")) == "uploaded"
    refs = remote.open("read").list_entries("adder", skey)
    assert [r.entry_id for r in refs] == [eid2, eid1]


@pytest.mark.parametrize("damage", ["overwritten", "truncated", "grown", "deleted"])
def test_damaged_blob_is_a_miss_and_leaves_no_partial_file(remote, tmp_path, damage):
    rc, skey, eid, files = _published(remote, tmp_path)
    reader = remote.open("read")
    entry = reader.read_entry(reader.list_entries("adder", skey)[0])
    sha, size = entry.files["kernel.so"]
    good = files["kernel.so"].read_bytes()
    if damage == "overwritten":
        raw_put(rc, blob_key(sha), bytes(b ^ 0xFF for b in good[:16]) + good[16:])
    elif damage == "truncated":
        raw_put(rc, blob_key(sha), good[: size // 2])
    elif damage == "grown":
        raw_put(rc, blob_key(sha), good + b"\0" * 4096)
    else:
        raw_delete(rc, blob_key(sha))
    dest = tmp_path / "staging"
    expected = RemoteMissing if damage == "deleted" else RemoteCorrupt
    with pytest.raises(expected) as ei:
        reader.fetch_files(entry, dest)
    assert ei.value.reason == ("remote_missing" if damage == "deleted" else "remote_corrupt")
    assert list(dest.iterdir()) == []  # nothing half-fetched stays in staging
    assert reader.down_reason is None  # one bad entry never marks the remote down


def test_republish_repairs_a_blob_of_the_wrong_size(remote, tmp_path):
    rc, skey, eid, files = _published(remote, tmp_path)
    sha = rc.read_entry(rc.list_entries("adder", skey)[0]).files["kernel.so"][0]
    raw_put(rc, blob_key(sha), b"short")
    assert rc.publish("adder", skey, ids()[1], {"entry": 2}, files) == "uploaded"
    reader = remote.open("read")
    reader.fetch_files(reader.read_entry(reader.list_entries("adder", skey)[0]), tmp_path / "d")
    assert (tmp_path / "d" / "kernel.so").read_bytes() == files["kernel.so"].read_bytes()


def test_envelope_at_the_wrong_path_is_refused(remote, tmp_path):
    rc, skey, eid, _ = _published(remote, tmp_path)
    body = raw_get(rc, entry_key("adder", skey, eid))
    other_eid = ids()[1]
    raw_put(rc, entry_key("adder", skey, other_eid), body)  # copied under another entry id
    other_skey = ids()[0]
    raw_put(rc, entry_key("adder", other_skey, eid), body)  # ... and under another source key
    reader = remote.open("read")
    for skey_, eid_ in ((skey, other_eid), (other_skey, eid)):
        ref = next(r for r in reader.list_entries("adder", skey_) if r.entry_id == eid_)
        with pytest.raises(RemoteRefused, match="its path says"):
            reader.read_entry(ref)
    assert reader.read_entry(next(r for r in reader.list_entries("adder", skey) if r.entry_id == eid))


@pytest.mark.parametrize("mutate,expected", [
    (lambda e: {**e, "format": 2}, RemoteRefused),
    (lambda e: {**e, "files": {"../evil": {"sha256": "0" * 64, "size": 1}}}, RemoteRefused),
    (lambda e: {**e, "files": {"kernel.so": {"sha256": "xyz", "size": 1}}}, RemoteRefused),
    (lambda e: {**e, "files": {}}, RemoteRefused),
    (lambda e: None, RemoteCorrupt),  # not JSON at all
])
def test_malformed_envelopes(remote, tmp_path, mutate, expected):
    rc, skey, eid, _ = _published(remote, tmp_path)
    key = entry_key("adder", skey, eid)
    new = mutate(json.loads(raw_get(rc, key)))
    raw_put(rc, key, b"{not json" if new is None else json.dumps(new).encode())
    reader = remote.open("read")
    with pytest.raises(expected):
        reader.read_entry(reader.list_entries("adder", skey)[0])


def test_read_mode_refuses_writes_before_any_request(remote, tmp_path):
    reader = remote.open("read")
    skey, eid = ids()
    with pytest.raises(RemoteReadOnly):
        reader.publish("adder", skey, eid, {}, make_files(tmp_path / "f"))
    with pytest.raises(RemoteReadOnly):
        reader.acquire_lease("adder", skey, 5)
    assert sum(reader.request_counts().values()) == 0


def test_bad_ids_are_rejected_before_any_request(remote, tmp_path):
    rc = remote.open("readwrite")
    with pytest.raises(ValueError):
        rc.list_entries("../etc", ids()[0])
    with pytest.raises(ValueError):
        rc.publish("adder", "NOT-HEX", ids()[1], {}, make_files(tmp_path / "f"))
    with pytest.raises(ValueError):
        rc.publish("adder", ids()[0], "short", {}, make_files(tmp_path / "f"))
    assert sum(rc.request_counts().values()) == 0


def test_open_remote_off_and_errors(make_settings, tmp_path):
    from kernelcache.storage.remote import open_remote

    assert open_remote(make_settings("s3://b/p", "off")) is None
    assert open_remote(make_settings(None, "read")) is None
    for bad in ("ftp://host/x", "s3:///nobucket", "file://relative/x"):
        with pytest.raises(KernelCacheError):
            open_remote(make_settings(bad, "read"))
    with pytest.raises(KernelCacheError, match="credentials in the URL") as ei:
        open_remote(make_settings("s3://AKIA:supersecret@bucket/p", "read"))
    assert "supersecret" not in str(ei.value)
    with pytest.raises(KernelCacheError, match="plain http"):
        open_remote(make_settings("s3://bucket/p", "read"), environ={"AWS_ENDPOINT_URL": "http://10.1.2.3:9000"})


@pytest.mark.parametrize("damage", ["same_size_other_bytes", "truncated", "deleted"])
def test_publishing_an_existing_entry_repairs_its_damaged_blob(remote, tmp_path, damage):
    """Issue 19 #1: a second publish of an entry checks its blobs (size and sha256) and
    re-uploads a damaged or missing one from its own bytes; nothing else is written."""
    rc, skey, eid, files = _published(remote, tmp_path)
    sha = rc.read_entry(rc.list_entries("adder", skey)[0]).files["kernel.so"][0]
    good = files["kernel.so"].read_bytes()
    if damage == "same_size_other_bytes":
        raw_put(rc, blob_key(sha), good[:100] + bytes([good[100] ^ 1]) + good[101:])  # one bit flipped
    elif damage == "truncated":
        raw_put(rc, blob_key(sha), good[:1000])
    else:
        raw_delete(rc, blob_key(sha))
    envelope = raw_get(rc, entry_key("adder", skey, eid))
    reader = remote.open("read")
    with pytest.raises((RemoteCorrupt, RemoteMissing)):
        reader.fetch_files(reader.read_entry(reader.list_entries("adder", skey)[0]), tmp_path / "before")
    assert rc.publish("adder", skey, eid, {"entry": eid, "deps": ["a.h"]}, files) == "repaired"
    assert raw_get(rc, entry_key("adder", skey, eid)) == envelope  # the envelope itself is never rewritten
    reader.fetch_files(reader.read_entry(reader.list_entries("adder", skey)[0]), tmp_path / "after")
    assert (tmp_path / "after" / "kernel.so").read_bytes() == good
    assert rc.publish("adder", skey, eid, {"entry": eid}, files) == "exists"  # intact now: nothing to do


def test_an_entry_nobody_can_repair_is_replaced_by_a_whole_one(remote, tmp_path):
    """The damaged blob's bytes are not ours (a rebuild with other bytes, same entry id): the
    broken envelope is swapped for ours, so hosts stop refusing it forever."""
    rc, skey, eid, files = _published(remote, tmp_path)
    sha = rc.read_entry(rc.list_entries("adder", skey)[0]).files["kernel.so"][0]
    raw_delete(rc, blob_key(sha))
    rebuilt = make_files(tmp_path / "rebuilt", tag="rebuilt")
    assert rc.publish("adder", skey, eid, {"entry": "rebuilt"}, rebuilt) == "replaced"
    reader = remote.open("read")
    entry = reader.read_entry(reader.list_entries("adder", skey)[0])
    assert entry.manifest == {"entry": "rebuilt"}
    reader.fetch_files(entry, tmp_path / "d")
    assert (tmp_path / "d" / "kernel.so").read_bytes() == rebuilt["kernel.so"].read_bytes()
