"""Configuration of the remote layer: URLs and their redaction, the optional extra, lazy imports."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kernelcache.base.errors import KernelCacheError

from kernelcache.storage.remote.url import is_loopback_endpoint, parse, redact

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("url,expected", [
    ("s3://bucket/some/prefix", "s3://bucket/some/prefix"),
    ("s3://AKIAXXX:verysecret@bucket/p", "s3://bucket/p"),
    ("https://user:pw@host.example:9000/b?X-Amz-Signature=abc&token=zzz", "https://host.example:9000/b"),
    ("az://account/container/p?sv=2020&sig=SECRET", "az://account/container/p"),
    ("file:///shared/kc", "file:///shared/kc"),
    ("::garbage::", "<remote>"),
])
def test_redact(url, expected):
    assert redact(url) == expected


def test_parse():
    u = parse("s3://bucket/a/b/")
    assert (u.scheme, u.bucket, u.prefix, u.redacted) == ("s3", "bucket", "a/b", "s3://bucket/a/b")
    assert parse("gs://b").prefix == ""
    assert parse("file:///mnt/share/kc").path == Path("/mnt/share/kc")
    with pytest.raises(KernelCacheError):
        parse("s3://bucket/a/../b")


def test_every_store_a_url_can_name_opens_from_the_scheme_table():
    """``open_remote`` opens a store from one table row per scheme ``parse`` names; an alias added to
    the URL table without a store (or a store no URL reaches) fails here, not on a user's host."""
    from kernelcache.storage.remote import STORES
    from kernelcache.storage.remote.url import OBJECT_SCHEMES

    named = {"file", *OBJECT_SCHEMES.values()}
    assert set(STORES) == named
    for alias, scheme in OBJECT_SCHEMES.items():
        assert parse(f"{alias}://bucket/p").scheme == scheme


@pytest.mark.parametrize("endpoint,ok", [
    ("http://127.0.0.1:9000", True), ("http://localhost:8333", True), ("http://[::1]:80", True),
    ("http://127.5.5.5", True), ("http://10.0.0.1:9000", False), ("https://s3.example.com", False),
    ("http://localhost.evil.com", False),
])
def test_loopback(endpoint, ok):
    assert is_loopback_endpoint(endpoint) is ok


def test_missing_obstore_says_what_to_install(make_settings, monkeypatch):
    monkeypatch.setitem(sys.modules, "obstore", None)
    monkeypatch.setitem(sys.modules, "obstore.store", None)
    from kernelcache.storage.remote import open_remote

    with pytest.raises(KernelCacheError, match=r"pip install 'kernelcache\[remote\]'"):
        open_remote(make_settings("s3://bucket/p", "read"))
    assert open_remote(make_settings("file:///tmp", "read")) is not None  # file:// needs no extra


def test_missing_cryptography_says_what_to_install(make_settings, monkeypatch, tmp_path):
    for m in [m for m in sys.modules if m == "cryptography" or m.startswith("cryptography.")]:
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setitem(sys.modules, "cryptography", None)
    from kernelcache.storage.remote import open_remote

    pub = tmp_path / "k.pub"
    pub.write_text("x")
    with pytest.raises(KernelCacheError, match=r"pip install 'kernelcache\[remote\]'"):
        open_remote(make_settings(f"file://{tmp_path}", "read", verify_keys=(pub,)))


def test_imports_stay_lazy(tmp_path):
    code = ("import sys, kernelcache.storage.remote as r\n"
            "from pathlib import Path\n"
            "from kernelcache.base.settings import RemoteSettings, Settings\n"
            f"rc = r.open_remote(Settings(cache_dir=Path({str(tmp_path)!r}), lock_dir=Path({str(tmp_path)!r}),"
            f" remote=RemoteSettings('file://{tmp_path}', 'read')))\n"
            "print(sorted(m for m in ('obstore', 'cryptography', 'tvm_ffi', 'torch') if m in sys.modules))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
