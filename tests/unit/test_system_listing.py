"""dpkg's listing as kernelcache reads it: every ``<md5>  <path>`` line whose path has an include
directory, found by searching rather than by splitting each of ~60,000 lines; it must equal what a
plain line-by-line reading keeps, on odd files and on this machine's own database."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from kernelcache.host import system_packages


def _plain(admin: str) -> dict[bytes, tuple[str, bytes]]:
    info = os.path.join(admin, "info")
    out: dict[bytes, tuple[str, bytes]] = {}
    for name in sorted(os.listdir(info)):
        if not name.endswith(".md5sums"):
            continue
        path = os.path.join(info, name)
        with open(path, "rb") as f:
            for line in f.read().split(b"\n"):
                digest, sep, rel = line.partition(b"  ")
                if sep and len(digest) == 32 and b"/include/" in line and rel:
                    out[rel] = (path, digest)
    return out


def test_odd_listings_read_as_a_plain_reading_reads_them(tmp_path: Path) -> None:
    info = tmp_path / "info"
    info.mkdir()
    (tmp_path / "status").write_text("Package: a\n")
    d = "0123456789abcdef0123456789abcdef"
    (info / "a.md5sums").write_bytes(
        f"{d}  usr/include/a.h\n{d}  usr/share/doc/a/copyright\n{d}  usr/include/x/include/b.h\n"
        f"short  usr/include/bad.h\n{d}  usr/lib/gcc/x86_64-linux-gnu/12/include/stddef.h".encode())  # no final newline
    (info / "b.md5sums").write_bytes(f"{d}  usr/share/man/b.1.gz\n".encode())
    (info / "c.list").write_bytes(b"/usr/include/c.h\n")  # not an md5sums file
    (info / "d.md5sums").write_bytes(f"{d[::-1]}  usr/include/a.h\n".encode())  # a later package lists it too
    sst, got = system_packages._listing(str(tmp_path))
    assert got == _plain(str(tmp_path))
    assert sorted(got) == [b"usr/include/a.h", b"usr/include/x/include/b.h",
                           b"usr/lib/gcc/x86_64-linux-gnu/12/include/stddef.h"]
    assert got[b"usr/include/a.h"] == (str(info / "d.md5sums"), d[::-1].encode())


@pytest.mark.skipif(not os.path.isdir("/var/lib/dpkg/info"), reason="no dpkg database on this machine")
def test_this_machines_database_reads_as_a_plain_reading_reads_it() -> None:
    system_packages._memo.clear()
    got = system_packages._listing("/var/lib/dpkg")
    assert got is not None and got[1] == _plain("/var/lib/dpkg")
