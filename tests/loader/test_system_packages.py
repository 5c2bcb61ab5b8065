"""System-package trust (kernelcache/host/system_packages.py): headers that dpkg installed.

Most tests install a header as dpkg does (the file by rename, then the package's ``md5sums`` and
dpkg's ``status`` rewritten) into a database of their own (``DPKG_ADMINDIR``, dpkg's variable),
so that package operations can be provoked for real. By default a warm load stats the
package's ``md5sums`` and ``status`` instead of its headers (the ``hit`` event's
``deps_stat``/``deps_trusted``); any package operation checks the headers again (bytes decide);
a header whose bytes do not match its MD5, or that is reached through a link dpkg did not make,
is not trusted; ``KERNELCACHE_VERIFY_INSTALLED=1`` stats every header and catches an in-place edit that
the default mode does not see (the documented trade). The last test uses this machine's own
dpkg database and libstdc++ headers.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from kernelcache.base.layout import Layout
from kernelcache.entry import deprecord

from tests.support import KERNEL_SRC, REPO, make_project, spec_code

PKG = "kcsys"


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".dpkg-new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _dpkg_install(admin: Path, files: dict[Path, bytes], pkg: str = PKG, listed: dict[Path, bytes] | None = None) -> None:
    """Install ``files`` as dpkg does: each file by rename, then ``info/<pkg>.md5sums`` (the MD5
    of ``listed``'s bytes where given, else of the file's) and ``status``, both by rename."""
    (admin / "info").mkdir(parents=True, exist_ok=True)
    lines = []
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        _replace(path, data)
        lines.append(f"{hashlib.md5((listed or {}).get(path, data)).hexdigest()}  {str(path)[1:]}")
    _replace(admin / "info" / f"{pkg}.md5sums", ("\n".join(lines) + "\n").encode())
    _status_changes(admin, pkg)


def _status_changes(admin: Path, pkg: str) -> None:
    """What every package operation does to dpkg's ``status`` (rewritten, by rename)."""
    status = admin / "status"
    old = status.read_bytes() if status.exists() else b""
    _replace(status, old + f"Package: {pkg}\nStatus: install ok installed\n\n".encode())


@pytest.fixture
def system(tmp_path: Path) -> tuple[Path, Path]:
    """(dpkg database, include directory) with ``kc_add.h`` (``#define KC_OFFSET 0``) installed."""
    root = tmp_path.resolve()
    admin, inc = root / "dpkg", root / "sysroot" / "usr" / "include"
    _dpkg_install(admin, {inc / "kc_add.h": b"#define KC_OFFSET 0\n"})
    return admin, inc


def _load(kc_env, project: Path, inc: Path, admin: Path, log: Path, **env: str) -> tuple[str, int, dict]:
    """One load in a fresh process: status, result, hit event."""
    code = spec_code(project, include_dirs=[str(inc)]) + (
        "m, r = kc.load_with_result(spec)\nprint(r.status, m.add(1, 2))\n")
    if log.exists():
        log.unlink()
    out = kc_env.run_py(code, KERNELCACHE_LOG=str(log), DPKG_ADMINDIR=str(admin),
                        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **env)
    status, value = out.stdout.split()
    events = [json.loads(line) for line in log.read_text().splitlines()]
    return status, int(value), next((e for e in events if e["event"] == "hit"), {})


def _groups(kc_env, prefix: str = f"deb:{PKG}") -> list[tuple]:
    entries = [p for p in Layout(kc_env.cache).kernel_dir("adder").glob("*/*") if p.is_dir()]
    recs = [deprecord.load(p, "manifest.json") for p in entries]
    return [g for r in recs if r is not None for g in r.groups if g[2].startswith(prefix)]


def _project(tmp_path: Path) -> Path:
    project = make_project(tmp_path / "proj")
    (project / "include" / "kc_add.h").unlink()  # the header comes from the system package
    return project


def test_a_header_dpkg_lists_is_trusted_not_stat_ed(kc_env, tmp_path, system):
    admin, inc = system
    project, log = _project(tmp_path), tmp_path / "events.jsonl"
    assert _load(kc_env, project, inc, admin, log)[:2] == ("built", 3)
    assert [(g[2], g[3], g[4]) for g in _groups(kc_env)] == [(f"deb:{PKG}", 1, str(admin / "status"))]
    status, value, hit = _load(kc_env, project, inc, admin, log)
    assert (status, value) == ("hit", 3) and hit["deps_trusted"] >= 1
    strict = _load(kc_env, project, inc, admin, log, KERNELCACHE_VERIFY_INSTALLED="1")[2]
    assert strict["deps_trusted"] == 0
    assert strict["deps_stat"] == hit["deps_stat"] + hit["deps_trusted"]

    # an in-place edit with its mtime restored, no package operation: the default mode's trade ...
    hdr = inc / "kc_add.h"
    st = hdr.stat()
    hdr.write_text("#define KC_OFFSET 5\n")
    os.utime(hdr, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _load(kc_env, project, inc, admin, log)[:2] == ("hit", 3)
    # ... which strict mode catches (bytes decide)
    assert _load(kc_env, project, inc, admin, log, KERNELCACHE_VERIFY_INSTALLED="1")[:2] == ("built", 8)
    assert kc_env.compiles() == 2


def test_any_package_operation_checks_the_headers_again(kc_env, tmp_path, system):
    admin, inc = system
    project, log = _project(tmp_path), tmp_path / "events.jsonl"
    assert _load(kc_env, project, inc, admin, log)[:2] == ("built", 3)
    trusted = _load(kc_env, project, inc, admin, log)[2]["deps_trusted"]

    _status_changes(admin, "another-package")  # an operation on another package: status rewritten
    status, value, hit = _load(kc_env, project, inc, admin, log)
    assert (status, value) == ("hit", 3) and hit["deps_trusted"] == trusted - 1  # stat-checked once
    assert _load(kc_env, project, inc, admin, log)[2]["deps_trusted"] == trusted  # then trusted anew

    _dpkg_install(admin, {inc / "kc_add.h": b"#define KC_OFFSET 0\n"})  # reinstall: same bytes, new file
    status, value, hit = _load(kc_env, project, inc, admin, log)
    assert (status, value) == ("hit", 3) and hit["deps_trusted"] == trusted - 1

    _dpkg_install(admin, {inc / "kc_add.h": b"#define KC_OFFSET 5\n"})  # an upgrade
    assert _load(kc_env, project, inc, admin, log)[:2] == ("built", 8)
    assert kc_env.compiles() == 2


def test_a_mismatching_or_linked_header_is_stat_checked(kc_env, tmp_path, system):
    admin, inc = system
    hdr = inc / "kc_add.h"
    _dpkg_install(admin, {hdr: b"#define KC_OFFSET 2\n"}, listed={hdr: b"#define KC_OFFSET 0\n"})  # MD5 no longer holds
    project, log = _project(tmp_path), tmp_path / "events.jsonl"
    assert _load(kc_env, project, inc, admin, log)[:2] == ("built", 5)
    assert _groups(kc_env) == []
    hdr.write_text("#define KC_OFFSET 3\n")  # stat-checked like a project header
    assert _load(kc_env, project, inc, admin, log)[:2] == ("built", 6)

    # dpkg's path, but a directory on it was replaced by a link dpkg did not make: the file the
    # compiler read is not the one dpkg installed there, so it is not trusted
    sub = inc / "sub"
    _dpkg_install(admin, {sub / "kc_add.h": b"#define KC_OFFSET 4\n"})
    sub.rename(inc / "sub-moved")
    sub.symlink_to(inc / "sub-moved", target_is_directory=True)
    project2 = _project(tmp_path / "two")
    (project2 / "add.cc").write_text(KERNEL_SRC.format(fn="add", header="sub/kc_add.h"))
    assert _load(kc_env, project2, inc, admin, log)[:2] == ("built", 7)
    assert _groups(kc_env) == []
    (inc / "sub-moved" / "kc_add.h").write_text("#define KC_OFFSET 1\n")
    assert _load(kc_env, project2, inc, admin, log)[:2] == ("built", 4)


@pytest.mark.skipif(not os.path.exists("/var/lib/dpkg/status") or "DPKG_ADMINDIR" in os.environ,
                    reason="no dpkg database on this machine")
def test_this_machines_libstdcxx_headers_are_trusted(kc_env, tmp_path):
    """The real database: a kernel that includes tvm-ffi (and so libstdc++ and libc) records
    their headers in dpkg's groups; a warm load stats only a handful of files for them."""
    project, log = make_project(tmp_path / "proj"), tmp_path / "events.jsonl"
    code = spec_code(project) + "m, r = kc.load_with_result(spec)\nprint(r.status, m.add(1, 2))\n"
    for expected in ("built", "hit"):
        if log.exists():
            log.unlink()
        out = kc_env.run_py(code, KERNELCACHE_LOG=str(log))
        assert out.stdout.split() == [expected, "3"]
    hit = next(e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "hit")
    groups = _groups(kc_env, prefix="deb:")
    if not groups:
        pytest.skip("dpkg lists none of the C++ headers this compiler read (not a Debian toolchain)")
    members = sum(g[3] for g in groups)
    assert members >= 20 and hit["deps_trusted"] >= members
    assert hit["deps_stat"] < members  # the project's own files, not the system's
