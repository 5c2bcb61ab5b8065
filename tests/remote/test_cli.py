"""`kernelcache push`, `kernelcache remote ls|verify|trim|keygen` and doctor's reachability line."""
from __future__ import annotations

import json
import os
import time

from hosts import Host, make_project


def _env(remote, mode="readwrite", **extra):
    return remote.subprocess_env(**{"KERNELCACHE_REMOTE": remote.url, "KERNELCACHE_REMOTE_MODE": mode, **extra})


def test_push_ls_verify_trim(file_remote, tmp_path, make_settings):
    from .conftest import Remote

    remote = Remote("file", file_remote.url, {}, None, file_remote.path, make_settings)
    a = Host("a", tmp_path / "a", remote.subprocess_env())  # builds with no remote at all
    env_cuda = {"KERNELCACHE_CUDA_ARCH": "9.0", "CUDA_HOME": os.environ.get("CUDA_HOME", "/usr/local/cuda")}
    assert a.cli("warm", "ngram_corpus", **env_cuda).returncode == 0
    p = a.cli("push", "ngram_corpus", **env_cuda)
    assert p.returncode == 2 and "readwrite" in p.stderr  # no remote configured: a clear refusal
    p = a.cli("--remote", remote.url, "--remote-mode", "readwrite", "push", "ngram_corpus", **env_cuda)
    assert p.returncode == 0 and "uploaded" in p.stdout, p.stdout + p.stderr
    p = a.cli("--remote", remote.url, "--remote-mode", "readwrite", "push", "ngram_corpus", **env_cuda)
    assert "exists" in p.stdout  # pushing again never overwrites
    rows = json.loads(a.cli("--remote", remote.url, "remote", "ls", "--json").stdout)
    assert [r["name"] for r in rows] == ["ngram_corpus"]
    p = a.cli("--remote", remote.url, "remote", "verify")
    assert p.returncode == 0 and "0 bad entries" in p.stdout
    blob = next(file_remote.path.rglob("blobs/*"))
    os.chmod(blob, 0o644)
    blob.write_bytes(blob.read_bytes()[:-10])
    p = a.cli("--remote", remote.url, "remote", "verify")
    assert p.returncode == 1 and "BAD" in p.stdout
    old = time.time() - 40 * 86400
    for f in file_remote.path.rglob("*"):
        if f.is_file():
            os.utime(f, (old, old))
    p = a.cli("--remote", remote.url, "remote", "trim", "--max-age", "30d")
    assert p.returncode == 0, p.stderr
    assert json.loads(a.cli("--remote", remote.url, "remote", "ls", "--json").stdout) == []


def test_keygen_and_doctor(file_remote, tmp_path, make_settings):
    from .conftest import Remote

    remote = Remote("file", file_remote.url, {}, None, file_remote.path, make_settings)
    h = Host("h", tmp_path / "h", _env(remote))
    p = h.cli("remote", "keygen", str(tmp_path / "k.pem"), str(tmp_path / "k.pub"))
    assert p.returncode == 0 and (tmp_path / "k.pem").exists() and (tmp_path / "k.pub").exists()
    out = h.cli("doctor").stdout
    assert "fleet cache" in out and file_remote.url in out and "not available" not in out.split("fleet cache")[1]
    bad = Host("bad", tmp_path / "bad", _env(remote, KERNELCACHE_REMOTE=f"file://{tmp_path}/missing"))
    line = bad.cli("doctor").stdout.split("fleet cache")[1].splitlines()[0]
    assert "not available" in line
