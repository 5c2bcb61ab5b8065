"""prune also empties quarantine/: by age (when the entry was quarantined) and under the size cap,
where quarantined entries (never loaded again) go before any live entry."""
from __future__ import annotations

import os
import time

import pytest
from kernelcache.base.settings import Settings
from kernelcache.entry import manifest
from kernelcache.entry.manifest import Manifest

from kernelcache.storage.entry import Entry
from kernelcache.storage.local import LocalStore

KEY = "e" * 64


@pytest.fixture
def store(tmp_path):
    return LocalStore(Settings.from_env({"KERNELCACHE_DIR": str(tmp_path / "cache")}))


def _entry(store: LocalStore, eid: str, size: int = 1000, name: str = "k"):
    tmp = store.new_tmp_dir(KEY)
    (tmp / "k.so").write_bytes(b"\x7fELF" + b"\0" * (size - 4))
    m = Manifest(name=name, key1=KEY, entry_id=eid, identity="i", so_name="k.so", so_sha256="0",
                 so_size=size, schemas={})
    manifest.write(tmp, m)
    dest, _ = store.publish(tmp, name, KEY, eid)
    return Entry(dest, m)


def _quarantined(store: LocalStore) -> list[str]:
    q = store.layout.quarantine
    return sorted(p.name.split(".")[0] for p in q.iterdir()) if q.exists() else []


def test_prune_by_age_removes_old_quarantined_entries(store):
    old = store.quarantine(_entry(store, "old"), "test: bad")
    store.quarantine(_entry(store, "new"), "test: bad")
    past = time.time() - 10 * 86400
    os.utime(old, (past, past))  # quarantined ten days ago
    evicted = store.prune(max_age_s=86400)
    assert [(i.area, i.entry_id) for i in evicted] == [("quarantine", "old")]
    assert _quarantined(store) == ["new"]


def test_size_cap_empties_quarantine_before_live_entries(store):
    live = _entry(store, "live")
    store.quarantine(_entry(store, "q1"), "bad")
    store.quarantine(_entry(store, "q2"), "bad")
    cap = sum(f.stat().st_size for f in live.path.iterdir()) + 10
    evicted = store.prune(max_bytes=cap)
    assert sorted(i.entry_id for i in evicted) == ["q1", "q2"]
    assert {i.area for i in evicted} == {"quarantine"}
    assert _quarantined(store) == []
    assert live.path.exists()


def test_cli_prune_reports_quarantined_evictions(store, tmp_path):
    import subprocess
    import sys

    store.quarantine(_entry(store, "qq"), "bad")
    env = {**os.environ, "KERNELCACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "kernelcache", "prune", "--max-size", "0"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "quarantine" in r.stdout and "qq" in r.stdout
    assert _quarantined(store) == []
