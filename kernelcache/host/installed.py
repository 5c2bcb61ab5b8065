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

from ..base import process_state
from ..base.records import FrozenRecord
from .anchors import ROOT


class Group(FrozenRecord):
    """One trusted distribution: its RECORD (anchored) and that file's stat, its label, the
    indices of its headers, and the directory it is installed in (anchored) with its stat."""

    record: str
    stat: tuple[int, ...]
    label: str
    members: list[int]
    root: str
    root_stat: tuple[int, ...]


def record_stat(path: str) -> tuple[int, ...]:
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def read_bytes(path: str) -> bytes | None:
    """A file's bytes through plain ``os`` calls, None if unreadable: the cold path reads
    hundreds of package listings, and ``open()``'s file objects cost as much as the reading."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks: list[bytes] = []
        size = os.fstat(fd).st_size + 1  # one read, unless the file grows meanwhile
        while True:
            chunk = os.read(fd, size)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)


def site_roots() -> list[str]:
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


# root -> (RECORD identities, dist-info -> its rows or None, dist-info -> top-level dirs it was
# read for and does not install under: not read again for them)
_listings_memo: dict[str, tuple[list, dict, dict]] = {}
process_state.register("installed.listings", _listings_memo.clear)


def editable(dist_info: str) -> bool:
    """Is the distribution behind ``dist_info`` an editable install (its files are the project's,
    not what its RECORD lists)? Unreadable metadata counts as editable (not known to be plain)."""
    try:
        with open(os.path.join(dist_info, "direct_url.json"), "rb") as f:
            info = json.loads(f.read())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True  # unreadable: not known to be a plain install
    return bool((info.get("dir_info") or {}).get("editable")) if isinstance(info, dict) else True


def _rows(text: str) -> list[tuple[str, str]]:
    """(relpath, sha256 digest) of a RECORD's lines that carry a sha256 (csv only for quoted lines)."""
    out = []
    quoted = []
    for line in text.splitlines():
        if '"' in line:
            quoted.append(line)
            continue
        path, _sep, rest = line.rpartition(",")  # path,sha256=...,size: the size field has no comma
        path, _sep, digest = path.rpartition(",")
        if digest.startswith("sha256="):
            out.append((path, digest[7:]))
    if quoted:
        import csv

        out.extend((row[0], row[1][7:]) for row in csv.reader(quoted) if len(row) >= 2 and row[1].startswith("sha256="))
    return out


def _parsed(di: str, text: str) -> list[tuple[str, str]] | None:
    """A distribution's listed files (normalised), None for an editable install."""
    if editable(di):
        return None
    return [(os.path.normpath(rel), digest) for rel, digest in _rows(text) if not rel.startswith("..")]


def listings(root: str, wanted: set[str]) -> tuple[dict[str, tuple[str, str]], dict[str, set[str]]]:
    """relpath -> (dist-info dir, sha256 digest in RECORD's urlsafe base64) for the files of every
    non-editable distribution installed in ``root`` that installs under a top-level directory in
    ``wanted``; and such a top-level directory -> the distributions that install files under it
    (an unlisted file there spoils them). Distributions that install nowhere in ``wanted`` are
    not parsed (a RECORD line starting with ``top/`` tells, before any parsing)."""
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
    if memo is None or memo[0] != ident:  # other distributions than the last build's: parse anew
        memo = (ident, {}, {})
        _listings_memo[root] = memo
    parsed, lacks = memo[1], memo[2]
    for name in names:
        di = os.path.join(root, name)
        if di not in parsed:
            if wanted <= lacks.get(di, set()):
                continue  # read before for these tops: installs under none of them
            data = read_bytes(os.path.join(di, "RECORD"))
            if data is None:
                continue
            # bytes first: ~6 MB of RECORDs in an environment with torch; decoding them all to
            # look for a few top-level directories cost ~6 ms of every cold build
            if not any(data.startswith(t.encode() + b"/") or b"\n" + t.encode() + b"/" in data for t in wanted):
                lacks.setdefault(di, set()).update(wanted)  # parsed once another build asks for its tops
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            parsed[di] = _parsed(di, text)
        rows = parsed[di]
        if rows is None:
            continue
        for rel, digest in rows:
            top = rel.split(os.sep, 1)[0] if os.sep in rel else None
            if top is None or top in wanted:
                out[rel] = (di, digest)
                if top is not None:
                    tops.setdefault(top, set()).add(di)
    return out, tops


def prefetch(include_dirs: list[str]) -> None:
    """Read now the RECORDs that trusting a build's headers will ask about: those of the
    distributions installing under the top-level directories of ``include_dirs`` (its include
    directories inside an import root). Run beside the compiler (``build.run_build``), whose
    wait leaves a core idle: the record written after the link then finds them parsed. Only a
    warm-up: ``trust`` decides as before (the listings are keyed by every RECORD's stat)."""
    roots = site_roots()
    wanted: dict[str, set[str]] = {}
    for d in include_dirs:
        path = os.path.realpath(d)
        root = next((r for r in roots if path.startswith(r + os.sep)), None)
        if root is not None:
            wanted.setdefault(root, set()).add(path[len(root) + 1:].split(os.sep, 1)[0])
    for root, tops in wanted.items():
        listings(root, tops)


def _sha256_b64(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def vouch(found: dict[str, list[int]], spoiled: set[str], owner: str, index: int, path: str, digest,
          hasher) -> None:
    """Header ``index`` counts for ``owner`` (a distribution, a system package) if its bytes have
    the ``digest`` the owner lists (``hasher(path)``); a mismatch or an unreadable file spoils the
    owner: none of its headers is trusted."""
    if owner in spoiled:
        return
    try:
        same = hasher(path) == digest
    except OSError:
        same = False
    if same:
        found.setdefault(owner, []).append(index)
    else:
        spoiled.add(owner)


def trust(names: list[str], resolve, anchor) -> list[Group]:
    """The distributions whose listed headers among ``names`` (anchored paths) are trusted.

    ``resolve``/``anchor``: anchored <-> absolute. Every header of a group matched its RECORD's
    sha256 now; a distribution with any mismatching, unreadable or unlisted-but-inside header is
    left out. ``${ROOT}`` paths (the project's) are never considered."""
    roots = site_roots()
    if not roots:
        return []
    placed: list[tuple[int, str, str]] = []  # (index, absolute path, its root)
    wanted: dict[str, set[str]] = {}  # root -> top-level directories asked for there
    for i, name in enumerate(names):
        if name.startswith(ROOT):
            continue
        path = resolve(name)
        root = next((r for r in roots if path.startswith(r + os.sep)), None)
        if root is None:
            continue
        placed.append((i, path, root))
        rel = path[len(root) + 1:]
        if os.sep in rel:
            wanted.setdefault(root, set()).add(rel.split(os.sep, 1)[0])
    per_root = {root: listings(root, tops) for root, tops in wanted.items()}
    found: dict[str, list[int]] = {}
    spoiled: set[str] = set()
    for i, path, root in placed:
        if root not in per_root:
            continue  # a file directly in the root: no distribution's directory
        listing, tops = per_root[root]
        rel = path[len(root) + 1:]
        hit = listing.get(rel)
        if hit is None:  # unlisted: a file added beside a distribution's own spoils its trust
            spoiled.update(tops.get(rel.split(os.sep, 1)[0], ()))
            continue
        di, digest = hit
        vouch(found, spoiled, di, i, path, digest, _sha256_b64)
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
