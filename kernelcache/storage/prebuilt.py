"""Read-only prebuilt artifact roots: production without a compiler, never trusted blindly.

An artifact root has the cache's entry layout; its manifests were made relocatable when the
root was written (``kernelcache build``, see ``kernelcache.export.roots``). Roots come from
``Settings.prebuilt`` and from installed companion packages that register an entry point in
the group ``kernelcache.prebuilt`` (a callable returning the root). An artifact is used only if
it validates against *this* installation (``validate.installation_refusal``) and is *this*
build: its recorded source key, the key the fleet indexes by, is the one this host computes for
the spec (flags, defines, include dirs and link line included: ``validate.build_refusal``);
then bytes, identity and schemas like any entry. Before any of that a root must not be writable by
others under ``KERNELCACHE_STRICT_DIRS`` (``dir_trust``), an entry dir must not be a link leading
outside its root, and under ``KERNELCACHE_PREBUILT_VERIFY_KEYS`` an entry must carry a signature
of its manifest and binary by a trusted key (``prebuilt_sign``): a :class:`Refused` candidate,
refused with its reason.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

from ..base import basis, bounded, process_state
from ..base.events import Place
from ..base.layout import Layout
from ..base.settings import Settings
from ..entry import manifest as manifest_mod
from ..host import dir_trust, toolchain
from ..base.warm_facts import distributions_stamp
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
    distributions do (``kernelcache.base.warm_facts.distributions_stamp``, the key a recalled call checks too).
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


class Refused(Entry):
    """A root's entry (or the root itself) refused before its manifest was read or trusted: a directory
    link leaving the root, a root others can write under ``KERNELCACHE_STRICT_DIRS``, a missing or
    bad signature under ``KERNELCACHE_PREBUILT_VERIFY_KEYS``. ``search.vet`` refuses it with
    ``refusal``; nothing else about it is read."""

    __slots__ = ("refusal",)

    def __init__(self, path: Path, refusal: str) -> None:
        super().__init__(path, None, Place.PREBUILT)
        self.refusal = refusal


def refusal(entry: Entry) -> str | None:
    """Why an entry of :func:`looked_at` was refused before its manifest was trusted; None: it
    was not (it is vetted like any entry built elsewhere)."""
    return entry.refusal if isinstance(entry, Refused) else None


_FIX = "Make it writable by its owner alone, or drop it from KERNELCACHE_PREBUILT."


def _inside(path: str, real_root: str) -> bool:
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root + os.sep)


def _outside(path: str, real_root: str) -> Refused | None:
    """``path`` refused when it leads outside the root (None: it stays inside)."""
    if _inside(path, real_root):
        return None
    return Refused(Path(path), f"a link leading outside the root ({os.path.realpath(path)}): not followed")


def _children(path: str, real_root: str) -> Iterator[os.DirEntry[str] | Refused]:
    """The directory's entries by name (none when it cannot be read), a link among them that
    leads outside the root as its refusal, not followed."""
    try:
        found = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return
    basis.note(path)  # an entry added or removed moves the directory's stat
    for e in found:
        out = _outside(e.path, real_root) if e.is_symlink() else None
        yield e if out is None else out


def candidates(name: str, settings: Settings) -> Iterator[Entry]:
    """Every usable-looking artifact for ``name`` in every root, in root order (``ls``, ``verify``,
    ``explain NAME``): the refused ones of :func:`looked_at` left out."""
    return (e for e in looked_at(name, settings) if not isinstance(e, Refused))


def looked_at(name: str, settings: Settings) -> Iterator[Entry]:
    """Every artifact for ``name`` in every root, in root order, as the lookup tries them: an
    :class:`Entry` with its manifest parsed, or a :class:`Refused` one (read no further)."""
    keys = settings.prebuilt_verify_keys
    for root in roots(settings):
        unsafe = dir_trust.check([root, Layout(root).root], "prebuilt root", _FIX, strict=settings.strict_dirs)
        base = Layout(root).kernel_dir(name)
        if not basis.note_exists(base) or not os.path.isdir(base):  # a kernel added to a root changes the answer
            continue
        if unsafe is not None and settings.strict_dirs:
            yield Refused(root, dir_trust.refusal(root, "prebuilt root", unsafe, _FIX) + " Skipped.")
            continue
        real_root = os.path.realpath(root)
        escape = _outside(str(base), real_root)
        if escape is not None:
            yield escape
            continue
        for kd in _children(str(base), real_root):
            if isinstance(kd, Refused):
                yield kd
                continue
            for ed in _children(kd.path, real_root):
                if isinstance(ed, Refused):
                    yield ed
                    continue
                got = _read_entry(Path(ed.path), keys)
                if got is not None:
                    yield got


def _read_entry(path: Path, keys: tuple[Path, ...]) -> Entry | None:
    """The entry at ``path`` (manifest read once, bounded: the bytes a signature is checked against
    are the bytes parsed); None when it has no readable manifest."""
    try:
        data = bounded.read_regular(path / manifest_mod.FILENAME)[0]
        parsed = bounded.loads(data, str(path / manifest_mod.FILENAME))
    except (OSError, ValueError):
        return None
    m = manifest_mod.Manifest.from_dict(parsed)
    if m is None:
        return None
    if keys:
        from . import prebuilt_sign  # only under KERNELCACHE_PREBUILT_VERIFY_KEYS

        why = prebuilt_sign.refusal(path, data, parsed, keys)
        if why is not None:
            return Refused(path, why)
    return Entry(path, m, Place.PREBUILT)
