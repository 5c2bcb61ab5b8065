"""The packed hit record of an entry: what a warm load reads instead of ``manifest.json``.

Why: a torch extension that includes ``torch/extension.h`` records ~5,400 dependencies; its
JSON manifest is ~900 KB. Parsing it in every fresh process built tens of thousands of Python
objects, which right after ``import torch`` set off a full garbage collection over torch's
objects (0.2-0.4 s). This file holds the same facts packed so that the hit path builds a handful
of objects: one bytes blob of anchored paths (split once), the recorded stats as one int64
array compared with the current stats in one bytes comparison, fixed-width content hashes
sliced only for a file whose stat moved, and the rest of the manifest (small) as a marshalled
dict guarded by a CRC.

Soundness is unchanged: stat fields are (size, mtime_ns, ctime_ns, inode), a moved stat means
re-hashing that file, bytes decide (ctime cannot be set back, so an edit with a restored mtime
re-hashes and misses). The record is derived from ``manifest.json`` and bound to it: it holds
the manifest's stat and a digest of its bytes; a record that matches neither is ignored and the
manifest is read the old way (an entry of an older version, a copied artifact root), and the
record is written again where the entry is writable. ``manifest.json`` stays the source of
truth for humans, ``explain``, export and the fleet.
"""
from __future__ import annotations

import hashlib
import marshal
import os
import struct
import sys
import zlib
from array import array
from pathlib import Path

from ..base import basis, bounded, process_state
from ..base.warm_facts import stat_array, stat_fields
from ..key.deps import DepCheck

FILENAME = "hit.rec"
_MAGIC = b"KCHR"
_VERSION = 3  # 3: groups of system packages (dpkg) besides pip distributions
_FIELDS = 4  # size, mtime_ns, ctime_ns, inode (as key.record_deps records them)
_HASH_W = 32  # xxh3-128 hex
# magic, version, byte order + python (marshal format), manifest stat (4q), manifest digest,
# head crc, n_deps, n_absent, len(head), len(paths), len(absent), binary stamp (4q),
# n_checked (deps stat-ed on every load: the first ones), len(trusted paths), len(groups)
_HEADER = struct.Struct("<4sII4q16sIIIIII4qIII")
HEADER_SIZE = _HEADER.size
_PY = (sys.version_info[0] << 8 | sys.version_info[1]) | (0x10000 if sys.byteorder == "big" else 0)


def manifest_digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()



class HitRecord:
    """One entry's packed record. ``head``: the manifest's fields except deps/absent (a dict)."""

    __slots__ = ("head", "dep_paths", "hashes", "stats", "absent_blob", "binary_stamp", "mstat", "mdigest",
                 "trusted_paths", "groups")

    def __init__(self, head: dict, dep_paths: bytes, hashes: bytes, stats: array, absent_blob: bytes,
                 binary_stamp: tuple[int, ...], mstat: tuple[int, ...], mdigest: bytes,
                 trusted_paths: bytes = b"", groups: tuple = ()) -> None:
        self.head = head
        self.dep_paths = dep_paths  # anchored paths stat-ed on every load, each after a b"\0"
        self.trusted_paths = trusted_paths  # those of trusted distributions, group after group
        # per trusted distribution: (its RECORD, anchored; RECORD's stat; label; number of files;
        # the directory it is installed in, anchored; that directory's stat)
        self.groups = groups
        self.hashes = hashes  # n * 32 ASCII hex digits (checked files first, then trusted ones)
        self.stats = stats  # array('q'): n * (size, mtime_ns, ctime_ns, inode), same order
        self.absent_blob = absent_blob
        self.binary_stamp = binary_stamp  # stat of the binary when its sha256 was last verified
        self.mstat, self.mdigest = mstat, mdigest

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def from_manifest(cls, data: dict, manifest_bytes: bytes, mstat: tuple[int, ...],
                      stat_cache: dict | None = None) -> "HitRecord | None":
        """From a manifest's dict; None if it cannot be packed (then the JSON path serves)."""
        stat_cache = stat_cache or {}
        deps = data.get("deps") or []
        paths, hashes, stats = [], [], array("q")
        try:
            for d in deps:
                p, h = d["path"], d.get("xxh3") or ""
                if len(h) != _HASH_W or not h.isascii():
                    return None
                st = stat_cache.get(p) or d.get("stat") or ()
                st = list(st)[:_FIELDS] if len(st) >= _FIELDS else [-1] * _FIELDS
                paths.append(os.fsencode(p))
                hashes.append(h.encode())
                stats.extend(int(x) for x in st)
            absent = [os.fsencode(a) for a in data.get("absent") or []]
        except (TypeError, KeyError, AttributeError, ValueError, OverflowError):
            return None
        head = {k: v for k, v in data.items() if k not in ("deps", "absent")}
        so_name = head.get("so_name")
        stamp = stat_cache.get(f"binary:{so_name}") or ()
        stamp = tuple(int(x) for x in stamp) if len(stamp) == _FIELDS else (0,) * _FIELDS
        names = [os.fsdecode(p) for p in paths]
        found = _prepared.pop(tuple(names), None)
        if found is None:
            found = _trusted_groups(names)
        taken = {i for g in found for i in g.members}
        order = [i for i in range(len(paths)) if i not in taken] + [i for g in found for i in g.members]
        n_checked = len(paths) - len(taken)
        st = array("q")
        for i in order:
            st.extend(stats[i * _FIELDS:(i + 1) * _FIELDS])
        groups = tuple((g.record, g.stat, g.label, len(g.members), g.root, g.root_stat) for g in found)
        return cls(head, b"".join(b"\0" + paths[i] for i in order[:n_checked]), b"".join(hashes[i] for i in order),
                   st, b"".join(b"\0" + a for a in absent), stamp, mstat, manifest_digest(manifest_bytes),
                   b"".join(b"\0" + paths[i] for i in order[n_checked:]), groups)

    @property
    def n_checked(self) -> int:
        return self.dep_paths.count(b"\0")

    def pack(self) -> bytes:
        head = marshal.dumps(self.head)
        groups = marshal.dumps(self.groups)
        n = len(self.stats) // _FIELDS
        return b"".join((
            _HEADER.pack(_MAGIC, _VERSION, _PY, *self.mstat, self.mdigest, zlib.crc32(head + groups), n,
                         self.absent_blob.count(b"\0"), len(head), len(self.dep_paths), len(self.absent_blob),
                         *self.binary_stamp, self.n_checked, len(self.trusted_paths), len(groups)),
            head, groups, self.dep_paths, self.trusted_paths, self.absent_blob, self.hashes, self.stats.tobytes()))

    # -- reading -------------------------------------------------------------------------------
    @classmethod
    def unpack(cls, data: bytes) -> "HitRecord | None":
        """The record in ``data``; None when it is of another version, truncated or damaged."""
        try:
            (magic, version, py, s0, s1, s2, s3, mdigest, crc, n, _n_absent, lh, lp, la,
             b0, b1, b2, b3, n_checked, lt, lg) = _HEADER.unpack_from(data)
        except struct.error:
            return None
        if magic != _MAGIC or version != _VERSION or py != _PY:
            return None
        o = _HEADER.size
        end = o + lh + lg + lp + lt + la + n * _HASH_W + n * _FIELDS * 8
        if len(data) != end:
            return None
        if zlib.crc32(data[o:o + lh + lg]) != crc:
            return None
        try:
            head = marshal.loads(data[o:o + lh])
            groups = marshal.loads(data[o + lh:o + lh + lg])
        except (ValueError, EOFError, TypeError):
            return None
        if not isinstance(head, dict) or not isinstance(groups, tuple) or not all(
                isinstance(g, tuple) and len(g) == 6 and isinstance(g[3], int) for g in groups):
            return None
        o += lh + lg
        paths = data[o:o + lp]
        o += lp
        tpaths = data[o:o + lt]
        o += lt
        absent = data[o:o + la]
        o += la
        hashes = data[o:o + n * _HASH_W]
        o += n * _HASH_W
        stats = array("q")
        stats.frombytes(data[o:])
        if paths.count(b"\0") != n_checked or n_checked + tpaths.count(b"\0") != n \
                or sum(g[3] for g in groups) != n - n_checked:
            return None
        return cls(head, paths, hashes, stats, absent, (b0, b1, b2, b3), (s0, s1, s2, s3), mdigest, tpaths, groups)

    # -- the check -----------------------------------------------------------------------------
    def check(self, anchors: list[tuple[str, str]], strict: bool = False) -> DepCheck:
        """Did the recorded dependencies hold? The same rule as ``key.check_deps``.

        One stat per checked file into an int64 array, one comparison with the recorded array;
        only a file whose stat moved is re-hashed (bytes decide). A trusted distribution's files
        (``kernelcache.host.installed``) are checked the same way only when ``strict`` or when its
        RECORD's stat moved (a reinstall: ``retrust``); otherwise one stat of its RECORD stands
        for them. ``refreshed``: anchored path -> new stat of files whose bytes were equal.
        """
        refreshed: dict[str, list[int]] = {}
        n_checked = self.dep_paths.count(b"\0")
        why = self._verify(resolved(self.dep_paths, anchors), 0, refreshed)
        if why is not None:
            return DepCheck(False, why)
        n_stat, n_trusted, retrust, tpaths, start = n_checked, 0, False, None, n_checked
        roots: dict[str, tuple[int, ...] | None] = {}
        for record, stat, _label, count, root, root_stat in self.groups:
            if root not in roots:
                roots[root] = _stat_of(root, anchors)
            moved = roots[root] != root_stat or _stat_of(record, anchors) != stat
            retrust = retrust or moved
            if moved or strict:
                if tpaths is None:
                    tpaths = resolved(self.trusted_paths, anchors)
                why = self._verify(tpaths[start - n_checked:start - n_checked + count], start, refreshed)
                if why is not None:
                    return DepCheck(False, why)
                n_stat += count
            else:
                n_trusted += count
            start += count
        if self.absent_blob:
            exists = os.path.exists
            absent = resolved(self.absent_blob, anchors)
            for i, p in enumerate(absent):
                if exists(p):
                    name = os.fsdecode(self.absent_blob.split(b"\0")[i + 1])
                    return DepCheck(False, f"new header {name} shadows the one used before")
            for p in absent:
                basis.note_absent(p)
        return DepCheck(True, refreshed=refreshed, n_stat=n_stat, n_trusted=n_trusted, retrust=retrust)

    def _verify(self, paths: list[bytes], base: int, refreshed: dict[str, list[int]]) -> str | None:
        """Check ``paths`` (the deps from index ``base`` on); None when they held."""
        cur, ok = stat_array(paths)
        if not ok:
            return f"header {self._anchored(base + len(cur) // _FIELDS)} no longer exists"
        rec = self.stats[base * _FIELDS:(base + len(paths)) * _FIELDS]
        b = basis.current()
        if b is not None:  # noted before the comparison: a check that fails records nothing
            for i, p in enumerate(paths):
                b.note(p, cur[i * _FIELDS:(i + 1) * _FIELDS])
        if cur == rec:
            return None
        from ..host.toolchain import content_hash

        for i in range(len(paths)):
            j = i * _FIELDS
            if cur[j:j + _FIELDS] == rec[j:j + _FIELDS]:
                continue
            name = self._anchored(base + i)
            try:
                digest = content_hash(paths[i])
            except OSError as e:
                return f"header {name} unreadable: {e}"
            k = (base + i) * _HASH_W
            if digest.encode() != self.hashes[k:k + _HASH_W]:
                return f"header {name} changed (content hash differs)"
            refreshed[name] = cur[j:j + _FIELDS].tolist()
        return None

    def names(self) -> list[str]:
        """Every recorded dependency, anchored, in the record's order (checked, then trusted)."""
        return [os.fsdecode(p) for p in (self.dep_paths + self.trusted_paths).split(b"\0")[1:]]

    def _anchored(self, i: int) -> str:
        return self.names()[i]

    def refreshed_by(self, refreshed: dict[str, list[int]], binary_stamp: tuple[int, ...] | None) -> "HitRecord":
        """A copy whose recorded stats are the re-validated ones (bytes were equal)."""
        stats = array("q", self.stats)
        if refreshed:
            index = {name: i for i, name in enumerate(self.names())}
            for name, st in refreshed.items():
                i = index.get(name)
                if i is not None and len(st) == _FIELDS:
                    stats[i * _FIELDS:(i + 1) * _FIELDS] = array("q", st)
        return HitRecord(self.head, self.dep_paths, self.hashes, stats, self.absent_blob,
                         binary_stamp or self.binary_stamp, self.mstat, self.mdigest, self.trusted_paths, self.groups)

    def dep_stats(self) -> dict[str, list[int]]:
        """anchored path -> recorded stat (to derive a record again: a reinstalled package)."""
        st = self.stats
        return {name: st[i * _FIELDS:(i + 1) * _FIELDS].tolist() for i, name in enumerate(self.names())}


def _stat_of(anchored: str, anchors: list[tuple[str, str]]) -> tuple[int, ...] | None:
    """The stat of an anchored path, noted (``basis``) either way."""
    path = resolved(b"\0" + os.fsencode(anchored), anchors)[0]
    try:
        st = os.stat(path)
    except OSError:
        basis.note_absent(path)
        return None
    basis.note(path, st)
    return tuple(stat_fields(st))


_prepared: dict[tuple[str, ...], list] = {}  # anchored dep names -> their trusted groups, ahead


process_state.register("deprecord.prepared", _prepared.clear)


def prepare(names: list[str]) -> None:
    """Find the trusted groups of a build's dependencies before its manifest exists (the build
    does this while the linker runs); the record written next takes them instead of looking
    again. A few builds' worth are kept (parallel warms build in threads; a miss only looks again)."""
    if len(_prepared) >= 8:
        _prepared.clear()
    _prepared[tuple(names)] = _trusted_groups(names)


def _trusted_groups(names: list[str]) -> list:
    """The installed distributions (pip) and system packages (dpkg) whose headers among
    ``names`` are trusted (cold path only)."""
    from ..base.errors import ToolchainError
    from ..host import installed, system_packages, toolchain
    from ..host.anchors import SITE, TVM_FFI, anchor_path, resolve_anchor

    try:
        tvm_dir = toolchain.tvm_ffi_paths().package_dir
    except ToolchainError:
        pairs: list[tuple[str, str]] = []
    else:
        pairs = sorted([(TVM_FFI, tvm_dir), (SITE, os.path.dirname(tvm_dir))], key=lambda p: -len(p[1]))

    def resolve(n: str) -> str:
        return resolve_anchor(n, pairs)

    def anchor(p: str) -> str:
        return anchor_path(p, pairs)

    groups = installed.trust(names, resolve, anchor) if pairs else []
    taken = {i for g in groups for i in g.members}
    return groups + system_packages.trust(names, resolve, anchor, taken)


def resolved(blob: bytes, anchors: list[tuple[str, str]]) -> list[bytes]:
    """Absolute paths: each anchor is replaced where a path starts (after its b"\\0")."""
    if not blob:
        return []
    for name, prefix in anchors:
        blob = blob.replace(b"\0" + name.encode(), b"\0" + os.fsencode(prefix))
    return blob[1:].split(b"\0")


# -- files ---------------------------------------------------------------------------------------
def load(entry_dir: Path, manifest_name: str) -> HitRecord | None:
    """The entry's record if it is bound to the ``manifest.json`` beside it, else None.

    Bound: the manifest's stat is the recorded one (one stat), or else its bytes have the
    recorded digest (a copied or re-installed entry: the manifest is read, not parsed).
    A record or manifest that is not a regular file, or larger than ``bounded.MAX_JSON``, is
    refused unread (an artifact root's files come from elsewhere: a FIFO must not hang a load).
    """
    try:
        path = os.path.join(entry_dir, FILENAME)
        data, st = bounded.read_regular(path)
        rec = HitRecord.unpack(data)
        if rec is None:
            return None
        mpath = os.path.join(entry_dir, manifest_name)
        mst = os.stat(mpath)
        if tuple(stat_fields(mst)) != rec.mstat:
            mdata, mst = bounded.read_regular(mpath)
            if manifest_digest(mdata) != rec.mdigest:
                return None
        basis.note(path, st)  # what was read: the record, bound to this manifest
        basis.note(mpath, mst)
        return rec
    except OSError:
        pass
    return None


def head(entry_dir: Path, manifest_name: str) -> dict | None:
    """The small rest of the manifest (its fields but the dependencies) from the record's first
    bytes, for listings (``kernelcache ls``: the kind of 10,000 entries without parsing a
    900 KB torch manifest each). None when the record is absent, damaged, of another version or
    not bound to the manifest by its stat (the caller then reads the manifest)."""
    try:
        fd, st = bounded.open_regular(os.path.join(entry_dir, FILENAME))
        try:
            fixed = os.read(fd, _HEADER.size)
            (magic, version, py, s0, s1, s2, s3, _md, crc, _n, _na, lh, _lp, _la,
             _b0, _b1, _b2, _b3, _nc, _lt, lg) = _HEADER.unpack(fixed)
            if magic != _MAGIC or version != _VERSION or py != _PY or _HEADER.size + lh + lg > st.st_size:
                return None
            data = bounded.read_fd(fd, lh + lg)[:lh + lg]
        finally:
            os.close(fd)
        if zlib.crc32(data) != crc or tuple(stat_fields(os.stat(os.path.join(entry_dir, manifest_name)))) \
                != (s0, s1, s2, s3):
            return None
        out = marshal.loads(data[:lh])
    except (OSError, struct.error, ValueError, EOFError, TypeError):
        return None
    return out if isinstance(out, dict) else None


def save(entry_dir: Path, rec: HitRecord) -> None:
    """Write atomically (temp file + rename). Best effort: an entry whose record cannot be
    written keeps being served from its manifest."""
    tmp = os.path.join(entry_dir, f".{FILENAME}.{os.getpid()}.{os.urandom(3).hex()}")
    try:
        with open(tmp, "wb") as f:
            f.write(rec.pack())
        os.replace(tmp, os.path.join(entry_dir, FILENAME))
        basis.note(os.path.join(entry_dir, FILENAME))  # a load's own write: what it leaves is what it rests on
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def write_beside(entry_dir: Path, manifest_path: str, data: dict, manifest_bytes: bytes) -> None:
    """The record of a manifest just written (by the loader, export, the fleet stage)."""
    try:
        mstat = tuple(stat_fields(os.stat(manifest_path)))
    except OSError:
        return
    rec = HitRecord.from_manifest(data, manifest_bytes, mstat)
    if rec is not None:
        save(entry_dir, rec)
