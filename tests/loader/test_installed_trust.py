"""Installed-package trust (kernelcache/host/installed.py): a real wheel, pip-installed into a tmp dir.

The kernel's header comes from an installed, non-editable distribution. By default a warm load
stats that distribution's RECORD instead of its headers (counted by the ``hit`` event's
``deps_stat``/``deps_trusted``); a reinstall moves the RECORD, so the headers are checked again
(bytes decide); a header that does not match its RECORD's sha256 at record time is not trusted;
``KERNELCACHE_VERIFY_INSTALLED=1`` stats every header and catches an in-place edit that the
default mode does not see (the documented trade).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from kernelcache.base.layout import Layout
from kernelcache.entry import deprecord

from tests.support import REPO, make_project, spec_code

PKG = "kctrust"


def _wheel(out: Path, version: str, header: str) -> Path:
    """A minimal pure wheel holding ``kctrust/include/kc_add.h``."""
    di = f"{PKG}-{version}.dist-info"
    files = {f"{PKG}/__init__.py": b"", f"{PKG}/include/kc_add.h": header.encode(),
             f"{di}/METADATA": f"Metadata-Version: 2.1\nName: {PKG}\nVersion: {version}\n".encode(),
             f"{di}/WHEEL": b"Wheel-Version: 1.0\nGenerator: kernelcache-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rows = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}")
    rows.append(f"{di}/RECORD,,")
    path = out / f"{PKG}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{di}/RECORD", "\n".join(rows) + "\n")
    return path


def _pip_install(wheel: Path, site: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--upgrade",
                    "--force-reinstall", "--target", str(site), str(wheel)], check=True, capture_output=True,
                   timeout=300, stdin=subprocess.DEVNULL)


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """The site dir where kctrust 1.0 is installed (its header: ``#define KC_OFFSET 0``)."""
    site = tmp_path / "site"
    _pip_install(_wheel(tmp_path, "1.0", "#define KC_OFFSET 0\n"), site)
    return site


def _load(kc_env, project: Path, site: Path, log: Path, **env: str) -> tuple[str, int, dict]:
    """One load in a fresh process with ``site`` on the import path: status, result, hit event."""
    code = spec_code(project, include_dirs=[str(site / PKG / "include")]) + (
        "m, r = kc.load_with_result(spec)\nprint(r.status, m.add(1, 2))\n")
    if log.exists():
        log.unlink()
    out = kc_env.run_py(code, KERNELCACHE_LOG=str(log), PYTHONPATH=os.pathsep.join(
        [str(REPO), str(site), os.environ.get("PYTHONPATH", "")]), **env)
    status, value = out.stdout.split()
    events = [json.loads(line) for line in log.read_text().splitlines()]
    hit = next((e for e in events if e["event"] == "hit"), {})
    return status, int(value), hit


def _groups(kc_env) -> list[tuple]:
    entries = [p for p in Layout(kc_env.cache).kernel_dir("adder").glob("*/*") if p.is_dir()]
    recs = [deprecord.load(p, "manifest.json") for p in entries]
    return [g for r in recs if r is not None for g in r.groups]


def _ours(groups: list[tuple]) -> list[tuple]:
    return [g for g in groups if g[2].startswith(PKG + "-")]


def test_installed_header_is_trusted_not_stat_ed(kc_env, tmp_path, installed):
    project = make_project(tmp_path / "proj")
    (project / "include" / "kc_add.h").unlink()  # the header comes from the installed package
    log = tmp_path / "events.jsonl"
    assert _load(kc_env, project, installed, log)[:2] == ("built", 3)
    assert [(g[2], g[3]) for g in _ours(_groups(kc_env))] == [(f"{PKG}-1.0", 1)]
    status, value, hit = _load(kc_env, project, installed, log)
    assert (status, value) == ("hit", 3) and hit["deps_trusted"] >= 1
    strict = _load(kc_env, project, installed, log, KERNELCACHE_VERIFY_INSTALLED="1")[2]
    assert strict["deps_trusted"] == 0
    assert strict["deps_stat"] == hit["deps_stat"] + hit["deps_trusted"]  # strict stats the package's too

    # an in-place edit with its mtime restored (no reinstall): the trade of the default mode ...
    hdr = installed / PKG / "include" / "kc_add.h"
    st = hdr.stat()
    hdr.write_text("#define KC_OFFSET 5\n")
    os.utime(hdr, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _load(kc_env, project, installed, log)[:2] == ("hit", 3)
    # ... which strict mode catches (bytes decide)
    assert _load(kc_env, project, installed, log, KERNELCACHE_VERIFY_INSTALLED="1")[:2] == ("built", 8)
    assert kc_env.compiles() == 2


def test_reinstall_is_detected(kc_env, tmp_path, installed):
    project = make_project(tmp_path / "proj")
    (project / "include" / "kc_add.h").unlink()
    log = tmp_path / "events.jsonl"
    assert _load(kc_env, project, installed, log)[:2] == ("built", 3)
    trusted = _load(kc_env, project, installed, log)[2]["deps_trusted"]

    _pip_install(_wheel(tmp_path, "1.0", "#define KC_OFFSET 0\n"), installed)  # same bytes, new files
    status, value, hit = _load(kc_env, project, installed, log)
    assert (status, value) == ("hit", 3) and hit["deps_trusted"] == trusted - 1  # checked again
    assert _load(kc_env, project, installed, log)[2]["deps_trusted"] == trusted  # then trusted anew

    (tmp_path / "v11").mkdir()
    _pip_install(_wheel(tmp_path / "v11", "1.1", "#define KC_OFFSET 5\n"), installed)  # an upgrade
    assert _load(kc_env, project, installed, log)[:2] == ("built", 8)
    assert sorted(g[2] for g in _ours(_groups(kc_env))) == [f"{PKG}-1.0", f"{PKG}-1.1"]
    assert kc_env.compiles() == 2


def test_header_that_mismatches_its_record_is_not_trusted(kc_env, tmp_path, installed):
    hdr = installed / PKG / "include" / "kc_add.h"
    hdr.write_text("#define KC_OFFSET 2\n")  # edited after install: RECORD's sha256 no longer holds
    project = make_project(tmp_path / "proj")
    (project / "include" / "kc_add.h").unlink()
    log = tmp_path / "events.jsonl"
    assert _load(kc_env, project, installed, log)[:2] == ("built", 5)
    assert _ours(_groups(kc_env)) == []
    assert _load(kc_env, project, installed, log)[:2] == ("hit", 5)
    hdr.write_text("#define KC_OFFSET 3\n")  # stat-checked like a project header
    assert _load(kc_env, project, installed, log)[:2] == ("built", 6)


def _other_wheel(out: Path, version: str, files: dict[str, bytes]) -> Path:
    """A wheel of another distribution, ``kcother``, holding ``files``."""
    di = f"kcother-{version}.dist-info"
    files = {**files, f"{di}/METADATA": f"Metadata-Version: 2.1\nName: kcother\nVersion: {version}\n".encode(),
             f"{di}/WHEEL": b"Wheel-Version: 1.0\nGenerator: kernelcache-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rows = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
            for n, d in files.items()]
    path = out / f"kcother-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{di}/RECORD", "\n".join(rows + [f"{di}/RECORD,,"]) + "\n")
    return path


def test_prefetched_listings_see_a_distribution_that_starts_installing_there(tmp_path, installed, monkeypatch):
    """The listings read beside the compiler (``installed.prefetch``) remember which RECORDs install
    nothing under an include directory's top; a distribution reinstalled so that it does install a
    header there is read again (its RECORD's stat is part of the listings' key), so a header it
    adds beside kctrust's spoils kctrust's trust as it would have without the warm-up."""
    from kernelcache.host import installed as inst

    tmp = tmp_path / "w"
    tmp.mkdir()
    _pip_install(_other_wheel(tmp, "1.0", {"kcother/__init__.py": b""}), installed)
    monkeypatch.syspath_prepend(str(installed))
    inst._listings_memo.clear()
    root = os.path.realpath(installed)
    inst.prefetch([str(installed / PKG / "include"), str(tmp)])
    ident, parsed, lacks = inst._listings_memo[root]
    assert [os.path.basename(d) for d in parsed] == [f"{PKG}-1.0.dist-info"]
    assert lacks == {os.path.join(root, "kcother-1.0.dist-info"): {PKG}}
    names = [str(installed / PKG / "include" / "kc_add.h")]
    trusted = inst.trust(names, lambda n: n, lambda p: p)
    assert [g.label for g in trusted] == [f"{PKG}-1.0"]

    # kcother now installs a header under kctrust's directory (what its reinstall would write:
    # the file and a new RECORD listing it; pip --target would replace kctrust's directory whole)
    data = b"#define KC_EXTRA 1\n"
    (installed / PKG / "include" / "extra.h").write_bytes(data)
    record = installed / "kcother-1.0.dist-info" / "RECORD"
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.write_text(record.read_text() + f"{PKG}/include/extra.h,sha256={digest},{len(data)}\n")
    listing, tops = inst.listings(root, {PKG})
    assert {os.path.basename(d) for d in tops[PKG]} == {f"{PKG}-1.0.dist-info", "kcother-1.0.dist-info"}
    assert listing[os.path.join(PKG, "include", "extra.h")][0].endswith("kcother-1.0.dist-info")
    inst._listings_memo.clear()
