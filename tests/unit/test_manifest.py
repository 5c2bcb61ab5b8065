"""manifest.py: one typed record, one format version; read/write/relocate."""
from __future__ import annotations

import json

from kernelcache.entry import manifest
from kernelcache.entry.manifest import FORMAT, Manifest


def _m(**kw) -> Manifest:
    base = dict(name="k", key1="a" * 64, entry_id="b" * 32, identity="i", so_name="k.so", so_sha256="c" * 64,
                so_size=10, schemas={"f": "Callable[[int], int]"},
                inputs={"sources": {"k.cc": "d" * 64}, "tools": {"cxx": {"path": "/usr/bin/g++", "version": "g++ 12\nx"}},
                        "commands": {"compile": [["/usr/bin/g++", "-c"]]}, "arch": ["9.0"],
                        "abi": {"tvm_ffi_version": "0.1.15"}},
                deps=[{"path": "${ROOT}/include/a.h", "xxh3": "1", "stat": [1, 2, 3, 4]},
                      {"path": "/usr/include/stdio.h", "xxh3": "2", "stat": [1, 2, 3, 4]}],
                absent=["${ROOT}/x.h", "/usr/local/include/a.h"])
    base.update(kw)
    return Manifest(**base)


def test_write_read_round_trip(tmp_path):
    m = _m()
    manifest.write(tmp_path, m)
    assert manifest.read(tmp_path) == m
    assert not [p for p in tmp_path.iterdir() if p.name != "manifest.json"]  # no temp file left


def test_unparseable_or_incomplete_is_none(tmp_path):
    assert manifest.read(tmp_path) is None
    (tmp_path / "manifest.json").write_text("{\"name\": \"k\"")
    assert manifest.read(tmp_path) is None
    (tmp_path / "manifest.json").write_text(json.dumps({"name": "k", "entry_id": "x"}))
    assert manifest.read(tmp_path) is None  # required fields missing
    (tmp_path / "manifest.json").write_text("[1, 2]")
    assert manifest.read(tmp_path) is None


def test_unknown_fields_are_ignored_and_format_kept(tmp_path):
    d = _m().to_dict()
    d["future_field"] = 1
    d["format"] = FORMAT + 1
    (tmp_path / "manifest.json").write_text(json.dumps(d))
    m = manifest.read(tmp_path)
    assert m is not None and m.format == FORMAT + 1  # validation rejects it by format, not the parser


def test_relocatable_keeps_only_package_paths():
    r = _m().relocatable("13")
    assert [d["path"] for d in r.deps] == ["${ROOT}/include/a.h"]
    assert r.absent == ["${ROOT}/x.h"]
    assert r.external_deps["count"] == 1 and len(r.external_deps["digest"]) == 64
    assert "commands" not in r.inputs and r.inputs["tools"] == {"cxx": {"version": ["x"]}}
    assert r.prebuilt["tvm_ffi_version"] == "0.1.15" and r.prebuilt["cuda_major"] == "13"
    assert r.tvm_ffi_version == "0.1.15" and r.host == ""
    assert _m().deps[1]["path"] == "/usr/include/stdio.h"  # the original is untouched


def test_derived_fields():
    m = _m()
    assert m.archs == ("9.0",) and m.source_hashes == {"k.cc": "d" * 64} and m.tvm_ffi_version == "0.1.15"
