"""Trust in installed packages: headers inside a non-editable installed distribution.

Why: a torch extension records ~5,400 headers, ~4,800 of them torch's own. Stat-ing each on
every warm load costs more than torch's whole warm call (torch's JIT never looks at them). An
installed distribution already states what it holds: its ``*.dist-info/RECORD`` lists every
file with a sha256. So, when an entry's record is written (the cold path), each header that a
non-editable distribution lists (RECORD present, no editable ``direct_url.json``) is checked
byte for byte against that sha256; if all of a distribution's headers match, the warm check
stats that distribution's RECORD and the directory it is installed in (size, mtime_ns,
ctime_ns, inode) instead of its headers. A reinstall or upgrade writes a new RECORD and adds or
removes a ``*.dist-info`` directory there (``pip install --target --upgrade`` leaves the old
RECORD in place but adds the new one), so an identity moves and the headers are checked again
(bytes decide), then trusted anew. Installing any package in that directory re-checks once. A distribution with a header that mismatches its RECORD,
or that it does not list, is not trusted: its headers are stat-checked as before.

The trade: an in-place edit of an installed package's header (no reinstall) is caught only with
``Settings.verify_installed`` (``KERNELCACHE_VERIFY_INSTALLED=1``), by ``kernelcache explain``,
or never by torch's own JIT. Project headers (under the kernel root, ``${ROOT}``) are never
covered: they are not looked up at all.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import sys

from . import process_state
from .anchors import ROOT


class Group:
    """One trusted distribution: its RECORD (anchored) and that file's stat, its label, the
    indices of its headers, and the directory it is installed in (anchored) with its stat."""

    __slots__ = ("record", "stat", "label", "members", "root", "root_stat")

    def __init__(self, record: str, stat: tuple[int, ...], label: str, members: list[int], root: str,
                 root_stat: tuple[int, ...]) -> None:
        self.record, self.stat, self.label, self.members = record, stat, label, members
        self.root, self.root_stat = root, root_stat


def record_stat(path: str) -> tuple[int, ...]:
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _site_roots() -> list[str]:
    """Import-path directories (realpaths, longest first) that hold at least one dist-info."""
    out = set()
    for p in sys.path:
        if not p:
            continue
        try:
            rp = os.path.realpath(p)
            if any(n.endswith(".dist-info") for n in os.listdir(rp)):
                out.add(rp)
        except OSError:
            continue
    return sorted(out, key=len, reverse=True)


_listings_memo: dict[str, tuple[list, dict, dict]] = {}  # root -> (RECORD identities, listing, tops)
process_state.register("installed.listings", _listings_memo.clear)


def _editable(dist_info: str) -> bool:
    try:
        with open(os.path.join(dist_info, "direct_url.json"), "rb") as f:
            info = json.loads(f.read())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True  # unreadable: not known to be a plain install
    return bool((info.get("dir_info") or {}).get("editable")) if isinstance(info, dict) else True


def _listings(root: str) -> tuple[dict[str, tuple[str, str]], dict[str, set[str]]]:
    """relpath -> (dist-info dir, sha256 digest in RECORD's urlsafe base64) for every
    non-editable distribution installed in ``root``; and top-level directory -> the
    distributions that install files under it (an unlisted file there spoils them)."""
    out: dict[str, tuple[str, str]] = {}
    tops: dict[str, set[str]] = {}
    try:
        names = sorted(n for n in os.listdir(root) if n.endswith(".dist-info"))
    except OSError:
        return out, tops
    ident = []
    for name in names:
        try:
            ident.append((name, record_stat(os.path.join(root, name, "RECORD"))))
        except OSError:
            ident.append((name, ()))
    memo = _listings_memo.get(root)
    if memo is not None and memo[0] == ident:  # the same distributions (one build after another)
        return memo[1], memo[2]
    for name in names:
        di = os.path.join(root, name)
        try:
            with open(os.path.join(di, "RECORD"), encoding="utf-8", newline="") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        if _editable(di):
            continue
        import csv

        for row in csv.reader(lines):
            if len(row) >= 2 and row[1].startswith("sha256=") and not row[0].startswith(".."):
                rel = os.path.normpath(row[0])
                out[rel] = (di, row[1][7:])
                if os.sep in rel:
                    tops.setdefault(rel.split(os.sep, 1)[0], set()).add(di)
    _listings_memo[root] = (ident, out, tops)
    return out, tops


def _sha256_b64(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def trust(names: list[str], resolve, anchor) -> list[Group]:
    """The distributions whose listed headers among ``names`` (anchored paths) are trusted.

    ``resolve``/``anchor``: anchored <-> absolute. Every header of a group matched its RECORD's
    sha256 now; a distribution with any mismatching, unreadable or unlisted-but-inside header is
    left out. ``${ROOT}`` paths (the project's) are never considered."""
    roots = _site_roots()
    if not roots:
        return []
    listings: dict[str, tuple[dict[str, tuple[str, str]], dict[str, set[str]]]] = {}
    found: dict[str, list[int]] = {}
    spoiled: set[str] = set()
    for i, name in enumerate(names):
        if name.startswith(ROOT):
            continue
        path = resolve(name)
        root = next((r for r in roots if path.startswith(r + os.sep)), None)
        if root is None:
            continue
        if root not in listings:
            listings[root] = _listings(root)
        listing, tops = listings[root]
        rel = path[len(root) + 1:]
        hit = listing.get(rel)
        if hit is None:  # unlisted: a file added beside a distribution's own spoils its trust
            spoiled.update(tops.get(rel.split(os.sep, 1)[0], ()))
            continue
        di, digest = hit
        if di in spoiled:
            continue
        try:
            same = _sha256_b64(path) == digest
        except OSError:
            same = False
        if not same:
            spoiled.add(di)
            continue
        found.setdefault(di, []).append(i)
    out = []
    for di, members in found.items():
        if di in spoiled:
            continue
        root = os.path.dirname(di)
        try:
            st, rst = record_stat(os.path.join(di, "RECORD")), record_stat(root)
        except OSError:
            continue
        out.append(Group(anchor(os.path.join(di, "RECORD")), st, os.path.basename(di)[:-10], members,
                         anchor(root), rst))
    return out
