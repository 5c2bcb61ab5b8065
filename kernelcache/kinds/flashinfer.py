"""A FlashInfer JIT module: a tvm-ffi module built from FlashInfer's own command lines.

Why a kind of its own: its flags are FlashInfer's complete lines (its ``-gencode`` set, includes,
``-ltvm_ffi``), so they are used verbatim like the torch kinds' (nothing of kernelcache's tvm-ffi
defaults added), while loading and admission are the tvm-ffi module's. The kind's name is in
both keys, so such an entry never answers for a plain tvm-ffi spec of the same sources.

Loaded lazily, as FlashInfer loads it (``tvm_ffi.load_module``), not with every symbol resolved
first: FlashInfer's modules reference template instantiations they deliberately leave out
(FlashInfer 0.7.4's batch prefill FA2 dispatches ``CTA_TILE_Q`` 32 but instantiates only the
tiles reachable for its head dim), so a bind-now check rejects modules FlashInfer runs fine.
A link cut short still cannot be loaded: entries appear only by an atomic publish.

An entry exported into an artifact root (``kernelcache build --flashinfer``) carries the version
of the FlashInfer it was built with (``VERSION_LABEL`` in its ``prebuilt`` record) and the sha256
of each FlashInfer header it read (``HEADERS_LABEL``; a root's manifest keeps the hashes of the
module's own sources only). A serving host compares the version, then those hashes with the ones
its installed FlashInfer's ``RECORD`` states (one file read: no header is opened), so another
FlashInfer, or another build of the same version, refuses the entry with one line naming both
versions. An install whose ``RECORD`` states no hashes (editable) is checked by version alone.
"""
from __future__ import annotations

import base64
import hashlib
import os
import sys

from ..base import process_state
from ..base.events import RejectCode
from ..entry import validate
from ..entry.manifest import Manifest
from ..host.installed import editable
from .tvm_ffi import ForeignJitModule

VERSION_LABEL = "flashinfer_version"
HEADERS_LABEL = "flashinfer_headers"  # {path as RECORD names it: sha256 as RECORD writes it}
_DIST = "flashinfer_python-"
_record_memo: dict[tuple, dict[str, str] | None] = {}  # (RECORD, its stat) -> path -> sha256


def installed_version() -> str:
    import importlib

    try:
        return str(importlib.import_module("flashinfer.version").__version__)
    except (ImportError, AttributeError):
        return "unknown"


def _package_dir() -> str | None:
    mod = sys.modules.get("flashinfer")
    origin = getattr(mod, "__file__", None)
    if origin is None:
        import importlib.util

        try:
            found = importlib.util.find_spec("flashinfer")
        except (ImportError, ValueError):
            return None
        origin = found.origin if found is not None else None
    return os.path.dirname(origin) if origin else None


def _sha256(path: str) -> str:
    """A file's sha256 as a wheel's RECORD writes it (urlsafe base64, no padding)."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def header_labels(m: Manifest) -> dict:
    """At export: the installed FlashInfer's files among ``m``'s recorded dependencies (a cache
    entry's full manifest), each by its path relative to the install dir and its sha256."""
    from ..host.anchors import machine_anchors, resolve_anchor

    pkg = _package_dir()
    if pkg is None:
        return {}
    pkg = os.path.realpath(pkg)
    site = os.path.dirname(pkg)
    anchors = sorted(machine_anchors(), key=lambda p: -len(p[1]))
    files = {}
    for d in m.deps:
        path = resolve_anchor(d["path"], anchors)
        if path.startswith(pkg + os.sep):
            files[os.path.relpath(path, site).replace(os.sep, "/")] = _sha256(path)
    return {HEADERS_LABEL: dict(sorted(files.items()))} if files else {}


def installed_hashes() -> dict[str, str] | None:
    """path -> sha256 of every file the installed FlashInfer's ``RECORD`` lists (memoised by the
    RECORD's stat); None when there is none to read or it is an editable install."""
    pkg = _package_dir()
    if pkg is None:
        return None
    site = os.path.dirname(pkg)
    info = os.path.join(site, f"{_DIST}{installed_version()}.dist-info")
    record = os.path.join(info, "RECORD")
    try:
        st = os.stat(record)
    except OSError:
        return None
    memo_key = (record, st.st_size, st.st_mtime_ns, st.st_ino)
    if memo_key in _record_memo:
        return _record_memo[memo_key]
    out: dict[str, str] | None = None
    if not editable(info):
        out = {}
        with open(record, encoding="utf-8") as f:
            for line in f:
                path, _, rest = line.partition(",")
                if rest.startswith("sha256="):
                    out[path] = rest[7:].split(",", 1)[0]
    _record_memo[memo_key] = out
    return out


def version_refusal(m: Manifest) -> validate.Rejection | None:
    """Why an exported entry may not be used with the installed FlashInfer (None: it may)."""
    prebuilt = m.prebuilt or {}
    label = prebuilt.get(VERSION_LABEL)
    if not label:
        return None
    here = installed_version()
    line = f"built with FlashInfer {label}, installed FlashInfer is {here}"
    if label != here:
        return validate.Rejection(RejectCode.INSTALLATION, line)
    want = prebuilt.get(HEADERS_LABEL) or {}
    have = installed_hashes() if want else None
    if have is None:
        return None
    differ = sorted(p for p, h in want.items() if have.get(p) != h)
    if not differ:
        return None
    more = f" and {len(differ) - 1} more" if len(differ) > 1 else ""
    return validate.Rejection(RejectCode.INSTALLATION, f"{line}, another build: its header {differ[0]}{more} differs")


class FlashInferModule(ForeignJitModule):
    """The FlashInfer kind; its class names this module, where the export labels are
    (``VERSION_LABEL``, ``installed_version``: ``export_lock.export_labels``)."""


KIND = FlashInferModule("flashinfer", "FlashInfer JIT module", version_refusal)
process_state.register("kinds.flashinfer.record", _record_memo.clear)
