"""A damaged fleet entry heals (issue 19 #1), against SeaweedFS and a shared directory.

One bit of the entry's blob is flipped on the remote (same size: only the sha256 can tell).
Entry ids are stable across rebuilds, so before the fix every new host refused the entry and
compiled, forever: `push` answered "exists" as soon as the envelope existed. Now a publish
(push, or the upload after a build) checks the blobs of an existing entry and re-uploads the
damaged one, `remote verify --fix` does the same, and the refusing host says why on its normal
progress line.
"""
from __future__ import annotations

import pytest

from .helpers import raw_get, raw_put
from .hosts import Host, make_project


def _env(remote, mode, **extra):
    return remote.subprocess_env(**{"KERNELCACHE_REMOTE": remote.url, "KERNELCACHE_REMOTE_MODE": mode, **extra})


@pytest.fixture
def damaged(fleet_remote, tmp_path):
    """Host A built and published the tiny kernel; then one bit of its blob flipped on the remote."""
    project = make_project(tmp_path / "proj")
    a = Host("a", tmp_path / "host_a", _env(fleet_remote, "readwrite"))
    assert a.load(project)["status"] == "built" and a.events("remote_upload")
    rc = fleet_remote.open("read")
    ref = next(r for r in rc.all_entries() if r.name == "fleet_k")
    sha = rc.read_entry(ref).files["fleet_k.so"][0]
    data = bytearray(raw_get(rc, f"blobs/{sha}"))
    data[len(data) // 2] ^= 0x01
    raw_put(rc, f"blobs/{sha}", bytes(data))
    return fleet_remote, project, a


def _fresh_reader(remote, tmp_path, name: str) -> Host:
    return Host(name, tmp_path / f"host_{name}", _env(remote, "read"))


def test_refusal_is_on_the_progress_line_and_push_repairs(damaged, tmp_path):
    remote, project, a = damaged
    b = _fresh_reader(remote, tmp_path, "b")
    out, stderr = b.load_with_stderr(project, KERNELCACHE_LOG="")  # what a user sees by default
    assert out["status"] == "built"
    refused = [ln for ln in stderr.splitlines() if ln.startswith("[kernelcache] refused fleet_k entry")]
    assert len(refused) == 1 and "remote_corrupt" in refused[0] and remote.url in refused[0], stderr
    p = a.cli("--remote", remote.url, "--remote-mode", "readwrite", "push")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "repaired" in p.stdout, p.stdout
    c = _fresh_reader(remote, tmp_path, "c")
    assert c.load(project)["status"] == "remote" and c.compiles() == 0  # healed for every later host
    p = a.cli("--remote", remote.url, "remote", "verify")
    assert p.returncode == 0 and "0 bad entries" in p.stdout, p.stdout


def test_the_upload_after_a_build_repairs(damaged, tmp_path):
    """A readwrite host that refuses the entry builds it and its upload heals the remote. With
    the same toolchain as host A it builds the same entry id, which is where the damage used to
    stay forever ("exists")."""
    remote, project, a = damaged
    w = Host("w", tmp_path / "host_w", _env(remote, "readwrite"))
    w.cxx = a.cxx  # the same compiler binary: the same level-1 key, the same entry id
    assert w.load(project)["status"] == "built"
    assert {e.get("reason_code") for e in w.events("remote_miss")} == {"remote_corrupt"}
    assert [e["status"] for e in w.events("remote_repair")] in (["repaired"], ["replaced"]), w.events()
    c = _fresh_reader(remote, tmp_path, "c")
    assert c.load(project)["status"] == "remote" and c.compiles() == 0


def test_remote_verify_fix(damaged, tmp_path):
    remote, project, a = damaged
    p = a.cli("--remote", remote.url, "--remote-mode", "read", "remote", "verify", "--fix")  # refused in read mode
    assert p.returncode == 2 and "readwrite" in p.stderr
    p = a.cli("remote", "verify", "--fix", "--remote", remote.url, "--remote-mode", "readwrite")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "repaired: entries/fleet_k/" in p.stdout and "1 fixed" in p.stdout, p.stdout
    assert a.cli("--remote", remote.url, "remote", "verify").returncode == 0
    assert _fresh_reader(remote, tmp_path, "c").load(project)["status"] == "remote"


def test_remote_verify_fix_without_the_bytes_deletes_the_broken_envelope(damaged, tmp_path):
    """A host that does not hold the blob's bytes cannot repair it: it removes the envelope, so
    readers stop trying it, and the next build publishes the entry afresh."""
    remote, project, _ = damaged
    other = Host("o", tmp_path / "host_o", _env(remote, "readwrite"))
    p = other.cli("remote", "verify", "--fix")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "deleted: entries/fleet_k/" in p.stdout, p.stdout
    assert [r for r in remote.open("read").all_entries() if r.name == "fleet_k"] == []
    assert other.load(project)["status"] == "built" and other.events("remote_upload")
    assert _fresh_reader(remote, tmp_path, "c").load(project)["status"] == "remote"
