"""``file://`` on a temp directory, with processes standing in for hosts: racing publishers
(exactly one wins, via os.link), temp files never visible, trimming by age."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kernelcache.base.errors import KernelCacheError

from kernelcache.storage.remote.client import blob_key, entry_key
from kernelcache.storage.remote.ops import remote_trim

from .helpers import ids, make_files

PUBLISHER = r"""
import sys, time, os, json
from pathlib import Path
from kernelcache.base.settings import RemoteSettings, Settings
from kernelcache.storage.remote import open_remote
url, skey, eid, start, tag, work = sys.argv[1:7]
work = Path(work); work.mkdir(parents=True)
so = work / "kernel.so"; so.write_bytes(os.urandom(300_000) + tag.encode())
s = Settings(cache_dir=work / "c", lock_dir=work / "l", remote=RemoteSettings(url, "readwrite"))
rc = open_remote(s)
while time.time() < float(start):
    time.sleep(0.001)
won = rc.publish("adder", skey, eid, {"tag": tag}, {"kernel.so": so}) == "uploaded"
print(json.dumps({"tag": tag, "won": won}))
"""


def _hosts_publish(url: str, tmp_path: Path, n: int, skey: str, eid: str) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELCACHE_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
    start = time.time() + 2.0  # let every interpreter start, then go at once
    procs = [subprocess.Popen([sys.executable, "-c", PUBLISHER, url, skey, eid, str(start), f"host{i}",
                               str(tmp_path / f"host{i}")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(n)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=60)
        assert p.returncode == 0, stderr
        out.append(json.loads(stdout))
    return out


@pytest.mark.parametrize("n", [2, 4])
def test_racing_hosts_exactly_one_wins(file_remote, tmp_path, n):
    from kernelcache.base.settings import RemoteSettings, Settings

    from kernelcache.storage.remote import open_remote

    skey, eid = ids()
    results = _hosts_publish(file_remote.url, tmp_path, n, skey, eid)
    winners = [r["tag"] for r in results if r["won"]]
    assert len(winners) == 1, results
    rc = open_remote(Settings(cache_dir=tmp_path / "c", lock_dir=tmp_path / "l",
                              remote=RemoteSettings(file_remote.url, "read")))
    entry = rc.read_entry(rc.list_entries("adder", skey)[0])
    assert entry.manifest == {"tag": winners[0]}
    rc.fetch_files(entry, tmp_path / "fetched")
    assert (tmp_path / "fetched" / "kernel.so").read_bytes() == (tmp_path / winners[0] / "kernel.so").read_bytes()
    leftovers = [p for p in file_remote.path.rglob("*") if p.name.startswith(".tmp-")]
    assert leftovers == []


def test_temp_files_of_a_dead_writer_are_invisible(file_remote, make_settings, tmp_path):
    from kernelcache.storage.remote import open_remote

    rc = open_remote(make_settings(file_remote.url, "readwrite"))
    skey, eid = ids()
    d = file_remote.path / "entries" / "adder" / skey
    d.mkdir(parents=True)
    (d / f".tmp-deadhost-1-abc{eid}.json").write_text("{}")  # killed between write and link
    assert rc.list_entries("adder", skey) == []
    assert rc.publish("adder", skey, eid, {"e": 1}, make_files(tmp_path / "src"))
    assert [r.entry_id for r in rc.list_entries("adder", skey)] == [eid]


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_trim_by_age(file_remote, make_settings, tmp_path):
    from kernelcache.storage.remote import open_remote

    rc = open_remote(make_settings(file_remote.url, "readwrite"))
    old_skey, old_eid = ids()
    new_skey, new_eid = ids()
    shared = make_files(tmp_path / "shared")
    assert rc.publish("adder", old_skey, old_eid, {"e": "old"}, shared)
    assert rc.publish("adder", new_skey, new_eid, {"e": "new"}, {"kernel.so": shared["kernel.so"]})
    old_only = make_files(tmp_path / "old-only")
    assert rc.publish("adder", ids()[0], ids()[1], {"e": "old2"}, old_only)
    day = 86400.0
    root = file_remote.path
    for p in (root / "entries").rglob("*.json"):
        if json.loads(p.read_text())["manifest"]["e"] != "new":
            _age(p, 40 * day)
    for p in (root / "blobs").iterdir():
        _age(p, 40 * day)
    expired = rc.acquire_lease("adder", ids()[0], 0.01)
    live = rc.acquire_lease("adder", ids()[0], 600)
    stale_tmp = root / "blobs" / ".tmp-deadhost-9-xyz"
    stale_tmp.write_bytes(b"partial")
    _age(stale_tmp, 2 * 3600)
    time.sleep(0.05)

    removed = remote_trim(rc, 30 * day)
    assert entry_key("adder", old_skey, old_eid) in removed
    shared_sha = rc.read_entry(rc.list_entries("adder", new_skey)[0]).files["kernel.so"][0]
    assert blob_key(shared_sha) not in removed  # still referenced by the new entry
    assert (root / "blobs" / shared_sha).exists()
    assert (root / "blobs" / ".tmp-deadhost-9-xyz").exists() is False
    assert expired.key in removed and live.key not in removed
    assert [r.entry_id for r in rc.all_entries()] == [new_eid]
    assert not (root / "entries" / "adder" / old_skey).exists()  # empty dirs tidied
    reader = open_remote(make_settings(file_remote.url, "read"))
    reader.fetch_files(reader.read_entry(reader.list_entries("adder", new_skey)[0]), tmp_path / "ok")
    live.release()


def test_trim_keeps_young_unreferenced_blobs(file_remote, make_settings, tmp_path):
    """A writer between its blob uploads and its envelope must not lose its blobs to a trim."""
    from kernelcache.storage.remote import open_remote

    rc = open_remote(make_settings(file_remote.url, "readwrite"))
    f = make_files(tmp_path / "f")
    from .helpers import sha256

    rc.store.put_file(blob_key(sha256(f["kernel.so"])), f["kernel.so"])
    assert remote_trim(rc, 30 * 86400) == []


def test_a_reader_racing_a_trim_gets_a_miss(file_remote, make_settings, tmp_path):
    """A reader listed (and read the envelope) before the trim: both later steps are misses."""
    from kernelcache.storage.remote import RemoteMissing, open_remote

    rc = open_remote(make_settings(file_remote.url, "readwrite"))
    skey, eid = ids()
    assert rc.publish("adder", skey, eid, {"e": 1}, make_files(tmp_path / "src"))
    reader = open_remote(make_settings(file_remote.url, "read"))
    ref = reader.list_entries("adder", skey)[0]
    entry = reader.read_entry(ref)
    for p in file_remote.path.rglob("*"):
        if p.is_file():
            _age(p, 100 * 86400)
    removed = remote_trim(rc, 30 * 86400)
    assert ref.key in removed and len(removed) == 3  # the envelope and both blobs
    with pytest.raises(RemoteMissing):
        reader.read_entry(ref)
    with pytest.raises(RemoteMissing):
        reader.fetch_files(entry, tmp_path / "staging")
    assert reader.down_reason is None and list((tmp_path / "staging").iterdir()) == []


def test_trim_refuses_object_stores(make_settings):
    pytest.importorskip("obstore")
    from kernelcache.storage.remote import open_remote

    rc = open_remote(make_settings("s3://bucket/prefix", "readwrite"),
                     environ={"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "x",
                              "AWS_SECRET_ACCESS_KEY": "y", "AWS_REGION": "us-east-1"})
    with pytest.raises(KernelCacheError, match="lifecycle"):
        remote_trim(rc, 86400)
