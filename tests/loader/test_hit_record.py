"""The packed hit record (kernelcache/entry/deprecord.py): a warm load reads it instead of manifest.json.

Each case is provoked on a real entry in a fresh process: an entry of an older version (no
record), a damaged record, a record of another manifest, a touched header (re-hashed once, then
trusted by its stat), and a warm load that parses no manifest at all.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from kernelcache.base.layout import Layout
from kernelcache.entry import deprecord
from kernelcache.host import anchors as anchors_mod

import kernelcache as kc
from tests.support import project_spec, spec_code

# Counts, in the child, the content hashes and the JSON parses of the manifest during one load.
PROBE = """
import json as _json
from kernelcache.host import toolchain as _tc
_n = {"hash": 0, "manifest_parses": 0}
_real_hash, _real_loads = _tc.content_hash, _json.loads
def _hash(p):
    _n["hash"] += 1
    return _real_hash(p)
def _loads(s, *a, **k):
    out = _real_loads(s, *a, **k)
    if isinstance(out, dict) and "entry_id" in out and "deps" in out:
        _n["manifest_parses"] += 1
    return out
_tc.content_hash, _json.loads = _hash, _loads
m = kc.load(spec)
print(m.add(1, 2), kc.stats()["hits"], _n["hash"], _n["manifest_parses"])
"""


def _entry_dir(kc_env) -> Path:
    (d,) = [p for p in Layout(kc_env.cache).kernel_dir("adder").glob("*/*") if p.is_dir()]
    return d


def _probe(kc_env, project) -> list[int]:
    return [int(x) for x in kc_env.run_py(spec_code(project) + PROBE).stdout.split()]


def test_warm_load_reads_the_record_not_the_manifest(kc_env, project):
    kc.load(project_spec(project))
    entry = _entry_dir(kc_env)
    assert (entry / deprecord.FILENAME).is_file()  # written with the manifest at publish
    kc_env.reset_counts()
    assert _probe(kc_env, project) == [3, 1, 0, 0]  # hit, nothing hashed, no manifest parsed
    assert kc_env.compiles() == 0


def test_entry_without_a_record_hits_and_gains_one(kc_env, project):
    """An entry of an older version: served from manifest.json, its record written on the way."""
    kc.load(project_spec(project))
    entry = _entry_dir(kc_env)
    (entry / deprecord.FILENAME).unlink()
    kc_env.reset_counts()
    assert _probe(kc_env, project)[:2] == [3, 1]
    assert deprecord.load(entry, "manifest.json") is not None
    assert _probe(kc_env, project) == [3, 1, 0, 0]
    assert kc_env.compiles() == 0


def test_damaged_record_is_ignored(kc_env, project):
    kc.load(project_spec(project))
    rec = _entry_dir(kc_env) / deprecord.FILENAME
    data = bytearray(rec.read_bytes())
    data[deprecord.HEADER_SIZE + 3] ^= 0xFF  # one flipped byte in the marshalled head
    rec.write_bytes(bytes(data))
    kc_env.reset_counts()
    assert _probe(kc_env, project)[:2] == [3, 1]
    assert _probe(kc_env, project) == [3, 1, 0, 0]  # rewritten whole
    rec.write_bytes(rec.read_bytes()[:100])  # truncated
    assert _probe(kc_env, project)[:2] == [3, 1]
    assert kc_env.compiles() == 0


def test_record_of_another_manifest_is_not_trusted(kc_env, project):
    """manifest.json replaced (here: its header's hash and stat changed): the old record no longer
    speaks for the entry; the manifest's own facts decide (a miss: the header's bytes differ)."""
    kc.load(project_spec(project))
    entry = _entry_dir(kc_env)
    data = json.loads((entry / "manifest.json").read_text())
    dep = next(d for d in data["deps"] if d["path"].endswith("kc_add.h"))
    dep["xxh3"], dep["stat"] = "0" * 32, [0, 0, 0, 0]
    tmp = entry / "manifest.json.tmp"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, entry / "manifest.json")
    kc_env.reset_counts()
    out = kc_env.run_py(spec_code(project) + "r = kc.load_with_result(spec)[1]; print(r.status, '|', r.reason)")
    status, reason = out.stdout.strip().split(" | ")
    assert status == "built" and "kc_add.h changed" in reason
    assert kc_env.compiles() == 1


def test_touched_header_is_hashed_once_then_trusted_by_its_new_stat(kc_env, project):
    kc.load(project_spec(project))
    future = time.time() + 3600
    os.utime(project / "include" / "kc_add.h", (future, future))
    kc_env.reset_counts()
    first = _probe(kc_env, project)
    assert first[:2] == [3, 1] and first[2] >= 1  # the touched header's bytes were compared
    assert _probe(kc_env, project) == [3, 1, 0, 0]  # its new stat is in the record now
    assert kc_env.compiles() == 0


def test_record_check_is_the_manifest_check(kc_env, project):
    """The packed check and the JSON check agree, case by case (hit, edited header, absent probe)."""
    from kernelcache.key import deps as key
    from kernelcache.storage.entry import Entry

    spec = project_spec(project)
    kc.load(spec)
    entry = Entry.open(_entry_dir(kc_env))
    anchors = anchors_mod.anchors_of(spec)
    m = entry.manifest

    def both():
        return entry.record.check(anchors).ok, key.check_deps(m.deps, m.absent, anchors).ok

    assert both() == (True, True)
    hdr = project / "include" / "kc_add.h"
    st = hdr.stat()
    hdr.write_text("#define KC_OFFSET 5\n")
    os.utime(hdr, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert both() == (False, False)
    if m.absent:
        hdr.write_text("#define KC_OFFSET 0\n")
        shadow = Path(key.resolve_anchor(m.absent[0], anchors))
        shadow.parent.mkdir(parents=True, exist_ok=True)
        shadow.write_text("\n")
        assert both() == (False, False)
