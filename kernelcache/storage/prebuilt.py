"""Read-only prebuilt artifact roots: production without a compiler, never trusted blindly.

An artifact root has the cache's entry layout; its manifests were made relocatable when the
root was written (``kernelcache build``, see ``kernelcache.export``). Roots come from
``Settings.prebuilt`` and from installed companion packages that register an entry point in
the group ``kernelcache.prebuilt`` (a callable returning the root). An artifact is used only if
it validates against *this* installation (``validate.installation_refusal``) and is *this*
build: its recorded source key, the key the fleet indexes by, is the one this host computes for
the spec (flags, defines, include dirs and link line included: ``validate.build_refusal``);
then bytes, identity and schemas like any entry.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

from .. import dir_trust
from .. import manifest as manifest_mod
from .. import process_state
from .. import toolchain
from ..events import Place
from ..layout import Layout
from ..recall import distributions_stamp
from ..settings import Settings
from .entry import Entry

ENTRY_POINT_GROUP = "kernelcache.prebuilt"
_ep_roots: list[Path] | None = None


def _declared_somewhere() -> bool:
    """Could any distribution on the import path declare the group? Its ``entry_points.txt``
    files are searched for the group's name as bytes (most distributions have none): where
    none names it, ``importlib.metadata``'s scan (every distribution parsed: 2-3 ms here, 13 ms
    on a host with a few hundred) is skipped. A path entry that is not a directory (a zip)
    is not searched this way: the full scan decides."""
    needle = ENTRY_POINT_GROUP.encode()
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except NotADirectoryError:
            return True
        except OSError:
            continue
        for name in names:
            if name.endswith((".dist-info", ".egg-info")):
                try:
                    with open(os.path.join(entry or ".", name, "entry_points.txt"), "rb") as f:
                        if needle in f.read():
                            return True
                except OSError:
                    continue
    return False


def _scan_entry_points() -> list[str]:
    if not _declared_somewhere():
        return []
    from importlib.metadata import entry_points

    roots = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            value = ep.load()
            root = value() if callable(value) else value
            roots.append(str(Path(root).resolve()))
        except Exception:  # noqa: BLE001 - a broken companion must not break loading
            continue
    return roots


def entry_point_roots(settings: Settings) -> list[Path]:
    """Roots registered by installed companion wheels.

    Scanning package metadata costs milliseconds on every process start (tens with a few
    hundred distributions), so the result is memoised on disk, keyed by what changes when
    distributions do (``kernelcache.recall.distributions_stamp``, the key a recalled call checks too).
    """
    global _ep_roots
    if _ep_roots is None:
        value = toolchain.disk_memo("entry_points", distributions_stamp(),
                                    lambda: {"roots": _scan_entry_points()}, settings.memo_dir)
        _ep_roots = [Path(r) for r in value["roots"]]
    return _ep_roots


def _forget_entry_point_roots() -> None:
    global _ep_roots
    _ep_roots = None


process_state.register("prebuilt.entry_point_roots", _forget_entry_point_roots)


def roots(settings: Settings) -> list[Path]:
    return [*settings.prebuilt, *entry_point_roots(settings)]


def candidates(name: str, settings: Settings) -> Iterator[Entry]:
    """Every artifact for ``name`` in every root, in root order."""
    for root in roots(settings):
        dir_trust.check([root, Layout(root).root], "prebuilt root",
                        "Make it writable by its owner alone, or drop it from KERNELCACHE_PREBUILT.")
        base = Layout(root).kernel_dir(name)
        try:
            key_dirs = sorted(os.scandir(base), key=lambda e: e.name)
        except OSError:
            continue
        for kd in key_dirs:
            try:
                eds = sorted(os.scandir(kd.path), key=lambda e: e.name)
            except OSError:
                continue
            for ed in eds:
                m = manifest_mod.read(Path(ed.path))
                if m is not None:
                    yield Entry(Path(ed.path), m, Place.PREBUILT)
