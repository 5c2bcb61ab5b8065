"""`kernelcache push`, `kernelcache remote ls|verify|trim|keygen` and doctor's reachability line.

Issue 19: trim deletes nothing without readwrite and says what it deletes (#2); the global flags
work before and after the subcommand (#10); a remote outage is printed once, and doctor names the
remote once and fails on a configured but unreachable remote (#11).
"""
from __future__ import annotations

import json
import os
import time

from .hosts import Host, make_project
from .remotes import clean_env
from .servers import unused_endpoint


def _published_and_aged(file_remote, tmp_path) -> Host:
    """A share holding one published entry, every file of it 40 days old."""
    a = Host("a", tmp_path / "a", clean_env())
    assert a.load(make_project(tmp_path / "proj"), KERNELCACHE_REMOTE=file_remote.url,
                  KERNELCACHE_REMOTE_MODE="readwrite")["status"] == "built"
    old = time.time() - 40 * 86400
    for f in file_remote.path.rglob("*"):
        if f.is_file():
            os.utime(f, (old, old))
    return a


def _files(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_push_ls_verify_trim(file_remote, tmp_path):
    a = Host("a", tmp_path / "a", clean_env())
    env_cuda = {"KERNELCACHE_CUDA_ARCH": "9.0", "CUDA_HOME": os.environ.get("CUDA_HOME", "/usr/local/cuda")}
    assert a.cli("warm", "ngram_corpus", **env_cuda).returncode == 0
    p = a.cli("push", "ngram_corpus", **env_cuda)
    assert p.returncode == 2 and "readwrite" in p.stderr  # no remote configured: a clear refusal
    p = a.cli("--remote", file_remote.url, "--remote-mode", "readwrite", "push", "ngram_corpus", **env_cuda)
    assert p.returncode == 0 and "uploaded" in p.stdout, p.stdout + p.stderr
    assert "[kernelcache]" not in p.stderr, p.stderr  # the table is the report: no line per entry besides
    p = a.cli("--remote", file_remote.url, "--remote-mode", "readwrite", "push", "ngram_corpus", **env_cuda)
    assert "exists" in p.stdout  # pushing again never overwrites
    rows = json.loads(a.cli("--remote", file_remote.url, "remote", "ls", "--json").stdout)
    assert [r["name"] for r in rows] == ["ngram_corpus"]
    p = a.cli("--remote", file_remote.url, "remote", "verify")
    assert p.returncode == 0 and "0 bad entries" in p.stdout
    lines = p.stdout.splitlines()
    assert lines[1].split() == ["kernel", "entry", "state"] and lines[3].split()[0::2] == ["ngram_corpus", "ok"]
    blob = next(file_remote.path.rglob("blobs/*"))
    os.chmod(blob, 0o644)
    blob.write_bytes(blob.read_bytes()[:-10])
    p = a.cli("--remote", file_remote.url, "remote", "verify")
    assert p.returncode == 1 and "BAD" in p.stdout
    old = time.time() - 40 * 86400
    for f in file_remote.path.rglob("*"):
        if f.is_file():
            os.utime(f, (old, old))
    p = a.cli("--remote", file_remote.url, "--remote-mode", "readwrite", "remote", "trim", "--max-age", "30d")
    assert p.returncode == 0, p.stderr
    assert json.loads(a.cli("--remote", file_remote.url, "remote", "ls", "--json").stdout) == []


# -- #2: trim is destructive: readwrite only, says what it deletes, --dry-run ---------------------
def test_trim_in_read_mode_deletes_nothing(file_remote, tmp_path):
    a = _published_and_aged(file_remote, tmp_path)
    before = _files(file_remote.path)
    assert any(f.startswith("entries/") for f in before) and any(f.startswith("blobs/") for f in before)
    p = a.cli("--remote", file_remote.url, "remote", "trim", "--max-age", "0")  # mode unset: read
    assert p.returncode == 2 and "readwrite" in p.stderr, p.stdout + p.stderr
    p = a.cli("remote", "trim", "--max-age", "0", KERNELCACHE_REMOTE=file_remote.url, KERNELCACHE_REMOTE_MODE="read")
    assert p.returncode == 2
    assert _files(file_remote.path) == before


def test_trim_dry_run_lists_and_keeps_then_trim_says_what_it_deletes(file_remote, tmp_path):
    a = _published_and_aged(file_remote, tmp_path)
    before = _files(file_remote.path)
    p = a.cli("--remote", file_remote.url, "remote", "trim", "--max-age", "30d", "--dry-run")
    assert p.returncode == 0, p.stderr
    listed = sorted(ln.split(" ", 2)[2] for ln in p.stdout.splitlines() if ln.startswith("would remove "))
    assert listed == [f for f in before if f.startswith(("entries/", "blobs/"))], p.stdout
    assert _files(file_remote.path) == before  # a dry run deletes nothing
    p = a.cli("remote", "trim", "--max-age", "30d", "--remote", file_remote.url, "--remote-mode", "readwrite")
    assert p.returncode == 0, p.stderr
    removed = sorted(ln.split(" ", 1)[1] for ln in p.stdout.splitlines() if ln.startswith("removing "))
    assert removed == listed and f"{len(listed)} objects removed" in p.stdout
    assert [f for f in _files(file_remote.path) if f.startswith(("entries/", "blobs/"))] == []


# -- #10: global flags before and after the subcommand --------------------------------------------
def test_global_flags_after_the_subcommand(file_remote, tmp_path):
    a = Host("a", tmp_path / "a", clean_env())
    project = make_project(tmp_path / "proj")
    assert a.load(project)["status"] == "built"  # no remote yet
    p = a.cli("push", "--remote", file_remote.url, "--remote-mode", "readwrite")
    assert p.returncode == 0 and "uploaded" in p.stdout, p.stdout + p.stderr
    assert "[kernelcache]" not in p.stderr, p.stderr  # the table is the report: no line per entry besides
    p = a.cli("remote", "ls", "--json", "--remote", file_remote.url)
    assert [r["name"] for r in json.loads(p.stdout)] == ["fleet_k"], p.stderr
    p = a.cli("--remote", file_remote.url, "remote", "ls", "--json")  # before still works
    assert [r["name"] for r in json.loads(p.stdout)] == ["fleet_k"]
    other = tmp_path / "elsewhere"
    p = a.cli("ls", "--json", "--cache-dir", str(other))  # the cache dir flag, after the command
    assert p.returncode == 0 and json.loads(p.stdout) == [], p.stdout
    p = a.cli("--cache-dir", str(other), "ls", "--json", "--cache-dir", str(a.cache))  # after wins
    assert p.returncode == 0 and [e["name"] for e in json.loads(p.stdout)] == ["fleet_k"], p.stdout


# -- #11: an outage is printed once; doctor is a CI pre-check ------------------------------------
def test_an_unreachable_remote_is_reported_once(tmp_path):
    env = clean_env(AWS_ENDPOINT_URL=unused_endpoint(), AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y",
                    AWS_REGION="us-east-1", AWS_ALLOW_HTTP="true")
    h = Host("h", tmp_path / "h", env)
    out, stderr = h.load_with_stderr(make_project(tmp_path / "proj"), KERNELCACHE_LOG="",
                                     KERNELCACHE_REMOTE="s3://kcfleet/nowhere", KERNELCACHE_REMOTE_MODE="readwrite")
    assert out["status"] == "built"
    mentions = [ln for ln in stderr.splitlines() if "unavailable" in ln or "Warning" in ln]
    assert len(mentions) == 1 and mentions[0].startswith("[kernelcache] fleet cache s3://kcfleet/nowhere"), stderr
    assert "RemoteDownWarning" not in stderr and "client.py" not in stderr


def test_doctor_names_the_remote_once_and_fails_when_it_is_unreachable(file_remote, tmp_path):
    h = Host("h", tmp_path / "h", clean_env(KERNELCACHE_REMOTE=file_remote.url, KERNELCACHE_REMOTE_MODE="readwrite"))
    p = h.cli("doctor")
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("fleet cache"))
    assert p.returncode == 0, p.stdout
    assert line.count(file_remote.url) == 1 and "reachable" in line and "write probe ok" in line, line
    missing = f"file://{tmp_path}/not-mounted"
    p = h.cli("doctor", KERNELCACHE_REMOTE=missing)
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("fleet cache"))
    assert p.returncode == 1, p.stdout
    assert line.count(missing) == 1 and "UNREACHABLE" in line and "remote_unavailable" in line, line
    assert "Warning" not in p.stderr, p.stderr
    p = h.cli("doctor", KERNELCACHE_REMOTE="", KERNELCACHE_REMOTE_MODE="")  # no remote: nothing to fail on
    assert "fleet cache        off" in p.stdout


def test_keygen(tmp_path):
    h = Host("h", tmp_path / "h", clean_env())
    p = h.cli("remote", "keygen", str(tmp_path / "k.pem"), str(tmp_path / "k.pub"))
    assert p.returncode == 0 and (tmp_path / "k.pem").exists() and (tmp_path / "k.pub").exists()
