"""Signed artifact roots: an entry is served only if a key the host trusts signed its bytes.

Why: a root on a shared mount or in a companion wheel is code this process runs, and whoever can
write it can also rewrite a manifest's checksums. ``kernelcache build --out ROOT --sign KEY``
writes ``signature.json`` beside each entry's manifest: the fleet's Ed25519 envelope signature
(``storage.remote.signing``: same key files, key ids, canonical JSON) over the sha256 of the
``manifest.json`` bytes and of the binary. With ``KERNELCACHE_PREBUILT_VERIFY_KEYS`` set, a root's
entry is refused, with the reason, when that file is missing, signed by an unknown key, does not
verify, or when the manifest or the binary on disk is not the one signed (a miss, then a local build
where one is allowed). ``kernelcache pack`` copies every file of an entry, the signature included.

What it does not cover: a writer racing the loader between the check and ``dlopen`` (keep roots
writable by their owner alone: ``KERNELCACHE_STRICT_DIRS``).
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from ..base import bounded, process_state
from ..entry.manifest import FILENAME as MANIFEST

SIGNATURE = "signature.json"  # beside manifest.json in an entry of an artifact root
FORMAT = "kernelcache-prebuilt-signature/1"
VERIFY_SETTING = "KERNELCACHE_PREBUILT_VERIFY_KEYS"

_lock = threading.Lock()
_verifiers: dict[tuple[str, ...], Any] = {}  # key files -> signing.Verifier (keys parsed once per process)
_hashed: dict[tuple, str] = {}  # (path, size, mtime_ns, ctime_ns, inode) -> sha256 of a root's binary


def _reset() -> None:
    with _lock:
        _verifiers.clear()
        _hashed.clear()


process_state.register("prebuilt_sign.verifiers", _reset)


def _signed_fields(manifest_bytes: bytes, so_name: str, so_sha256: str) -> dict:
    return {"format": FORMAT, "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
            "so_name": so_name, "so_sha256": so_sha256}


def sign_entry(entry_dir: Path, key_path: Path) -> str:
    """Write ``signature.json`` for the entry at ``entry_dir`` (its manifest and binary as they are
    now); returns the key id. ``key_path``: an Ed25519 private key (``kernelcache remote keygen``)."""
    from .remote import signing

    signer = signing.load_signer(Path(key_path), setting="--sign")
    data = (Path(entry_dir) / MANIFEST).read_bytes()
    so_name = json.loads(data)["so_name"]
    sha = hashlib.sha256((Path(entry_dir) / so_name).read_bytes()).hexdigest()
    doc = signer.sign(_signed_fields(data, so_name, sha))
    tmp = Path(entry_dir) / f".{SIGNATURE}.{os.getpid()}"
    tmp.write_bytes(json.dumps(doc, sort_keys=True).encode())
    os.replace(tmp, Path(entry_dir) / SIGNATURE)
    return signer.key_id


def check_signer(key_path: Path) -> str:
    """The key id of the private key at ``key_path`` (a bad key fails before anything is built)."""
    from .remote import signing

    return signing.load_signer(Path(key_path), setting="--sign").key_id


def _verifier(keys: tuple[Path, ...]) -> Any:
    from .remote import signing

    k = tuple(str(p) for p in keys)
    with _lock:
        got = _verifiers.get(k)
    if got is None:
        got = signing.Verifier(signing.load_public_keys(keys, setting=VERIFY_SETTING))
        with _lock:
            _verifiers[k] = got
    return got


def _binary_sha256(path: Path, size: object) -> str:
    """sha256 of a root's binary: a regular file, never through a symlink, of the recorded size
    (compared before any byte is read); remembered per process by its stat."""
    fd, st = bounded.open_regular(path)
    try:
        if st.st_size != size:
            raise bounded.Refused(f"{path}: {st.st_size} bytes, the manifest records {size}")
        memo = (str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        with _lock:
            known = _hashed.get(memo)
        if known is not None:
            return known
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
    finally:
        os.close(fd)
    digest = h.hexdigest()
    with _lock:
        _hashed[memo] = digest
    return digest


def refusal(entry_dir: Path, manifest_bytes: bytes, parsed: Any, keys: tuple[Path, ...]) -> str | None:
    """Why the entry at ``entry_dir`` (whose ``manifest.json`` read as ``manifest_bytes``, parsed as
    ``parsed``) may not be served under ``keys``; None when a trusted key signed exactly these bytes
    and the binary there now. Raises ``KernelCacheError`` for unusable key files (a setting's fault)."""
    from .remote.backend import RemoteRefused

    where = f"{entry_dir}/{SIGNATURE}"
    try:
        doc = bounded.loads(bounded.read_regular(Path(entry_dir) / SIGNATURE, limit=1 << 16)[0], where)
    except FileNotFoundError:
        return f"unsigned entry ({SIGNATURE} missing; {VERIFY_SETTING} is set)"
    except (OSError, ValueError) as e:
        return f"unreadable {SIGNATURE}: {e}"
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return f"{SIGNATURE} is not a {FORMAT} document"
    try:
        kid = _verifier(keys).verify(doc, where)
    except RemoteRefused as e:
        return str(e)
    so_name = parsed.get("so_name") if isinstance(parsed, dict) else None
    if doc.get("manifest_sha256") != hashlib.sha256(manifest_bytes).hexdigest():
        return f"manifest.json is not the one key {kid} signed (changed after signing)"
    if not isinstance(so_name, str) or doc.get("so_name") != so_name or os.path.basename(so_name) != so_name:
        return f"the binary the manifest names is not the one key {kid} signed"
    if doc.get("so_sha256") != parsed.get("so_sha256"):
        return f"the manifest's binary sha256 is not the one key {kid} signed"
    try:
        sha = _binary_sha256(Path(entry_dir) / so_name, parsed.get("so_size"))
    except OSError as e:
        return f"binary not verifiable: {e}"
    if sha != doc.get("so_sha256"):
        return f"{so_name} is not the binary key {kid} signed (sha256 differs: replaced after signing)"
    return None
