"""ls / verify / ping / keygen against every backend (the CLI's `kernelcache remote ...`)."""
from __future__ import annotations

import warnings

from .helpers import ids, make_files, raw_delete, raw_put

from kernelcache.storage.remote.client import blob_key
from kernelcache.storage.remote.ops import remote_ls, remote_ping, remote_verify


def test_ls_and_verify(remote, tmp_path):
    rc = remote.open("readwrite")
    good, corrupt, missing = ids(), ids(), ids()
    for i, (skey, eid) in enumerate((good, corrupt, missing)):
        assert rc.publish("adder", skey, eid, {"i": i}, make_files(tmp_path / f"e{i}"))
    listed = {(r["skey"], r["entry_id"]) for r in remote_ls(rc)}
    assert listed == {good, corrupt, missing}
    c = rc.read_entry(rc.list_entries("adder", corrupt[0])[0]).files["kernel.so"]
    raw_put(rc, blob_key(c[0]), b"x" * c[1])  # same size, other bytes
    m = rc.read_entry(rc.list_entries("adder", missing[0])[0]).files["kernel.so"]
    raw_delete(rc, blob_key(m[0]))
    rows = {(r["skey"], r["entry_id"]): r for r in remote_verify(rc) if r["kind"] == "entry"}
    assert rows[good]["ok"]
    assert not rows[corrupt]["ok"] and rows[corrupt]["reason"] == "remote_corrupt"
    assert not rows[missing]["ok"] and rows[missing]["reason"] == "remote_missing"
    assert rc.down_reason is None


def test_ping(remote):
    ok, msg = remote_ping(remote.open("read"))
    assert ok and "reachable" in msg and "(read)" in msg
    ok, msg = remote_ping(remote.open("readwrite"))
    assert ok and "write probe ok" in msg
    assert remote_ping(None) == (True, "off")


def test_ping_reports_an_outage(seaweed, prefix, make_settings):
    from kernelcache.storage.remote import open_remote

    rc = open_remote(make_settings(seaweed.url(prefix), "read"), environ=seaweed.bad_env())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ok, msg = remote_ping(rc)
    assert not ok and "remote_unavailable" in msg and seaweed.bad_env()["AWS_SECRET_ACCESS_KEY"] not in msg
