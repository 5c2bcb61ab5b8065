"""Bytes this process did not write, bounded before they are parsed or read whole.

Why one module: an envelope in the fleet bucket, a ``manifest.json`` or binary in an artifact
root, a hit record, a lock's holder file are written by someone else (another host, a
companion wheel, another local user). Each reader used to trust the file's shape: a deeply
nested JSON document raised ``RecursionError`` out of a load, a FIFO in a binary's place hung
it, a symlink to ``/dev/zero`` or a huge object ran it out of memory. Every such read goes
through here instead:

* only regular files are opened, never through a symlink as the last component
  (``O_NOFOLLOW``), and never blocking on a FIFO or device (``O_NONBLOCK``, then ``fstat``);
* the size is compared before any byte is read, and a read stops one byte past its cap;
* JSON is parsed only after a size check and a nesting-depth scan (brackets outside strings),
  so no parser or later walk of the document can recurse without bound.

A refusal is :class:`Refused`, both an ``OSError`` and a ``ValueError``: the callers' existing
"unreadable or unparseable" branches (a miss, then a local build) take it unchanged.
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat
from array import array
from itertools import accumulate
from typing import Any, Iterable

MAX_JSON = 64 << 20  # bytes of one JSON document read from a store, a root or a lock dir
MAX_DEPTH = 64  # nesting of such a document (a manifest nests 5 deep, an envelope 7)

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_OPEN_FLAGS = os.O_RDONLY | _NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_STRING = re.compile(rb'"[^"]*"')  # once escapes are gone, every '"' opens or closes a string
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
_STEP = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # +1 / -1 as signed bytes


class Refused(OSError, ValueError):
    """Input refused before it was read or parsed: not a regular file, too large, too deep."""

    def __init__(self, message: str):
        super().__init__(errno.EINVAL, message)

    def __str__(self) -> str:
        return str(self.strerror)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: "str | os.PathLike[str]", block: bool = False) -> tuple[int, os.stat_result]:
    """An fd on ``path`` and its ``fstat``: a regular file reached without following a final
    symlink, opened without blocking (a FIFO's open would wait for a writer). The caller closes it.

    ``block``: open as a plain blocking open, after an ``lstat`` that must find a regular file
    (for a caller that bounds every call by a deadline itself, such as the ``file://`` fleet
    store: there an open that blocks in the kernel is a hung mount, and must read as one)."""
    try:
        if block:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                raise Refused(f"{os.fspath(path)} is {_kind(st.st_mode)}, not a regular file")
        fd = os.open(path, _OPEN_FLAGS & ~_NONBLOCK if block else _OPEN_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Refused(f"{os.fspath(path)} is a symbolic link (refused: only regular files are read)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{os.fspath(path)} is {_kind(st.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_fd(fd: int, size: int) -> bytes:
    """At most ``size + 1`` bytes from ``fd`` (one past: a file that grew since it was sized)."""
    parts, left = [], size + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_regular(path: "str | os.PathLike[str]", limit: int | None = None,
                 block: bool = False) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file and its ``fstat``; :class:`Refused` when it is larger than
    ``limit`` (default :data:`MAX_JSON`) by its size, checked before any byte is read.
    ``block``: as for :func:`open_regular`."""
    cap = MAX_JSON if limit is None else limit
    fd, st = open_regular(path, block)
    try:
        if st.st_size > cap:
            raise Refused(f"{os.fspath(path)}: {st.st_size} bytes, more than the {cap} read from such a file")
        data = read_fd(fd, st.st_size)
    finally:
        os.close(fd)
    if len(data) > cap:
        raise Refused(f"{os.fspath(path)}: grew past {cap} bytes while read")
    return data, st


def capped(chunks: Iterable[bytes], limit: int, what: str) -> bytes:
    """Join a stream's chunks, stopping (:class:`Refused`) at the first one that passes ``limit``."""
    parts, n = [], 0
    for c in chunks:
        n += len(c)
        if n > limit:
            raise Refused(f"{what}: more than {limit} bytes")
        parts.append(bytes(c))
    return b"".join(parts)


def json_depth(data: bytes) -> int:
    """The deepest nesting of ``[``/``{`` in a JSON text, strings skipped (no recursion)."""
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = _STRING.sub(b"", unescaped).translate(None, _NOT_BRACKET)
    if not brackets:
        return 0
    return max(0, max(accumulate(array("b", brackets.translate(_STEP)))))


def loads(data: "bytes | str", what: str = "JSON document", limit: int | None = None,
          depth: int | None = None) -> Any:
    """``json.loads`` of bytes from elsewhere, after a size and a nesting-depth check.

    :class:`Refused` (a ``ValueError``) when larger than ``limit`` (default :data:`MAX_JSON`)
    or nested deeper than ``depth`` (default :data:`MAX_DEPTH`); ``ValueError`` when not JSON.
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    cap = MAX_JSON if limit is None else limit
    if len(raw) > cap:
        raise Refused(f"{what}: {len(raw)} bytes, more than {cap}")
    most = MAX_DEPTH if depth is None else depth
    found = json_depth(raw) if raw.count(b"[") + raw.count(b"{") > most else 0
    if found > most:
        raise Refused(f"{what}: nested {found} deep, more than {most}")
    try:
        return json.loads(raw)
    except RecursionError:  # cannot happen below the depth cap; kept so no caller ever sees one
        raise Refused(f"{what}: nested too deep to parse") from None
