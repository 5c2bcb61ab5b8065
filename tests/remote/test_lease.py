"""Fleet-wide single flight: acquire, see the holder, expiry and take-over, a SIGKILLed holder,
waiting for another host's manifest (bounded, holder reported), and release."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from .helpers import finishes, ids, make_files

from kernelcache.storage.remote import Lease, LeaseInfo

HOLDER = r"""
import sys, time
from pathlib import Path
from kernelcache.base.settings import RemoteSettings, Settings
from kernelcache.storage.remote import open_remote
url, skey, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = Settings(cache_dir=Path(sys.argv[4]), lock_dir=Path(sys.argv[4]) / "l", remote=RemoteSettings(url, "readwrite"))
got = open_remote(s).acquire_lease("adder", skey, ttl)
print(type(got).__name__, flush=True)
time.sleep(600)
"""


def test_acquire_then_second_host_sees_holder_then_release(remote):
    a, b = remote.open("readwrite"), remote.open("readwrite")
    skey = ids()[0]
    lease = a.acquire_lease("adder", skey, 30)
    assert isinstance(lease, Lease)
    seen = b.acquire_lease("adder", skey, 30)
    assert isinstance(seen, LeaseInfo) and seen.live()
    assert (seen.pid, seen.generation, seen.token) == (os.getpid(), lease.generation, lease.info.token)
    assert "pid" in seen.describe() and "expires in" in seen.describe()
    assert remote.open("read").lease_holder("adder", skey) == seen  # readers can look too
    lease.release()
    assert remote.open("read").lease_holder("adder", skey) is None
    again = b.acquire_lease("adder", skey, 30)
    assert isinstance(again, Lease)
    again.release()


def test_expired_lease_is_taken_over(remote):
    a, b = remote.open("readwrite"), remote.open("readwrite")
    skey = ids()[0]
    first = a.acquire_lease("adder", skey, 4.0)  # seconds enough that a loaded machine sees it held next
    assert isinstance(first, Lease)
    assert isinstance(b.acquire_lease("adder", skey, 30), LeaseInfo)
    time.sleep(4.2)
    taken = b.acquire_lease("adder", skey, 30)
    assert isinstance(taken, Lease) and taken.generation == first.generation + 1
    assert not first.renew()  # the old holder learns it lost the lease
    assert taken.renew(30) and taken.generation == first.generation + 2
    holder = a.lease_holder("adder", skey)
    assert holder is not None and holder.token == taken.info.token
    taken.release()


def test_racing_acquirers_have_one_winner(remote):
    remote.require_arbitrated_creates()
    skey = ids()[0]
    clients = [remote.open("readwrite") for _ in range(6)]
    out: list = [None] * 6
    barrier = threading.Barrier(6)

    def run(i: int) -> None:
        barrier.wait(timeout=10)
        out[i] = clients[i].acquire_lease("adder", skey, 30)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    held = [x for x in out if isinstance(x, Lease)]
    assert len(held) == 1, out
    assert all(isinstance(x, LeaseInfo) for x in out if x is not held[0])
    held[0].release()


def test_sigkilled_holder_blocks_nobody_beyond_expiry(remote, tmp_path):
    skey, ttl = ids()[0], 10.0  # long enough that a loaded machine still sees it held below
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, remote.url, skey, str(ttl), str(tmp_path / "h")],
                            env=remote.subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "Lease", proc.stderr.read() if proc.poll() is not None else ""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        rc = remote.open("readwrite")
        holder = rc.acquire_lease("adder", skey, 30)
        assert isinstance(holder, LeaseInfo) and holder.pid == proc.pid
        waits = []
        got = finishes(rc.wait_for_entries, "adder", skey, 3600, lambda h, w: waits.append((h, w)))
        assert got == {"value": []}, got  # an hour's deadline: it returned because the lease expired
        assert rc.lease_holder("adder", skey) is None  # (it ended: nobody holds it now)
        assert waits and all(h.pid == proc.pid for h, _ in waits)
        taken = rc.acquire_lease("adder", skey, 30)
        assert isinstance(taken, Lease)
        taken.release()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)  # closes the pipes too


def test_waiter_gets_the_holders_entry(remote, tmp_path):
    holder_rc, waiter = remote.open("readwrite"), remote.open("read")
    skey, eid = ids()
    lease = holder_rc.acquire_lease("adder", skey, 30)
    assert isinstance(lease, Lease)

    waiting = threading.Event()

    def compile_and_publish() -> None:
        waiting.wait(timeout=30)  # publish only once the waiter has seen the lease held
        holder_rc.publish("adder", skey, eid, {"e": 1}, make_files(tmp_path / "src"))
        lease.release()

    def on_wait(holder, waited) -> None:
        seen.append(holder)
        waiting.set()

    t = threading.Thread(target=compile_and_publish)
    t.start()
    seen = []
    refs = waiter.wait_for_entries("adder", skey, 20, on_wait)
    t.join(timeout=30)
    assert [r.entry_id for r in refs] == [eid]
    assert seen and seen[0].pid == os.getpid()


def test_wait_is_bounded_by_its_deadline(remote):
    rc = remote.open("readwrite")
    skey = ids()[0]
    lease = rc.acquire_lease("adder", skey, 60)
    try:
        waits: list[float] = []
        got = finishes(rc.wait_for_entries, "adder", skey, 1.5, lambda h, w: waits.append(w))
        assert got == {"value": []}, got  # returned with the lease still held (60 s): the deadline
        assert isinstance(rc.lease_holder("adder", skey), LeaseInfo)
        assert len(waits) >= 2 and waits == sorted(waits) and waits[-1] >= 1.5  # it polled up to it
        assert sum(rc.request_counts().values()) < 40  # polling with backoff, not a spin
    finally:
        lease.release()


def test_no_lease_no_wait(remote):
    rc = remote.open("read")
    waits: list = []
    assert rc.wait_for_entries("adder", ids()[0], 30, lambda h, w: waits.append(h)) == []
    assert waits == [] and sum(rc.request_counts().values()) == 3  # list, lease, list: no poll


@pytest.mark.parametrize("garbage", [b"not json", b'{"host": 1}'])
def test_unreadable_lease_object_expires_by_its_age(remote, garbage):
    from .helpers import raw_put

    # A long-lived view sees the garbage as held (a loaded machine may take over a second to get
    # from the put to the acquire: a 1 s view alone could already see it expired); a 1 s view
    # sees it expire once it is older than that, whatever the machine's load.
    skey = ids()[0]
    patient = remote.open("readwrite", lease_ttl=600.0)
    raw_put(patient, f"leases/adder/{skey}/0000000001.json", garbage)
    holder = patient.acquire_lease("adder", skey)
    assert isinstance(holder, LeaseInfo) and holder.host == "?"
    rc = remote.open("readwrite", lease_ttl=1.0)
    time.sleep(2.1)  # S3 last-modified has one-second resolution
    got = rc.acquire_lease("adder", skey)
    assert isinstance(got, Lease) and got.generation == 2
    got.release()


class _Between:
    """Runs ``act`` once, right after this client's first listing of a lease prefix returns and
    before it reads the newest object: the real interleaving of two hosts, on the real store."""

    def __init__(self, store, act):
        self._store, self._act = store, act

    def __getattr__(self, op: str):
        fn = getattr(self._store, op)
        if op != "list":
            return fn

        def listed(prefix: str, *a, **kw):
            out = fn(prefix, *a, **kw)
            if prefix.startswith("leases/") and self._act is not None:
                act, self._act = self._act, None
                act()
            return out

        return listed


def test_lease_renewed_while_read_is_still_held(remote):
    """The holder renews (creates gen+1, deletes gen) between another host's list and get: that
    host must see the renewed lease, not take a long-deleted generation 1 beside it."""
    a, c = remote.open("readwrite"), remote.open("readwrite")
    skey = ids()[0]
    held = a.acquire_lease("adder", skey, 60)
    assert isinstance(held, Lease) and held.renew() and held.generation == 2
    c.store = _Between(c.store, held.renew)
    seen = c.acquire_lease("adder", skey, 60)
    assert isinstance(seen, LeaseInfo), "a second host took a lease that was held"
    assert seen.token == held.info.token and seen.generation == held.generation == 3
    held.release()


def test_expired_lease_taken_by_one_of_two_racing_hosts(remote):
    """Two hosts find the same expired lease; one takes it over (creates gen+1, deletes gen)
    between the other's list and get: the other must see the new holder."""
    dead, b, c = (remote.open("readwrite") for _ in range(3))
    skey = ids()[0]
    gone = dead.acquire_lease("adder", skey, 1.0)
    assert isinstance(gone, Lease) and gone.renew(1.0) and gone.generation == 2
    time.sleep(1.2)  # expired; its holder never releases (as if killed)
    taken: list = []
    c.store = _Between(c.store, lambda: taken.append(b.acquire_lease("adder", skey, 60)))
    seen = c.acquire_lease("adder", skey, 60)
    assert len(taken) == 1 and isinstance(taken[0], Lease) and taken[0].generation == 3
    assert isinstance(seen, LeaseInfo), "two hosts hold the compile lease"
    assert seen.token == taken[0].info.token
    taken[0].release()


def test_a_create_whose_answer_was_lost_is_still_ours(remote):
    """A create that landed while its answer was lost (a retried PUT then meets its own first
    try as 'exists'): the lease object carries our token, so we hold it and do not wait on
    ourselves until it expires; another host sees it held."""
    from kernelcache.storage.remote import lease as lease_mod

    rc = remote.open("readwrite")
    skey = ids()[0]

    class AnswerLost:
        def __init__(self, store):
            self._store = store

        def __getattr__(self, op):
            return getattr(self._store, op)

        def put_if_absent(self, key, data):
            assert self._store.put_if_absent(key, data)  # the create really lands
            return False

    got = lease_mod.acquire(AnswerLost(rc.store), "adder", skey, 30)
    assert isinstance(got, Lease), got
    other = remote.open("readwrite").acquire_lease("adder", skey, 30)
    assert isinstance(other, LeaseInfo) and other.token == got.info.token
    got.release()
    assert isinstance(remote.open("readwrite").acquire_lease("adder", skey, 30), Lease)
