"""Issue 39: ``kernelcache pack --oci DIR ROOT`` writes an OCI image layout a node can mount.

No registry tool is installed here, so the layout is checked by the image-spec's rules from its
files (``oci_check``): digests and sizes recomputed, media types, the config's diff_id against the
uncompressed layer. The layer, unpacked read-only, serves the kernel with no compiler on PATH.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kernelcache.entry import manifest

from kernelcache.export import roots as export
from kernelcache.storage.entry import Entry
from tests.support import HANG_S, compilerless_path, spec_code

from . import oci_check


def _kc(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("KERNELCACHE_")}
    return subprocess.run([sys.executable, "-m", "kernelcache", *argv], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=HANG_S, env={**e, "KERNELCACHE_LOG": "0", **(env or {})})


@pytest.fixture
def root(built_adder, tmp_path) -> Path:
    """An artifact root holding the session's adder (read from its cache, nothing rebuilt)."""
    out = tmp_path / "root"
    export.export_entry(Entry(built_adder.entry_dir, manifest.read(built_adder.entry_dir)), out, None)
    return out


def test_layout_validates_and_is_reproducible(root, tmp_path):
    first = _kc("pack", "--oci", str(tmp_path / "oci"), str(root), "--tag", "cpu")
    assert first.returncode == 0, first.stderr
    images = oci_check.validate(tmp_path / "oci")
    assert list(images) == ["cpu"]
    digest = first.stdout.split()[1]
    index = (tmp_path / "oci" / "index.json").read_text()
    assert digest in index and first.stdout.startswith(f"{tmp_path / 'oci'}:cpu sha256:")
    names = {m.name for m in oci_check.extract(images["cpu"]["layer_tar"], tmp_path / "x")}
    assert any(n.endswith("/manifest.json") for n in names) and any(n.endswith(".so") for n in names)
    # other mtimes, another copy of the root: the same bytes, the same digest
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    for p in copy.rglob("*"):
        os.utime(p, (1_000_000, 1_000_000))
    (copy / "v1" / "entries").joinpath("used").write_text("per-host bookkeeping, not shipped")
    again = _kc("pack", "--oci", str(tmp_path / "oci2"), str(copy), "--tag", "cpu")
    assert again.returncode == 0, again.stderr
    assert again.stdout.split()[1] == digest
    assert (tmp_path / "oci2" / "index.json").read_text() == index
    blobs = sorted(p.name for p in (tmp_path / "oci" / "blobs" / "sha256").iterdir())
    assert blobs == sorted(p.name for p in (tmp_path / "oci2" / "blobs" / "sha256").iterdir())
    for name in blobs:
        assert (tmp_path / "oci" / "blobs" / "sha256" / name).read_bytes() == \
            (tmp_path / "oci2" / "blobs" / "sha256" / name).read_bytes()


def test_unpacked_layer_serves_without_compiler(root, built_adder, kc_env, tmp_path):
    assert _kc("pack", "--oci", str(tmp_path / "oci"), str(root)).returncode == 0
    layer = oci_check.validate(tmp_path / "oci")["latest"]["layer_tar"]
    mount = tmp_path / "mount"
    oci_check.extract(layer, mount)
    subprocess.run(["chmod", "-R", "a-w", str(mount)], check=True)
    try:
        code = spec_code(built_adder.spec.root) + (
            "import kernelcache.lookup.loader as L\nm, r = L.load_with_result(spec)\nprint(m.add(2, 3), r.status)")
        out = kc_env.run_py(code, CXX="/bin/false", KERNELCACHE_NO_BUILD="1", KERNELCACHE_PREBUILT=str(mount),
                            PATH=compilerless_path(tmp_path / "bin-nocc")).stdout.split()
        assert out == ["5", "prebuilt"]
        assert kc_env.compiles() == 0 and not kc_env.entries()  # nothing built or copied on the node
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(mount)], check=True)


def test_tags_share_one_layout(root, tmp_path):
    oci = tmp_path / "oci"
    assert _kc("pack", "--oci", str(oci), str(root), "--tag", "sm90").returncode == 0
    assert _kc("pack", "--oci", str(oci), str(root), "--tag", "sm100").returncode == 0
    assert _kc("pack", "--oci", str(oci), str(root), "--tag", "sm90").returncode == 0  # replaced, not doubled
    images = oci_check.validate(oci)
    assert sorted(images) == ["sm100", "sm90"]


def test_bad_input_is_a_usage_error(root, tmp_path):
    not_root = tmp_path / "plain"
    not_root.mkdir()
    r = _kc("pack", "--oci", str(tmp_path / "o1"), str(not_root))
    assert r.returncode == 2 and "not an artifact root" in r.stderr and not (tmp_path / "o1").exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("someone's files")
    r = _kc("pack", "--oci", str(busy), str(root))
    assert r.returncode == 2 and "not an OCI image layout" in r.stderr
    assert sorted(p.name for p in busy.iterdir()) == ["keep.txt"]
    r = _kc("pack", "--oci", str(tmp_path / "o2"), str(root), "--tag", "no/slash")
    assert r.returncode == 2 and "tag must match" in r.stderr
    r = _kc("pack", str(root))
    assert r.returncode == 2 and "--tag" in r.stderr
