"""validate.py on real binaries: schemas (given and learned), size/sha/ELF/symbols, identity."""
from __future__ import annotations

import pytest
from kernelcache.entry import manifest, validate

import kernelcache as kc
from kernelcache.storage.entry import Entry
from tests.support import project_spec, replace_file


@pytest.fixture
def built(built_adder):
    """The session's adder entry, with a fresh Entry/Manifest object (tests edit the object)."""
    return built_adder.spec, Entry(built_adder.entry_dir, manifest.read(built_adder.entry_dir))


def test_compare_learned_and_given():
    assert validate.compare({"f": None}, {"f": "Callable[[int], int]"}) == {}
    assert validate.compare({"f": None}, {}) == {"f": (None, None)}
    assert validate.compare({"f": "Callable[[int],int]"}, {"f": "Callable[[int], int]"}) == {}  # spacing
    mism = validate.compare({"f": "Callable[[int], int]"}, {"f": "Callable[[float], int]"})
    assert validate.describe(mism) == "f: expected Callable[[int], int], found Callable[[float], int]"
    assert validate.describe({"g": (None, None)}) == "g: expected <any>, found <missing>"


def test_expected_schemas_fill_learned_ones_from_the_manifest(built):
    spec, entry = built
    learned = kc.KernelSpec(name="adder", sources=["add.cc"], root=spec.root, include_dirs=["include"],
                            functions={"add": None})
    assert validate.expected_schemas(learned, entry.manifest) == {"add": "Callable[[int, int], int]"}
    assert validate.expected_schemas(learned, None) == {"add": None}


def test_before_dlopen_accepts_the_real_entry(built):
    spec, entry = built
    assert validate.before_dlopen(spec, entry.manifest, entry.so_path, check_sha=True) is None


def test_before_dlopen_rejections_are_typed(built, tmp_path):
    spec, entry = built
    m = entry.manifest
    m.format = 99
    assert validate.before_dlopen(spec, m, entry.so_path, True).code == "format"
    m.format = manifest.FORMAT
    m.schemas = {"add": "Callable[[int], int]"}
    rej = validate.before_dlopen(spec, m, entry.so_path, True)
    assert rej.code == "schema" and rej.mismatches["add"][1] == "Callable[[int], int]"
    m.schemas = {"add": "Callable[[int, int], int]"}
    data = entry.so_path.read_bytes()
    copy = tmp_path / "x.so"
    copy.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    rej = validate.before_dlopen(spec, m, copy, True)
    assert rej.code == "binary" and "sha256" in rej.detail
    assert validate.before_dlopen(spec, m, copy, False) is None  # size equal, sha not asked
    replace_file(copy, data[:100])
    assert "size" in validate.before_dlopen(spec, m, copy, False).detail
    replace_file(copy, b"\0" * len(data))
    assert validate.binary_problem(copy, ["add"], len(data)) == "not an ELF file"
    assert validate.binary_problem(entry.so_path, ["sub"]) == "symbol __tvm_ffi_sub not exported"


def test_after_dlopen_checks_identity_and_exported_schemas(built):
    import tvm_ffi

    spec, entry = built
    mod = tvm_ffi.load_module(str(entry.so_path))
    rej, found = validate.after_dlopen(spec, entry.manifest, mod, entry.so_path, entry.manifest.identity)
    assert rej is None and found == {"add": "Callable[[int, int], int]"}
    rej, _ = validate.after_dlopen(spec, entry.manifest, mod, entry.so_path, "another-build")
    assert rej.code == "identity"
    three = kc.KernelSpec(name="adder", sources=["add.cc"], root=spec.root, include_dirs=["include"],
                          functions={"add": "Callable[[int, int, int], int]"})
    rej, _ = validate.after_dlopen(three, None, mod, entry.so_path, None)
    assert rej.code == "exported_schema" and "expected Callable[[int, int, int], int]" in rej.detail


def _tree(root):
    return sorted((str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*")) if root.exists() else []


def test_explain_has_no_side_effects(kc_env, project, tmp_path):
    """explain() on a damaged entry reports it; it quarantines nothing, stamps nothing, creates nothing."""
    spec = project_spec(project)
    assert kc.explain(kc.KernelSpec(name="nothing_here", sources=["add.cc"], root=project))["status"] == "miss"
    kc.load(spec)
    so = kc_env.entries()[0] / "adder.so"
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 0x40
    replace_file(so, bytes(data))
    (project / "include" / "kc_add.h").touch()  # a stat change that a load would re-hash and remember
    before = _tree(kc_env.cache)
    info = kc.explain(spec)
    assert info["status"] == "miss" and any("sha256" in r or "size" in r for r in info["refused"]), info
    assert _tree(kc_env.cache) == before
    fresh = kc.Settings.from_env().replace(cache_dir=tmp_path / "never_created")
    kc.explain(spec, settings=fresh)
    assert not (tmp_path / "never_created" / "v1" / "entries").exists()
