"""Outages, provoked for real: wrong credentials (SeaweedFS checks them), nothing listening, a
server that accepts and never answers, a SeaweedFS SIGKILLed mid-download, a hung shared
filesystem (a FIFO blocks open(2) for real). Each ends (at the client's own deadline) as
RemoteUnavailable after one request, marks the remote down with exactly one warning, and sends no
further request. Counts and order are asserted, never durations.
"""
from __future__ import annotations

import warnings

import pytest
from .helpers import finishes, ids, make_files
from .servers import StallServer, unused_endpoint

from kernelcache.storage.remote import RemoteUnavailable
from kernelcache.storage.remote.client import RemoteDownWarning, blob_key

pytest.importorskip("obstore")


def _assert_down_after(rc, server=None):
    """The first call fails as one request and marks down (one warning); later calls make none."""
    skey = ids()[0]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        err = finishes(rc.list_entries, "adder", skey).get("error")
        assert isinstance(err, RemoteUnavailable), err
        assert err.reason == "remote_unavailable"
        assert rc.down_reason
        client_before = rc.request_counts()
        assert sum(client_before.values()) == 1, client_before  # one request, no retry loop
        server_before = server.request_counts() if server is not None else None
        for _ in range(3):
            with pytest.raises(RemoteUnavailable, match="marked down"):
                rc.list_entries("adder", skey)
            with pytest.raises(RemoteUnavailable):
                rc.lease_holder("adder", skey)
        assert rc.request_counts() == client_before  # no request once down
        if server is not None:
            assert server.request_counts() == server_before
    down = [w for w in rec if issubclass(w.category, RemoteDownWarning)]
    assert len(down) == 1, [str(w.message) for w in rec]
    from .servers import SECRET_KEY

    assert SECRET_KEY not in str(down[0].message)
    return err


def test_wrong_credentials_mark_down(seaweed, prefix, make_settings):
    from kernelcache.storage.remote import open_remote

    rc = open_remote(make_settings(seaweed.url(prefix), "read"), environ=seaweed.bad_env())
    err = _assert_down_after(rc, seaweed)
    assert "credentials" in str(err)
    assert seaweed.bad_env()["AWS_SECRET_ACCESS_KEY"] not in str(err)


def test_down_state_is_process_wide(seaweed, prefix, make_settings):
    """A second RemoteCache for the same remote (a later load) finds it down without a request."""
    from kernelcache.storage.remote import open_remote

    s = make_settings(seaweed.url(prefix), "read")
    _assert_down_after(open_remote(s, environ=seaweed.bad_env()), seaweed)
    again = open_remote(s, environ=seaweed.bad_env())
    assert again.down_reason
    with pytest.raises(RemoteUnavailable):
        again.list_entries("adder", ids()[0])
    assert sum(again.request_counts().values()) == 0


def test_unreachable_endpoint(prefix, make_settings, seaweed):
    from kernelcache.storage.remote import open_remote

    env = {**seaweed.env, "AWS_ENDPOINT_URL": unused_endpoint()}
    rc = open_remote(make_settings(seaweed.url(prefix), "read", timeout=3.0), environ=env)
    _assert_down_after(rc)


def test_server_that_never_answers_hits_the_deadline(prefix, make_settings, seaweed):
    from kernelcache.storage.remote import open_remote

    stall = StallServer()
    try:
        env = {**seaweed.env, "AWS_ENDPOINT_URL": stall.endpoint}
        rc = open_remote(make_settings(seaweed.url(prefix), "read", timeout=1.5), environ=env)
        _assert_down_after(rc)
    finally:
        stall.close()


def test_server_killed_mid_download(seaweed_private, prefix, make_settings, tmp_path):
    """SeaweedFS is SIGKILLed after the first MiB of a 24 MiB blob reached local staging."""
    from kernelcache.storage.remote import open_remote

    srv = seaweed_private
    writer = open_remote(make_settings(srv.url(prefix), "readwrite"), environ=srv.env)
    skey, eid = ids()
    assert writer.publish("adder", skey, eid, {"e": 1}, make_files(tmp_path / "src", 24 << 20))
    reader = open_remote(make_settings(srv.url(prefix), "read", timeout=3.0), environ=srv.env)
    entry = reader.read_entry(reader.list_entries("adder", skey)[0])
    real_stream = reader._backend.stream
    killed = {}

    def stream_then_kill(key):
        it = real_stream(key)
        first = next(it)
        if key == blob_key(entry.files["kernel.so"][0]):
            srv.kill()  # the real server dies with the body in flight
            killed["requests"] = sum(reader.request_counts().values())
        yield first
        yield from it

    reader._backend.stream = stream_then_kill
    dest = tmp_path / "staging"
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        err = finishes(reader.fetch_files, entry, dest).get("error")
    assert isinstance(err, RemoteUnavailable), err
    assert killed, "the kill hook never ran"
    assert sum(reader.request_counts().values()) == killed["requests"]  # no request after the kill
    assert reader.down_reason
    assert list(dest.iterdir()) == []  # the partial download is gone
    assert len([w for w in rec if issubclass(w.category, RemoteDownWarning)]) == 1
    with pytest.raises(RemoteUnavailable, match="marked down"):
        reader.list_entries("adder", skey)


def test_restarted_server_serves_again_in_a_new_process_state(seaweed_private, prefix, make_settings, tmp_path):
    """After a restart (and a reset of the process-wide down state) the same data is served."""
    from kernelcache.storage.remote import open_remote
    from kernelcache.storage.remote.client import reset_down_state

    srv = seaweed_private
    s = make_settings(srv.url(prefix), "readwrite", timeout=2.0)
    rc = open_remote(s, environ=srv.env)
    skey, eid = ids()
    assert rc.publish("adder", skey, eid, {"e": 1}, make_files(tmp_path / "src"))
    srv.kill()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RemoteUnavailable):
            rc.list_entries("adder", skey)
    srv.restart()
    reset_down_state()
    assert [r.entry_id for r in open_remote(s, environ=srv.env).list_entries("adder", skey)] == [eid]


# Holds a write lease on a file: another process's open(2) of it blocks in the kernel (for the
# lease-break time, 45 s by default) while the holder ignores the break signal.
LEASE_HOLDER = """
import fcntl, os, signal, sys, time
signal.signal(signal.SIGIO, signal.SIG_IGN)
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.fcntl(fd, getattr(fcntl, "F_SETLEASE", 1024), fcntl.F_WRLCK)
print("leased", flush=True)
time.sleep(600)
"""


def test_hung_shared_filesystem_hits_the_deadline(file_remote, make_settings, tmp_path):
    """open(2) of a blob blocks in the kernel like on a hard-mounted NFS server that went away:
    a real file lease held by another process (a FIFO no longer serves: the store opens regular
    files only, and refuses a FIFO as a corrupt object at once)."""
    import subprocess
    import sys

    from kernelcache.storage.remote import open_remote

    w = open_remote(make_settings(file_remote.url, "readwrite"))
    skey, eid = ids()
    assert w.publish("adder", skey, eid, {"e": 1}, make_files(tmp_path / "src"))
    entry = w.read_entry(w.list_entries("adder", skey)[0])
    blob = file_remote.path / "blobs" / entry.files["kernel.so"][0]
    holder = subprocess.Popen([sys.executable, "-c", LEASE_HOLDER, str(blob)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    reader = open_remote(make_settings(file_remote.url, "read", timeout=1.0))
    try:
        if holder.stdout.readline().strip() != "leased":
            pytest.skip(f"no file lease on this filesystem: {holder.stderr.read()[-500:]}")
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            err = finishes(reader.fetch_files, entry, tmp_path / "staging").get("error")
            assert isinstance(err, RemoteUnavailable) and "did not finish within 1s" in str(err), err
        assert len([x for x in rec if issubclass(x.category, RemoteDownWarning)]) == 1
        assert reader.down_reason
    finally:  # the lease goes with its holder: the abandoned reader thread's open returns
        holder.kill()
        holder.communicate()


def test_missing_share_directory_is_unavailable_not_created(tmp_path, make_settings):
    from kernelcache.storage.remote import open_remote

    gone = tmp_path / "not-mounted"
    rc = open_remote(make_settings(f"file://{gone}", "readwrite"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RemoteUnavailable, match="unreachable"):
            rc.list_entries("adder", ids()[0])
    assert not gone.exists()
