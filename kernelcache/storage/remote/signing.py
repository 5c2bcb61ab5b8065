"""Ed25519 signatures over manifest envelopes (the ``cryptography`` package, extra ``remote``).

Writers hold a private key (``KERNELCACHE_REMOTE_SIGNING_KEY``, PEM PKCS#8), readers hold public
keys (``KERNELCACHE_REMOTE_VERIFY_KEYS``, PEM or OpenSSH ``ssh-ed25519`` lines). What is signed:
the canonical JSON (sorted keys, no whitespace, ASCII) of the envelope without ``signature`` and
``key_id``. ``key_id`` = the first 16 hex digits of sha256 over the raw 32-byte public key, so a
reader can pick the key and report who signed.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ...base.errors import KernelCacheError
from .backend import RemoteRefused

INSTALL_HINT = "pip install 'kernelcache[remote]'"
UNSIGNED_FIELDS = ("signature", "key_id")


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise KernelCacheError(f"signed fleet-cache manifests need the cryptography package: {INSTALL_HINT}") from None
    return serialization, ed25519


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def signed_bytes(envelope: dict) -> bytes:
    return canonical({k: v for k, v in envelope.items() if k not in UNSIGNED_FIELDS})


def _raw_public(pub: Any) -> bytes:
    serialization, _ = _crypto()
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id_of(pub: Any) -> str:
    return hashlib.sha256(_raw_public(pub)).hexdigest()[:16]


@dataclass(frozen=True)
class Signer:
    private: Any
    key_id: str

    def sign(self, envelope: dict) -> dict:
        """The envelope with ``signature`` and ``key_id`` added."""
        sig = self.private.sign(signed_bytes(envelope))
        return {**envelope, "signature": base64.b64encode(sig).decode("ascii"), "key_id": self.key_id}


class Verifier:
    def __init__(self, keys: dict[str, Any]):
        self.keys = keys  # key_id -> Ed25519PublicKey

    def verify(self, envelope: dict, where: str) -> str:
        """The key id that signed ``envelope``; RemoteRefused when unsigned, unknown or bad."""
        sig, kid = envelope.get("signature"), envelope.get("key_id")
        if not sig or not isinstance(sig, str):
            raise RemoteRefused(f"{where}: unsigned manifest (verify keys are configured)")
        if not isinstance(kid, str) or kid not in self.keys:
            raise RemoteRefused(f"{where}: signed by unknown key {kid!r} (known: {', '.join(sorted(self.keys))})")
        try:
            raw = base64.b64decode(sig, validate=True)
            self.keys[kid].verify(raw, signed_bytes(envelope))
        except Exception:
            raise RemoteRefused(f"{where}: bad signature (key {kid})") from None
        return kid


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise KernelCacheError(f"cannot read the {what} {path}: {e.strerror or e}") from None


def load_signer(path: Path, setting: str = "KERNELCACHE_REMOTE_SIGNING_KEY") -> Signer:
    """The private key at ``path``; ``setting``: what named it (the fleet's variable, or ``build --sign``)."""
    serialization, ed25519 = _crypto()
    data = _read(path, f"signing key ({setting})")
    try:
        if data.lstrip().startswith(b"-----BEGIN OPENSSH PRIVATE KEY"):
            key = serialization.load_ssh_private_key(data, password=None)
        else:
            key = serialization.load_pem_private_key(data, password=None)
    except Exception as e:
        raise KernelCacheError(f"{setting} {path} is not an unencrypted private key: "
                               f"{type(e).__name__}") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise KernelCacheError(f"{setting} {path} is not an Ed25519 key")
    return Signer(key, key_id_of(key.public_key()))


def load_public_keys(paths: Iterable[Path], setting: str = "KERNELCACHE_REMOTE_VERIFY_KEYS") -> dict[str, Any]:
    """key id -> public key of every key in ``paths``; ``setting``: the variable that named them."""
    serialization, ed25519 = _crypto()
    keys: dict[str, Any] = {}
    for path in paths:
        data = _read(path, f"verify key ({setting})")
        found = []
        try:
            if b"-----BEGIN" in data:
                found.append(serialization.load_pem_public_key(data))
            else:
                for line in data.decode().splitlines():
                    if line.strip() and not line.lstrip().startswith("#"):
                        found.append(serialization.load_ssh_public_key(line.strip().encode()))
        except Exception as e:
            raise KernelCacheError(f"{setting} {path}: not a public key ({type(e).__name__})") \
                from None
        for k in found:
            if not isinstance(k, ed25519.Ed25519PublicKey):
                raise KernelCacheError(f"{setting} {path}: not an Ed25519 key")
            keys[key_id_of(k)] = k
        if not found:
            raise KernelCacheError(f"{setting} {path}: no key in the file")
    return keys


def keygen(private_path: Path | str, public_path: Path | str) -> str:
    """Write a new Ed25519 key pair (private 0600, PEM PKCS#8; public PEM); the key id.

    Never overwrites: an existing file is an error (a lost signing key is better than a
    silently replaced one that readers do not trust).
    """
    serialization, ed25519 = _crypto()
    priv_p, pub_p = Path(private_path), Path(public_path)
    for p in (priv_p, pub_p):
        if p.exists():
            raise KernelCacheError(f"keygen: {p} exists; refusing to overwrite a key")
    key = ed25519.Ed25519PrivateKey.generate()
    priv = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    priv_p.parent.mkdir(parents=True, exist_ok=True)
    pub_p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(priv_p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(priv)
    fd = os.open(pub_p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(pub)
    return key_id_of(key.public_key())
