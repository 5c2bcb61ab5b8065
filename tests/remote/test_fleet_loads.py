"""Fleet cache through the loader: hosts (processes with their own caches) share built kernels.

Acceptance of the fleet-cache issue, each fault provoked for real against the real servers of
conftest.py (SeaweedFS, and a shared directory for file://): fresh hosts without a compiler
load both shipped kernels from the remote; tampered, trimmed, foreign or unsigned entries are
refused before any dlopen (or, for another binary's schema, before any call) and rebuilt
locally; outages fall back to a local build within seconds.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from .helpers import raw_delete, raw_get, raw_put
from .hosts import Host, make_project, other_checkout, without_compilers_path

def _rw(remote, **extra):
    return remote.subprocess_env(**{"KERNELCACHE_REMOTE": remote.url, "KERNELCACHE_REMOTE_MODE": "readwrite", **extra})


def _ro(remote, **extra):
    return remote.subprocess_env(**{"KERNELCACHE_REMOTE": remote.url, "KERNELCACHE_REMOTE_MODE": "read", **extra})


# -- 1. a fresh host without a compiler loads both shipped kernels from the remote ------------------
def test_fresh_host_loads_both_shipped_kernels_from_the_remote(fleet_remote, tmp_path):
    a = Host("a", tmp_path / "host_a", _rw(fleet_remote, KERNELCACHE_CUDA_ARCH="9.0",
                                            CUDA_HOME=os.environ.get("CUDA_HOME", "/usr/local/cuda")))
    out = a.cli("warm", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert {r["name"]: r["status"] for r in json.loads(out.stdout)} == {
        "ngram_corpus": "built", "tree_speculative_sampling": "built"}
    assert len(a.events("remote_upload")) == 2
    checkout = other_checkout(tmp_path / "checkout_b")
    b_env = _ro(fleet_remote, KERNELCACHE_CUDA_ARCH="9.0", PATH=without_compilers_path(), PYTHONPATH=str(checkout))
    b_env.pop("CUDA_HOME", None)
    b = Host("b", tmp_path / "host_b", b_env)
    before = fleet_remote.server.write_requests() if fleet_remote.server else 0
    out = b.cli("warm", "--json", CXX="/bin/false")
    assert out.returncode == 0, out.stdout + out.stderr
    results = {r["name"]: r for r in json.loads(out.stdout)}
    assert {n: r["status"] for n, r in results.items()} == {"ngram_corpus": "remote",
                                                           "tree_speculative_sampling": "remote"}, results
    assert all(str(checkout) not in r["so_path"] and str(b.cache) in r["so_path"] for r in results.values())
    assert b.events("build_start") == [] and len(b.events("remote_hit")) == 2  # 0 compiles fleet-wide on B
    if fleet_remote.server:
        assert fleet_remote.server.write_requests() == before  # read mode wrote nothing
    # the next process on B is a local hit: no remote request at all
    b.log.unlink()
    counts = fleet_remote.server.request_counts() if fleet_remote.server else None
    out = b.cli("warm", "--json", CXX="/bin/false")
    assert {r["name"]: r["status"] for r in json.loads(out.stdout)} == {
        "ngram_corpus": "hit", "tree_speculative_sampling": "hit"}
    assert [e for e in b.events() if e["event"].startswith("remote")] == []
    if counts is not None:
        assert fleet_remote.server.request_counts() == counts


# -- 2. what a reader refuses --------------------------------------------------------------------
@pytest.fixture
def published(fleet_remote, tmp_path):
    """Host A built the tiny kernel and published it; returns (remote, project, host A, blob key)."""
    project = make_project(tmp_path / "proj")
    a = Host("a", tmp_path / "host_a", _rw(fleet_remote))
    assert a.load(project)["status"] == "built"
    rc = fleet_remote.open("read")
    refs = rc.list_entries("fleet_k", next(iter(_skeys(rc))))
    entry = rc.read_entry(refs[0])
    blob = "blobs/" + next(sha for name, (sha, _) in entry.files.items() if name.endswith(".so"))
    return fleet_remote, project, a, blob, refs[0]


def _skeys(rc):
    return {r.skey for r in rc.all_entries() if r.name == "fleet_k"}


@pytest.mark.parametrize("damage", ["other_bytes", "truncated", "deleted"])
def test_damaged_blob_is_refused_and_built_locally(published, tmp_path, damage):
    remote, project, _, blob, _ = published
    rc = remote.open("readwrite")
    data = raw_get(rc, blob)
    if damage == "other_bytes":
        raw_put(rc, blob, bytes(b ^ 0x5A for b in data))
    elif damage == "truncated":
        raw_put(rc, blob, data[: len(data) // 2])
    else:
        raw_delete(rc, blob)
    b = Host("b", tmp_path / "host_b", _ro(remote))
    out = b.load(project)
    assert out["status"] == "built" and out["value"] == 5
    codes = {e.get("reason_code") for e in b.events("remote_miss")}
    assert codes & {"remote_corrupt", "remote_missing"}, b.events("remote_miss")
    assert not list((b.cache / "v1").glob("fetched/*/*/*"))  # nothing half-fetched was published
    nb = Host("nb", tmp_path / "host_nb", _ro(remote, KERNELCACHE_NO_BUILD="1"))
    out = nb.load(project)
    assert out["error"] == "CacheMissError" and f"remote {remote.url}" in out["message"], out["message"]
    assert ("remote_missing" if damage == "deleted" else "remote_corrupt") in out["message"], out["message"]


def test_entry_moved_under_another_key_is_refused(published, tmp_path):
    remote, project, _, _, ref = published
    rc = remote.open("readwrite")
    body = json.loads(raw_get(rc, ref.key))
    other = "0" * 64
    for where in ("envelope", "manifest"):  # the envelope, or the manifest inside it, is another key's
        forged = json.loads(json.dumps(body))
        (forged if where == "envelope" else forged["manifest"])["skey"] = other
        raw_put(rc, ref.key, json.dumps(forged).encode())
        b = Host(f"b_{where}", tmp_path / f"host_b_{where}", _ro(remote))
        out = b.load(project)
        assert out["status"] == "built", (where, out)
        assert {e.get("reason_code") for e in b.events("remote_miss")} == {"remote_refused"}, where


def test_binary_with_another_schema_is_never_called(published, tmp_path):
    """The remote's blob and every checksum are replaced by a binary of the *old* source
    (add takes three arguments there): only the exported schema / identity can tell."""
    remote, project, _, blob, ref = published
    old = make_project(tmp_path / "old")
    (old / "add.cc").write_text((old / "add.cc").read_text().replace(
        "int64_t add(int64_t a, int64_t b) { return a + b + FLEET_OFFSET; }",
        "int64_t add(int64_t a, int64_t b, int64_t c) { return a + b + c; }"))
    builder = Host("old", tmp_path / "host_old", _ro(remote, KERNELCACHE_REMOTE_MODE="off"))
    code = builder.load_code(old).replace('{"add": "Callable[[int, int], int]"}', '{"add": None}').replace(
        '"value": mod.add(2, 3), ', "")
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", code], env=builder.env(), check=True, capture_output=True, timeout=180)
    so = next((builder.cache / "v1" / "entries").glob("fleet_k/*/*/fleet_k.so")).read_bytes()
    import hashlib

    rc = remote.open("readwrite")
    body = json.loads(raw_get(rc, ref.key))
    sha = hashlib.sha256(so).hexdigest()
    raw_put(rc, f"blobs/{sha}", so)
    body["files"]["fleet_k.so"] = {"sha256": sha, "size": len(so)}
    body["manifest"]["so_sha256"], body["manifest"]["so_size"] = sha, len(so)
    raw_put(rc, ref.key, json.dumps(body).encode())
    b = Host("b", tmp_path / "host_b", _ro(remote))
    out = b.load(project)
    assert out["status"] == "built" and out["value"] == 5  # rebuilt locally, the stale binary never ran
    refusals = " ".join(e.get("reason", "") for e in b.events("remote_miss"))
    assert "identity" in refusals or "schema" in refusals, b.events("remote_miss")


def test_signatures_are_required_when_verify_keys_are_set(fleet_remote, tmp_path):
    from kernelcache.storage.remote.ops import keygen

    keys = tmp_path / "keys"
    keys.mkdir()
    keygen(keys / "ci.pem", keys / "ci.pub")
    keygen(keys / "rogue.pem", keys / "rogue.pub")
    project = make_project(tmp_path / "proj")
    unsigned = Host("u", tmp_path / "host_u", _rw(fleet_remote))
    assert unsigned.load(project)["status"] == "built"  # publishes an unsigned entry
    reader = Host("r", tmp_path / "host_r", _ro(fleet_remote, KERNELCACHE_REMOTE_VERIFY_KEYS=str(keys / "ci.pub")))
    out = reader.load(project)
    assert out["status"] == "built"
    assert {e.get("reason_code") for e in reader.events("remote_miss")} == {"remote_refused"}
    # an entry signed by an unknown key is refused the same way; one signed by trusted CI loads
    (project / "include" / "fleet_k.h").write_text("#define FLEET_OFFSET 0 /* v2 */\n")  # a new header version
    rogue = Host("x", tmp_path / "host_x", _rw(fleet_remote, KERNELCACHE_REMOTE_SIGNING_KEY=str(keys / "rogue.pem")))
    assert rogue.load(project)["status"] == "built" and rogue.events("remote_upload")
    reader1 = Host("r1", tmp_path / "host_r1", _ro(fleet_remote, KERNELCACHE_REMOTE_VERIFY_KEYS=str(keys / "ci.pub")))
    assert reader1.load(project)["status"] == "built"
    assert {e.get("reason_code") for e in reader1.events("remote_miss")} == {"remote_refused"}
    ci = Host("ci", tmp_path / "host_ci", _rw(fleet_remote, KERNELCACHE_REMOTE_SIGNING_KEY=str(keys / "ci.pem")))
    (project / "include" / "fleet_k.h").write_text("#define FLEET_OFFSET 0 /* v3 */\n")  # a new header version
    assert ci.load(project)["status"] == "built"
    assert ci.events("remote_upload"), ci.events()
    reader2 = Host("r2", tmp_path / "host_r2", _ro(fleet_remote, KERNELCACHE_REMOTE_VERIFY_KEYS=str(keys / "ci.pub")))
    out = reader2.load(project)
    assert out["status"] == "remote", reader2.events("remote_miss")


# -- 4. outages --------------------------------------------------------------------------------
def test_unreachable_endpoint_builds_locally_with_one_warning(tmp_path):
    from .servers import unused_endpoint

    project = make_project(tmp_path / "proj")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KERNELCACHE_"))}
    env.update({"AWS_ENDPOINT_URL": unused_endpoint(), "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y",
                "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true", "KERNELCACHE_REMOTE": "s3://kcfleet/nowhere",
                "KERNELCACHE_REMOTE_MODE": "readwrite",
                "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    h = Host("h", tmp_path / "host", env)
    out = h.load(project, timeout=120)  # the timeout only stops a hung load
    assert out["status"] == "built"
    assert len(h.events("remote_down")) == 1 and len(h.events("build_done")) == 1
    assert {e.get("reason_code") for e in h.events("remote_error")} == {"remote_unavailable"}


def test_wrong_credentials_build_locally(seaweed, prefix, tmp_path, make_settings):
    from .remotes import Remote

    remote = Remote("seaweed", seaweed.url(prefix), seaweed.bad_env(), seaweed, None, make_settings)
    project = make_project(tmp_path / "proj")
    h = Host("h", tmp_path / "host", _rw(remote))
    out = h.load(project)
    assert out["status"] == "built" and len(h.events("remote_down")) == 1
    assert h.events("remote_upload") == []


def test_server_killed_before_the_download_builds_locally(seaweed_private, prefix, tmp_path, make_settings):
    from .remotes import Remote

    remote = Remote("seaweed", seaweed_private.url(prefix), seaweed_private.env, seaweed_private, None, make_settings)
    project = make_project(tmp_path / "proj")
    assert Host("a", tmp_path / "host_a", _rw(remote)).load(project)["status"] == "built"
    seaweed_private.kill()
    b = Host("b", tmp_path / "host_b", _ro(remote))
    out = b.load(project, timeout=120)  # the timeout only stops a hung load
    assert out["status"] == "built"
    assert len(b.events("remote_down")) == 1 and len(b.events("remote_error")) == 1  # one failure, then down


# -- 5. read mode writes nothing; readwrite never overwrites -------------------------------------
def test_read_mode_writes_nothing_and_readwrite_never_overwrites(seaweed, prefix, tmp_path, make_settings):
    from .remotes import Remote

    remote = Remote("seaweed", seaweed.url(prefix), seaweed.env, seaweed, None, make_settings)
    project = make_project(tmp_path / "proj")
    w0 = seaweed.write_requests()
    r = Host("r", tmp_path / "host_r", _ro(remote))
    assert r.load(project)["status"] == "built"
    assert seaweed.write_requests() == w0  # a miss in read mode uploads nothing
    a = Host("a", tmp_path / "host_a", _rw(remote))
    assert a.load(project)["status"] == "built" and a.events("remote_upload")
    rc = remote.open("read")
    ref = rc.list_entries("fleet_k", next(iter(_skeys(rc))))[0]
    first = raw_get(rc, ref.key)
    c = Host("c", tmp_path / "host_c", _rw(remote, KERNELCACHE_REMOTE_MODE="off"))
    c.cxx = a.cxx  # the same toolchain as host A: the same entry id
    assert c.load(project)["status"] == "built"  # the same entry built on a third host ...
    w1 = seaweed.write_requests()
    out = c.load(project, KERNELCACHE_REMOTE=remote.url, KERNELCACHE_REMOTE_MODE="readwrite", KERNELCACHE_REBUILD="1")
    assert out["status"] == "built"
    assert c.events("remote_upload_exists") and raw_get(rc, ref.key) == first  # ... never overwrites
    assert seaweed.write_requests() == w1  # not even one PUT: the envelope existed


# -- 3. eight cold hosts, one compile; the lease holder killed ----------------------------------
def test_eight_cold_hosts_compile_once(fleet_remote, tmp_path):
    project = make_project(tmp_path / "proj")
    hosts = [Host(f"h{i}", tmp_path / f"host{i}", _rw(fleet_remote, KC_SLOW_COMPILE="2")) for i in range(8)]
    go = tmp_path / "go"
    before = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
    procs = [h.start(project, before=before) for h in hosts]
    time.sleep(1.0)
    go.touch()
    from .hosts import finish

    outs = [finish(p, 300) for p in procs]
    assert sum(h.compiles() for h in hosts) == 1, [o.get("status") for o in outs]
    assert all(o["value"] == 5 for o in outs)
    assert len({o["sha"] for o in outs}) == 1  # every host loads the same bytes
    assert sorted(o["status"] for o in outs) == ["built"] + ["remote"] * 7
    assert sum(len(h.events("remote_lease_wait")) for h in hosts) >= 1


def test_killed_lease_holder_is_taken_over_after_expiry(file_remote, tmp_path, make_settings):
    from .remotes import Remote

    remote = Remote("file", file_remote.url, {}, None, file_remote.path, make_settings)
    project = make_project(tmp_path / "proj")
    ttl = {"KERNELCACHE_REMOTE_LEASE_TTL": "4"}
    holder = Host("holder", tmp_path / "holder", _rw(remote, KC_SLOW_COMPILE="60", **ttl))
    p = holder.start(project)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(file_remote.path.rglob("leases/*/*/*")):
        time.sleep(0.05)
    assert list(file_remote.path.rglob("leases/*/*/*")), "the holder never took the lease"
    time.sleep(0.5)
    p.kill()
    p.communicate(timeout=30)
    others = [Host(f"w{i}", tmp_path / f"w{i}", _rw(remote, **ttl)) for i in range(2)]
    procs = [h.start(project) for h in others]
    from .hosts import finish

    outs = [finish(q, 240) for q in procs]
    assert all(o["value"] == 5 for o in outs)
    assert sum(h.compiles() for h in others) == 1
    assert any(h.events("remote_lease_wait") for h in others)  # they waited for the dead holder first


def test_a_long_build_keeps_its_lease(file_remote, tmp_path, make_settings):
    """A compile longer than the lease TTL renews the lease: the other host waits, never compiles."""
    from .remotes import Remote
    from .hosts import finish

    remote = Remote("file", file_remote.url, {}, None, file_remote.path, make_settings)
    project = make_project(tmp_path / "proj")
    # the compile outlasts three TTLs; a renew every TTL/3 leaves 4 s for a stall on a loaded host
    ttl = {"KERNELCACHE_REMOTE_LEASE_TTL": "6"}
    builder = Host("builder", tmp_path / "builder", _rw(remote, KC_SLOW_COMPILE="20", **ttl))
    p = builder.start(project)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(file_remote.path.rglob("leases/*/*/*")):
        time.sleep(0.05)
    waiter = Host("waiter", tmp_path / "waiter", _rw(remote, **ttl))
    out = waiter.load(project)
    assert finish(p, 120)["status"] == "built" and p.returncode == 0
    assert out["status"] == "remote" and waiter.compiles() == 0, (out, waiter.events("remote_lease_wait"))
    assert builder.compiles() == 1


def test_a_host_that_wins_the_lease_after_another_published_lists_again(fleet_remote, tmp_path):
    """Host A lists (nothing), then host B builds, publishes and releases its lease before A asks
    for the lease: A wins it, and must list once more and load B's entry, not compile it again."""
    project = make_project(tmp_path / "proj")
    b = Host("b", tmp_path / "host_b", _rw(fleet_remote))
    a = Host("a", tmp_path / "host_a", _rw(fleet_remote))
    b_cmd = [__import__("sys").executable, "-c", b.load_code(project)]
    between = f"""
        import json, subprocess
        from kernelcache.storage.remote.client import RemoteCache
        _listed = []
        _orig = RemoteCache.list_entries
        def _list_then_b_publishes(self, name, skey):
            refs = _orig(self, name, skey)
            _listed.append(len(refs))
            if len(_listed) == 1:  # between A's listing and A's lease: B builds, publishes, releases
                p = subprocess.run({b_cmd!r}, env=json.loads({json.dumps(b.env())!r}), capture_output=True,
                                   text=True, timeout=180, stdin=subprocess.DEVNULL)
                assert "RESULT" in p.stdout, p.stderr
            return refs
        RemoteCache.list_entries = _list_then_b_publishes
    """
    out = a.load(project, before=between)
    assert b.compiles() == 1 and len(b.events("remote_upload")) == 1
    assert out["status"] == "remote" and a.compiles() == 0, (out, a.events())
    assert out["value"] == 5 and len(a.events("remote_hit")) == 1
