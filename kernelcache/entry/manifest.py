"""The manifest record of one cache entry: what was built, from what, and how to check it.

Why a typed record: the manifest is written by the loader, rewritten by artifact-root export
and the fleet cache, and read by validation, ``ls``, ``explain`` and ``verify``. One class with
one format version keeps those readers from drifting apart field by field.

A manifest is written last into an entry directory (after the binary is complete and
fsynced), so a directory with a parseable manifest is a whole entry.
"""
from __future__ import annotations

import copy
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from ..base import bounded
from ..base.spec import DEFAULT_KIND
from ..host.anchors import ROOT

FORMAT = 3
FILENAME = "manifest.json"


class Manifest:
    """One entry's record. ``inputs`` are the level-1 inputs in clear text (for ``explain``).

    A plain class, not a dataclass: every hit reads one, and ``@dataclass`` creates a class of
    this size through ``exec`` at import (~2 ms of a fresh process's first load)."""

    def __init__(
        self, name: str, key1: str, entry_id: str,
        identity: str,  # per-build nonce compiled into the binary, read back after dlopen
        so_name: str, so_sha256: str, so_size: int,
        schemas: dict[str, str | None],  # exported type schema per function, read from the binary
        inputs: dict | None = None,
        deps: list[dict] | None = None,  # {"path" (anchored), "xxh3", "stat"}
        absent: list[str] | None = None,  # anchored paths that must stay absent
        skey: str = "",  # toolchain-free source key (fleet index)
        build_seconds: float = 0.0, host: str = "", created: str = "", reason: str = "",
        format: int = FORMAT,
        prebuilt: dict | None = None,  # set in relocatable (artifact root / fleet) copies
        external_deps: dict | None = None,  # {"count", "digest"} of deps dropped by relocation
        origin: str = "",  # "" (built here) | "remote:<redacted url>"
        kind: str = DEFAULT_KIND,  # KernelSpec.kind: how the binary is admitted (kernelcache/kinds/)
        # What a torch-kind binary exports, computed in a subprocess right after it was built
        # (module functions, classes and their attributes; ops a library registers). Bound to the
        # binary by so_sha256; the loaded module must show the same surface.
        surface: dict | None = None,
        # What ``skey`` hashes, in clear (``source_key.source_inputs``): the spec's flags,
        # include dirs, arch... An entry used elsewhere must have this host's source key; when it
        # has not, these name what differs (``source_key.diff``). None: written before they were kept.
        skey_inputs: dict | None = None,
    ) -> None:
        self.name, self.key1, self.entry_id, self.identity = name, key1, entry_id, identity
        self.so_name, self.so_sha256, self.so_size, self.schemas = so_name, so_sha256, so_size, schemas
        self.inputs = {} if inputs is None else inputs
        self.deps = [] if deps is None else deps
        self.absent = [] if absent is None else absent
        self.skey, self.build_seconds, self.host, self.created = skey, build_seconds, host, created
        self.reason, self.format, self.prebuilt, self.external_deps = reason, format, prebuilt, external_deps
        self.origin, self.kind, self.surface = origin, kind, surface
        self.skey_inputs = skey_inputs

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in FIELDS)

    __hash__ = None  # type: ignore[assignment]  # mutable (unhashable), as the dataclass was

    def __repr__(self) -> str:
        return "Manifest(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in FIELDS) + ")"

    # -- (de)serialisation ---------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any) -> "Manifest | None":
        """A manifest from parsed JSON; None when required fields are missing or mistyped."""
        if not isinstance(data, dict):
            return None
        known = set(FIELDS)
        try:
            m = cls(**{k: v for k, v in data.items() if k in known})
        except TypeError:
            return None
        if not (isinstance(m.entry_id, str) and isinstance(m.so_name, str) and isinstance(m.name, str)):
            return None
        if not isinstance(m.schemas, dict) or not isinstance(m.deps, list):
            return None
        if not isinstance(m.kind, str) or not (m.surface is None or isinstance(m.surface, dict)):
            return None
        if not (m.skey_inputs is None or isinstance(m.skey_inputs, dict)):
            return None
        return m

    def to_dict(self, deep: bool = True) -> dict:
        """The manifest's fields as a dict (deep: copies, as dataclasses.asdict made; not deep:
        the record's own values, for a caller that only serialises them)."""
        d = {f: copy.deepcopy(getattr(self, f)) if deep else getattr(self, f) for f in FIELDS}
        for opt in ("prebuilt", "external_deps"):
            if d[opt] is None:
                d.pop(opt)
        if not d["origin"]:
            d.pop("origin")
        if d["kind"] == DEFAULT_KIND:  # tvm-ffi manifests stay byte-identical to the pre-kind format
            d.pop("kind")
        if d["surface"] is None:
            d.pop("surface")
        if d["skey_inputs"] is None:
            d.pop("skey_inputs")
        return d

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    # -- derived -----------------------------------------------------------------------------
    @property
    def tvm_ffi_version(self) -> str:
        if self.prebuilt and self.prebuilt.get("tvm_ffi_version"):
            return str(self.prebuilt["tvm_ffi_version"])
        return str(self.inputs.get("abi", {}).get("tvm_ffi_version", ""))

    @property
    def archs(self) -> tuple[str, ...]:
        return tuple(self.inputs.get("arch") or ())

    @property
    def source_hashes(self) -> dict:
        return dict(self.inputs.get("sources") or {})

    def relocatable(self, cuda_major: str | None) -> "Manifest":
        """A copy without machine-specific paths, for artifact roots and the fleet cache.

        Only package files (``${ROOT}``-anchored sources and headers) keep their recorded paths
        and hashes; other dependencies are summarised by count and digest; tool paths and full
        command lines are dropped (the reader validates against its own installation).
        """
        from ..key.level1 import canonical_hash

        m = copy.deepcopy(self)
        ext = [d for d in m.deps if not d["path"].startswith(ROOT)]
        m.deps = [d for d in m.deps if d["path"].startswith(ROOT)]
        m.absent = [a for a in m.absent if a.startswith(ROOT)]
        m.external_deps = {"count": len(ext), "digest": canonical_hash(sorted(d["xxh3"] for d in ext))}
        inputs = m.inputs
        inputs["tools"] = {k: {"version": (v.get("version") or "").splitlines()[-1:]}
                           for k, v in inputs.get("tools", {}).items()}
        inputs.pop("commands", None)
        m.prebuilt = {"tvm_ffi_version": self.tvm_ffi_version, "cuda_major": cuda_major,
                      "built": utc_now()}
        m.host = ""
        return m


FIELDS = ("name", "key1", "entry_id", "identity", "so_name", "so_sha256", "so_size", "schemas", "inputs", "deps",
          "absent", "skey", "build_seconds", "host", "created", "reason", "format", "prebuilt", "external_deps",
          "origin", "kind", "surface", "skey_inputs")


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def this_host() -> str:
    import socket

    return socket.gethostname()


def read(entry_dir: Path) -> Manifest | None:
    """The manifest of an entry directory; None when absent, unparseable or incomplete, or
    refused unread (not a regular file, too large or too deeply nested: ``kernelcache.base.bounded``;
    an artifact root's manifest comes from elsewhere)."""
    path = Path(entry_dir) / FILENAME
    try:
        data = bounded.loads(bounded.read_regular(path)[0], str(path))
    except (OSError, ValueError):
        return None
    return Manifest.from_dict(data)


def write(entry_dir: Path, manifest: Manifest) -> None:
    """Write atomically (temp file + rename) so a reader never sees half a manifest."""
    from . import deprecord  # the packed hit record beside it: what a warm load reads

    tmp = Path(entry_dir) / f".{FILENAME}.{os.getpid()}.{uuid.uuid4().hex[:6]}"
    data = manifest.to_dict(deep=False)  # only serialised and packed: no copy of ~5,400 deps
    text = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    tmp.write_bytes(text)
    os.replace(tmp, Path(entry_dir) / FILENAME)
    deprecord.write_beside(Path(entry_dir), str(Path(entry_dir) / FILENAME), data, text)
