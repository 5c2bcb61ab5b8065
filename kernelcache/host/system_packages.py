"""Trust in system packages: headers that dpkg installed (libc, libstdc++, the kernel's uapi ...).

Why: a tvm-ffi kernel that includes ``<vector>`` records ~250 headers of the system (libc6-dev,
libstdc++-12-dev, linux-libc-dev, libgcc-12-dev); a warm load stat-ed each of them, most of its
dependency check. Debian's package database states what each package installed, with an MD5
per file (``<admindir>/info/<package>.md5sums``). The rule is that of
:mod:`kernelcache.host.installed` (pip's ``RECORD``): when an entry's hit record is written (the cold
path), each system header a package lists is checked byte for byte against that MD5; a package
whose headers all match becomes a group, and a warm load stats its ``md5sums`` file and dpkg's
``status`` file instead of its headers. dpkg rewrites ``status`` on every install, upgrade and
removal of any package, so any package operation sends the next load through every header's
stat again (bytes decide where a stat moved) and the trust is derived anew.

Not trusted, so stat-checked as before: a header no package lists (``/usr/local``, a toolkit
from a runfile, conda), one whose path passes through a symbolic link (alternatives, a link an
administrator made: dpkg did not install the file at that path), one whose bytes differ from
its MD5, and every header of a package with such a mismatch. No dpkg database: nothing changes.

The trade is pip's: an edit of a system header in place, with no package operation, is seen
only with ``Settings.verify_installed`` (``KERNELCACHE_VERIFY_INSTALLED=1``) or by
``kernelcache explain``. ``DPKG_ADMINDIR`` is honoured as dpkg honours it.
"""
from __future__ import annotations

import hashlib
import os
from typing import AbstractSet, Callable

from ..base import process_state
from .installed import Group, read_bytes, record_stat, vouch

ADMINDIR = "/var/lib/dpkg"
MD5SUMS = ".md5sums"
INCLUDE = b"/include/"  # the listing keeps the lines of paths with an include directory

# admindir -> (status stat, relpath as dpkg writes it -> (its md5sums file, MD5 hex)) for every
# file with an ``include`` directory in its path that a package lists. Keyed by the stat of ``status``:
# any package operation rewrites it, and the listings are read anew.
_memo: dict[str, tuple[tuple[int, ...], dict[bytes, tuple[str, bytes]]]] = {}
process_state.register("system_packages.listings", _memo.clear)


def admindir() -> str:
    """dpkg's database: ``DPKG_ADMINDIR`` (dpkg's own variable), else ``/var/lib/dpkg``."""
    return os.environ.get("DPKG_ADMINDIR") or ADMINDIR


def _listing(admin: str) -> tuple[tuple[int, ...], dict[bytes, tuple[str, bytes]]] | None:
    """(the stat of ``status`` taken before reading, relpath -> (md5sums file, MD5)) of the files
    with an ``include`` directory in their path that a package lists (~8,000 of the ~60,000
    lines of the ~80 packages that list any, on a build machine); None without a readable dpkg
    database. Only those lines are taken: a header elsewhere is stat-checked, and building the
    whole map cost ~38 ms of CPU beside every cold build's compiler (now ~14 ms)."""
    try:
        sst = record_stat(os.path.join(admin, "status"))
        info = os.path.join(admin, "info")
        names = sorted(n for n in os.listdir(info) if n.endswith(MD5SUMS))
    except OSError:
        return None
    memo = _memo.get(admin)
    if memo is not None and memo[0] == sst:
        return memo
    out: dict[bytes, tuple[str, bytes]] = {}
    for name in names:
        path = os.path.join(info, name)
        data = read_bytes(path)
        if data is not None and INCLUDE in data:  # most packages ship no header
            _header_lines(path, data, out)
    _memo[admin] = (sst, out)
    return sst, out


def _header_lines(path: str, data: bytes, out: dict[bytes, tuple[str, bytes]]) -> None:
    """Add the ``<md5>  <relpath>`` lines of ``data`` whose path has ``/include/`` to ``out``,
    found by searching for that string (not by splitting every line: most are not headers)."""
    find, rfind = data.find, data.rfind
    pos = find(INCLUDE)
    while pos >= 0:
        start = rfind(b"\n", 0, pos) + 1
        end = find(b"\n", pos)
        if end < 0:
            end = len(data)
        if end - start > 34 and data[start + 32:start + 34] == b"  ":
            out[data[start + 34:end]] = (path, data[start:start + 32])
        pos = find(INCLUDE, end)


def _md5(path: str) -> bytes:
    with open(path, "rb") as f:
        return hashlib.md5(f.read(), usedforsecurity=False).hexdigest().encode()


def trust(names: list[str], resolve: Callable[[str], str], anchor: Callable[[str], str],
          taken: AbstractSet[int] = frozenset()) -> list[Group]:
    """The dpkg packages whose listed headers among ``names`` (anchored paths; indices in
    ``taken`` are another group's already) are trusted. Cold path only."""
    admin = admindir()
    got = _listing(admin)
    if not got or not got[1]:
        return []
    # the status stat from before the listings were read: an operation since then moves it
    sst, listing = got
    candidates: list[tuple[int, str, bytes]] = []
    for i, name in enumerate(names):
        if i in taken:
            continue
        path = resolve(name)
        if path.startswith("/"):  # not the project's (``${ROOT}``), nor an anchor this rule does not know
            candidates.append((i, path, os.fsencode(path[1:])))
    found: dict[str, list[int]] = {}
    spoiled: set[str] = set()
    for i, path, rel in candidates:
        hit = listing.get(rel)
        if hit is None or os.path.realpath(path) != path:
            continue  # not dpkg's file at this path: stat-checked
        md5sums, digest = hit
        vouch(found, spoiled, md5sums, i, path, digest, _md5)
    status = anchor(os.path.join(admin, "status"))
    out = []
    for md5sums, members in found.items():
        if md5sums in spoiled:
            continue
        try:
            st = record_stat(md5sums)
        except OSError:
            continue
        label = "deb:" + os.path.basename(md5sums)[:-len(MD5SUMS)]
        out.append(Group(anchor(md5sums), st, label, members, status, sst))
    return out
