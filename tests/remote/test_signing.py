"""Signed manifests: with verify keys set, only envelopes signed by a known key are accepted."""
from __future__ import annotations

import json

import pytest
from kernelcache.base.errors import KernelCacheError

from kernelcache.storage.remote import RemoteRefused
from kernelcache.storage.remote.client import entry_key
from kernelcache.storage.remote.ops import keygen

from .helpers import ids, make_files, raw_get, raw_put

pytest.importorskip("cryptography")


@pytest.fixture
def keys(tmp_path):
    out = {}
    for who in ("ci", "other"):
        kid = keygen(tmp_path / f"{who}.key", tmp_path / f"{who}.pub")
        out[who] = (tmp_path / f"{who}.key", tmp_path / f"{who}.pub", kid)
    return out


def _publish(remote, tmp_path, signing_key=None):
    kw = {"signing_key": signing_key} if signing_key else {}
    rc = remote.open("readwrite", **kw)
    skey, eid = ids()
    assert rc.publish("adder", skey, eid, {"entry": eid}, make_files(tmp_path / "src"))
    return rc, skey, eid


def test_signed_envelope_verifies(remote, tmp_path, keys):
    priv, pub, kid = keys["ci"]
    rc, skey, eid = _publish(remote, tmp_path, priv)
    env = json.loads(raw_get(rc, entry_key("adder", skey, eid)))
    assert env["key_id"] == kid and env["signature"]
    reader = remote.open("read", verify_keys=(pub, keys["other"][1]))
    entry = reader.read_entry(reader.list_entries("adder", skey)[0])
    assert entry.signed_by == kid
    assert remote.open("read").read_entry(reader.list_entries("adder", skey)[0]).signed_by is None


def test_unsigned_is_refused_when_verify_keys_are_set(remote, tmp_path, keys):
    rc, skey, _ = _publish(remote, tmp_path)
    reader = remote.open("read", verify_keys=(keys["ci"][1],))
    with pytest.raises(RemoteRefused, match="unsigned") as ei:
        reader.read_entry(reader.list_entries("adder", skey)[0])
    assert ei.value.reason == "remote_refused"


def test_unknown_key_is_refused(remote, tmp_path, keys):
    rc, skey, _ = _publish(remote, tmp_path, keys["other"][0])
    reader = remote.open("read", verify_keys=(keys["ci"][1],))
    with pytest.raises(RemoteRefused, match="unknown key"):
        reader.read_entry(reader.list_entries("adder", skey)[0])


@pytest.mark.parametrize("tamper", ["manifest", "files", "signature", "key_id_swap"])
def test_tampered_envelope_is_refused(remote, tmp_path, keys, tamper):
    priv, pub, kid = keys["ci"]
    rc, skey, eid = _publish(remote, tmp_path, priv)
    key = entry_key("adder", skey, eid)
    env = json.loads(raw_get(rc, key))
    if tamper == "manifest":
        env["manifest"]["entry"] = "evil"
    elif tamper == "files":
        env["files"]["kernel.so"]["sha256"] = "0" * 64
    elif tamper == "signature":
        env["signature"] = env["signature"][:-4] + ("AAAA" if not env["signature"].endswith("AAAA") else "BBBB")
    else:  # claim the other trusted key signed it
        env["key_id"] = keys["other"][2]
    raw_put(rc, key, json.dumps(env).encode())
    reader = remote.open("read", verify_keys=(pub, keys["other"][1]))
    with pytest.raises(RemoteRefused, match="bad signature"):
        reader.read_entry(reader.list_entries("adder", skey)[0])


def test_key_files_errors(tmp_path, make_settings, keys):
    from kernelcache.storage.remote import open_remote

    url = f"file://{tmp_path}"
    with pytest.raises(KernelCacheError, match="cannot read"):
        open_remote(make_settings(url, "readwrite", signing_key=tmp_path / "nope.key"))
    with pytest.raises(KernelCacheError, match="not an unencrypted private key"):
        open_remote(make_settings(url, "readwrite", signing_key=keys["ci"][1]))
    (tmp_path / "garbage.pub").write_text("hello\n")
    with pytest.raises(KernelCacheError, match="not a public key"):
        open_remote(make_settings(url, "read", verify_keys=(tmp_path / "garbage.pub",)))
    with pytest.raises(KernelCacheError, match="refusing to overwrite"):
        keygen(keys["ci"][0], tmp_path / "new.pub")
    assert (keys["ci"][0].stat().st_mode & 0o777) == 0o600


def test_openssh_public_key_is_accepted(remote, tmp_path, keys):
    from cryptography.hazmat.primitives import serialization

    priv, pub, kid = keys["ci"]
    key = serialization.load_pem_public_key(pub.read_bytes())
    ssh = tmp_path / "ci.ssh.pub"
    ssh.write_bytes(key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b" ci\n")
    rc, skey, _ = _publish(remote, tmp_path, priv)
    reader = remote.open("read", verify_keys=(ssh,))
    assert reader.read_entry(reader.list_entries("adder", skey)[0]).signed_by == kid
