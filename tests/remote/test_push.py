"""`kernelcache push` / `kc.push` upload what the local cache holds and never compile (issue 19 #4).

Before: push rebuilt the shipped kernels (a 16 s compile) and answered "unknown kernel" for a user
kernel. Now names come from the cache's own records, each entry goes up under the source key
its manifest recorded at build time, and an entry built while the remote was down gets uploaded
by a later push.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .hosts import Host, make_project
from .remotes import REPO, clean_env

DROPIN = """
import sys
from kernelcache.tvm_ffi import load_inline
m = load_inline("dropin_k", cpp_sources="int64_t twice(int64_t x) { return 2 * x; }", functions=["twice"])
print("VALUE", m.twice(21))
"""


def test_push_uploads_a_user_kernel_from_the_cache_without_compiling(fleet_remote, tmp_path):
    project = make_project(tmp_path / "proj")
    a = Host("a", tmp_path / "a", fleet_remote.subprocess_env())
    assert a.load(project)["status"] == "built"  # no remote configured at build time
    compiles = a.compiles()
    manifest = json.loads(next((a.cache / "v1" / "entries" / "fleet_k").glob("*/*/manifest.json")).read_text())
    assert len(manifest["skey"]) == 64  # the source key a fetch looks under, recorded at build time
    a.log.unlink()
    p = a.cli("push", "--remote", fleet_remote.url, "--remote-mode", "readwrite")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "fleet_k" in p.stdout and "uploaded" in p.stdout, p.stdout
    assert a.compiles() == compiles and a.events("build_start") == []  # push never compiles
    assert [r.skey for r in fleet_remote.open("read").all_entries()] == [manifest["skey"]]
    p = a.cli("push", "fleet_k", "--json", "--remote", fleet_remote.url, "--remote-mode", "readwrite")
    assert [r["status"] for r in json.loads(p.stdout)] == ["exists"], p.stdout
    p = a.cli("push", "no_such_kernel", "--remote", fleet_remote.url, "--remote-mode", "readwrite")
    assert p.returncode == 2 and "unknown kernel 'no_such_kernel'" in p.stderr and "fleet_k" in p.stderr
    b = Host("b", tmp_path / "b", fleet_remote.subprocess_env(KERNELCACHE_REMOTE=fleet_remote.url))
    assert b.load(project)["status"] == "remote" and b.compiles() == 0


def test_an_entry_built_while_the_remote_was_down_is_uploaded_by_a_later_push(file_remote, tmp_path):
    share = file_remote.path
    share.rmdir()  # the share is not mounted: the remote is down for the build
    project = make_project(tmp_path / "proj")
    a = Host("a", tmp_path / "a", clean_env(KERNELCACHE_REMOTE=file_remote.url, KERNELCACHE_REMOTE_MODE="readwrite"))
    assert a.load(project)["status"] == "built"
    assert len(a.events("remote_down")) == 1 and a.events("remote_upload") == []
    share.mkdir()  # back
    r = subprocess.run([sys.executable, "-c", "import json, kernelcache as kc\n"
                        "print(json.dumps([r.as_dict() for r in kc.push()]))"],
                       env=a.env(KERNELCACHE_REMOTE=file_remote.url, KERNELCACHE_REMOTE_MODE="readwrite"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [(x["name"], x["status"]) for x in json.loads(r.stdout.splitlines()[-1])] == [("fleet_k", "uploaded")]
    b = Host("b", tmp_path / "b", clean_env(KERNELCACHE_REMOTE=file_remote.url))
    assert b.load(project)["status"] == "remote"


def test_push_of_a_dropin_kernel_and_of_a_damaged_local_entry(file_remote, tmp_path):
    a = Host("a", tmp_path / "a", clean_env())
    p = subprocess.run([sys.executable, "-c", DROPIN], env=a.env(), capture_output=True, text=True, timeout=300,
                       cwd=str(REPO))
    assert "VALUE 42" in p.stdout, p.stdout + p.stderr
    names = {Path(m).parts[-4] for m in map(str, (a.cache / "v1" / "entries").glob("*/*/*/manifest.json"))}
    assert "dropin_k" in names
    so = next((a.cache / "v1" / "entries" / "dropin_k").glob("*/*/*.so"))
    p = a.cli("push", "dropin_k", "--remote", file_remote.url, "--remote-mode", "readwrite")
    assert p.returncode == 0 and "uploaded" in p.stdout, p.stdout + p.stderr
    # a local binary that no longer matches its manifest is never spread
    so.chmod(0o644)
    data = bytearray(so.read_bytes())
    data[-1] ^= 1
    so.write_bytes(bytes(data))
    other = tmp_path / "share2"
    other.mkdir()
    p = a.cli("push", "dropin_k", "--json", "--remote", f"file://{other}", "--remote-mode", "readwrite")
    rows = json.loads(p.stdout)
    assert [r["status"] for r in rows] == ["skipped"] and "does not match its manifest" in rows[0]["reason"]
    assert not (other / "entries").exists()
