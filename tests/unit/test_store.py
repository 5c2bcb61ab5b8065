"""storage/local.py: lookup order that does not grow with the cache, atomic publish, LRU prune."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from kernelcache.base.settings import Settings
from kernelcache.entry import manifest
from kernelcache.entry.manifest import Manifest

from kernelcache.storage.local import LocalStore

KEY = "f" * 64


@pytest.fixture
def store(tmp_path):
    return LocalStore(Settings.from_env({"KERNELCACHE_DIR": str(tmp_path / "cache")}))


def _entry(store: LocalStore, eid: str, used_at: float | None = None, name: str = "k", size: int = 10):
    tmp = store.new_tmp_dir(KEY)
    (tmp / "k.so").write_bytes(b"\x7fELF" + b"\0" * (size - 4))
    manifest.write(tmp, Manifest(name=name, key1=KEY, entry_id=eid, identity="i", so_name="k.so", so_sha256="0",
                                 so_size=size, schemas={}))
    dest, won = store.publish(tmp, name, KEY, eid)
    assert won
    if used_at is not None:
        (dest / "used").touch()
        os.utime(dest / "used", (used_at, used_at))
    return dest


class _Reads(list):
    """Entries a lookup read (each through its packed hit record) and manifests it parsed."""

    parses: list


def _counting_reads(monkeypatch) -> _Reads:
    from kernelcache.entry import deprecord

    from kernelcache.storage import entry

    calls = _Reads()
    calls.parses = []
    real, real_read = deprecord.load, entry.read_manifest
    monkeypatch.setattr(deprecord, "load", lambda p, name: calls.append(p) or real(p, name))
    monkeypatch.setattr(entry, "read_manifest", lambda p: calls.parses.append(p) or real_read(p))
    return calls


def test_candidates_newest_first_and_lazy(store, monkeypatch):
    now = time.time()
    for i in range(5):
        _entry(store, f"e{i}", used_at=now - 100 * (5 - i))  # e4 is the most recently used
    calls = _counting_reads(monkeypatch)
    it = store.candidates("k", KEY)
    assert next(it).entry_id == "e4"
    assert len(calls) == 1  # stopping at the first valid candidate reads one entry
    assert [e.entry_id for e in it] == ["e3", "e2", "e1", "e0"]
    assert calls.parses == []  # through hit records: no manifest.json parsed


def test_last_hit_is_tried_first_among_300_siblings(store, monkeypatch):
    now = time.time()
    paths = [_entry(store, f"e{i:03d}", used_at=now - i) for i in range(300)]
    from kernelcache.storage.entry import Entry

    store.remember_hit(Entry(paths[150], manifest.read(paths[150])))
    calls = _counting_reads(monkeypatch)
    assert next(store.candidates("k", KEY)).entry_id == "e150"
    assert calls == [paths[150]] and calls.parses == []


def test_remember_hit_writes_only_on_change(store):
    from kernelcache.storage.entry import Entry

    p = _entry(store, "e1")
    e = Entry(p, manifest.read(p))
    store.remember_hit(e)
    hint = p.parent / ".recent"
    before = hint.stat().st_mtime_ns
    time.sleep(0.01)
    store.remember_hit(e)
    assert hint.stat().st_mtime_ns == before and hint.read_text() == "e1"


def test_infos_read_no_manifest(store, monkeypatch):
    for i in range(20):
        _entry(store, f"e{i}", name=f"k{i % 3}")
    calls = _counting_reads(monkeypatch)
    infos = store.infos()
    assert len(infos) == 20 and calls == []
    assert {i.name for i in infos} == {"k0", "k1", "k2"} and all(i.size > 10 for i in infos)


def test_publish_race_loser_uses_the_winner(store):
    _entry(store, "same")
    tmp = store.new_tmp_dir(KEY)
    (tmp / "k.so").write_bytes(b"\x7fELF")
    manifest.write(tmp, Manifest(name="k", key1=KEY, entry_id="same", identity="j", so_name="k.so", so_sha256="0",
                                 so_size=4, schemas={}))
    dest, won = store.publish(tmp, "k", KEY, "same")
    assert not won and dest == store.key_dir("k", KEY) / "same" and not tmp.exists()
    assert manifest.read(dest).identity == "i"  # the winner's entry, untouched


def test_prune_evicts_least_recently_used_first(store):
    now = time.time()
    old = _entry(store, "old", used_at=now - 90 * 86400, size=1000)
    mid = _entry(store, "mid", used_at=now - 3600, size=1000)
    new = _entry(store, "new", used_at=now, size=1000)
    evicted = store.prune(max_age_s=30 * 86400)
    assert [i.entry_id for i in evicted] == ["old"] and not old.exists()
    total = sum(i.size for i in store.infos())
    evicted = store.prune(max_bytes=total - 1)
    assert [i.entry_id for i in evicted] == ["mid"] and new.exists() and not mid.exists()


def test_quarantine_moves_aside_with_reason(store):
    from kernelcache.storage.entry import Entry

    p = _entry(store, "bad")
    q = store.quarantine(Entry(p, manifest.read(p)), "sha256 differs")
    assert not p.exists() and (q / "QUARANTINE_REASON").read_text() == "sha256 differs\n"


def test_sweep_removes_dirs_of_dead_builders_only(store):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    base = store.root / "tmp"
    base.mkdir(parents=True, exist_ok=True)
    gone = base / f"abc.{socket.gethostname()}.{dead}.x1"
    alive = base / f"abc.{socket.gethostname()}.{os.getpid()}.x2"
    other_host = base / f"abc.elsewhere.{dead}.x3"
    for d in (gone, alive, other_host):
        d.mkdir()
    assert store.sweep_tmp() == 1
    assert not gone.exists() and alive.exists() and other_host.exists()


def test_prune_by_age_also_ages_out_dropin_sources(store):
    old = store.root / "inline" / "k" / "aaaa"
    new = store.root / "inline" / "k" / "bbbb"
    out = store.root / "dropin" / "cccc"
    for d in (old, new, out):
        d.mkdir(parents=True)
        (d / "main.cpp").write_text("int x;\n")
    past = time.time() - 90 * 86400
    os.utime(old, (past, past))
    os.utime(out, (past, past))
    store.prune(max_age_s=30 * 86400)
    assert not old.exists() and not out.exists() and new.exists()


def test_prune_drops_recall_memos_whose_entry_is_gone(store):
    from kernelcache.base.warm_facts import RECALL_FORMAT
    from kernelcache.base.warm_facts import memo_path
    from kernelcache.lookup.recall_write import _publish

    live = _entry(store, "live", used_at=time.time())
    gone = _entry(store, "gone", used_at=time.time() - 90 * 86400)

    def memo(edir) -> tuple:
        return (RECALL_FORMAT, "k", edir.name, str(edir), str(edir / "k.so"), "lazy", b"", b"", b"", None, None, "/root", "tvm_ffi")

    base = str(store.root.parent)
    _publish(memo_path("a" * 40, base), memo(live))
    _publish(memo_path("b" * 40, base), memo(gone))
    damaged = store.root / "recall" / ("c" * 40)
    damaged.write_bytes(b"not a memo")
    store.prune(max_age_s=30 * 86400)
    assert not gone.exists() and live.exists()
    assert sorted(p.name for p in (store.root / "recall").iterdir()) == ["a" * 40]
