"""``read`` mode issues no write request, counted at the server itself (SeaweedFS's Prometheus
counters, moto's request recorder); ``readwrite`` never overwrites an existing envelope."""
from __future__ import annotations


import pytest
from .helpers import ids, make_files
from .servers import wait_until

from kernelcache.storage.remote import RemoteReadOnly

pytest.importorskip("obstore")


@pytest.mark.parametrize("server_name", ["seaweed", "moto"])
def test_read_mode_sends_no_write_request(request, server_name, prefix, make_settings, tmp_path):
    from kernelcache.storage.remote import open_remote
    from kernelcache.storage.remote.ops import remote_ls, remote_ping, remote_verify

    server = request.getfixturevalue(server_name)
    w0 = server.write_requests()
    writer = open_remote(make_settings(server.url(prefix), "readwrite"), environ=server.env)
    skey, eid = ids()
    assert writer.publish("adder", skey, eid, {"e": 1}, make_files(tmp_path / "src"))
    lease = writer.acquire_lease("adder", ids()[0], 30)
    sent = writer.request_counts()
    wait_until(lambda: server.write_requests() >= w0 + sent["put"] + sent["delete"], 10.0,
               "the server to count the writer's requests")
    before = server.request_counts()
    writes_before = server.write_requests()

    reader = open_remote(make_settings(server.url(prefix), "read"), environ=server.env)
    refs = reader.list_entries("adder", skey)
    entry = reader.read_entry(refs[0])
    reader.fetch_files(entry, tmp_path / "staging")
    reader.lease_holder("adder", lease.skey)
    reader.wait_for_entries("adder", ids()[0], 1.0)
    with pytest.raises(RemoteReadOnly):
        reader.publish("adder", ids()[0], ids()[1], {}, make_files(tmp_path / "x"))
    with pytest.raises(RemoteReadOnly):
        reader.acquire_lease("adder", ids()[0], 30)
    assert remote_ping(reader)[0]
    remote_ls(reader)
    assert all(r["ok"] for r in remote_verify(reader))

    client = reader.request_counts()
    assert client["put"] == client["delete"] == 0 and client["get"] > 0
    reads_seen = lambda: sum(server.request_counts().values()) - sum(before.values()) >= client["list"]  # noqa: E731
    wait_until(reads_seen, 5.0, "the server to count the reader's requests")
    after = server.request_counts()
    assert server.write_requests() == writes_before, (before, after)
    assert after.get("GET", 0) > before.get("GET", 0)  # the counter does see this client
    lease.release()


def test_write_count_is_seen_by_the_server(seaweed, prefix, make_settings, tmp_path):
    """The counter used above is live: one publish of a new entry shows up as PUTs."""
    from kernelcache.storage.remote import open_remote

    rc = open_remote(make_settings(seaweed.url(prefix), "readwrite"), environ=seaweed.env)
    before = seaweed.write_requests()
    assert rc.publish("adder", *ids(), {"e": 1}, make_files(tmp_path / "src"))
    wait_until(lambda: seaweed.write_requests() >= before + 3, 5.0, "PUTs to be counted")
    assert seaweed.write_requests() == before + rc.request_counts()["put"]
