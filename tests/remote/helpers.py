"""Small builders shared by the remote-layer tests (entries with random bytes, ids, raw access)."""
from __future__ import annotations

import hashlib
import os
import secrets
import threading
from pathlib import Path


def ids() -> tuple[str, str]:
    """A fresh (skey, entry_id): 64 and 32 lowercase hex digits."""
    return secrets.token_hex(32), secrets.token_hex(16)


def make_files(base: Path, so_size: int = 200_000, tag: str = "") -> dict[str, Path]:
    """A fake entry: a binary of random bytes and a small manifest file."""
    base.mkdir(parents=True, exist_ok=True)
    so = base / "kernel.so"
    so.write_bytes(os.urandom(so_size))
    man = base / "manifest.json"
    man.write_text('{"tag": "%s"}\n' % tag)
    return {"kernel.so": so, "manifest.json": man}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def raw_put(rc, key: str, data: bytes) -> None:
    """Overwrite an object behind the client's back (what a bad copy or an attacker would do)."""
    backend = rc._backend
    if hasattr(backend, "root"):
        p = backend.root.joinpath(*key.split("/"))
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".raw")
        tmp.write_bytes(data)
        os.replace(tmp, p)
    else:
        backend._obs.put(backend._small, key, data, mode="overwrite")


def raw_get(rc, key: str) -> bytes:
    return rc._backend.get(key)


def raw_delete(rc, key: str) -> None:
    rc._backend.delete(key)


def finishes(fn, *args, hang_after: float = 120):
    """``fn(*args)`` in a thread: its exception or result. The limit only stops a hung test (the
    client's own deadline ends a call long before it); no duration is asserted."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(hang_after)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} hung"
    return out
