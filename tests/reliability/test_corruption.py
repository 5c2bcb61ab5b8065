"""Acceptance 5: corrupted or stale binaries are rejected before any call, quarantined, rebuilt once."""
from __future__ import annotations

import json

import pytest
from kernelcache.host import toolchain

import kernelcache as kc
from tests.support import make_project, manifest, project_spec, replace_file, spec_code


def _only_entry(kc_env):
    entries = kc_env.entries()
    assert len(entries) == 1, entries
    return entries[0]


def _quarantined(kc_env):
    q = kc_env.cache / "v1" / "quarantine"
    return sorted(q.iterdir()) if q.exists() else []


@pytest.mark.parametrize("damage", ["truncate", "bitflip"])
def test_damaged_so_is_quarantined_and_rebuilt(kc_env, project, damage):
    kc.load(project_spec(project))
    so = _only_entry(kc_env) / "adder.so"
    data = bytearray(so.read_bytes())
    if damage == "truncate":
        replace_file(so, bytes(data[: len(data) // 2]))
    else:
        data[len(data) // 2] ^= 0x40
        replace_file(so, bytes(data))
    kc_env.reset_counts()
    # a fresh process: the damaged file is checked before dlopen, never called
    out = kc_env.run_py(spec_code(project) + "m = kc.load(spec); s = kc.stats(); print(m.add(3, 4), s['quarantined'], s['builds'])")
    assert out.stdout.split() == ["7", "1", "1"]
    assert kc_env.compiles() == 1
    q = _quarantined(kc_env)
    assert len(q) == 1 and "QUARANTINE_REASON" in {p.name for p in q[0].iterdir()}
    assert len(kc_env.entries()) == 1


def _build_old_and_new(kc_env, tmp_path):
    """An 'old' .so whose add() lacks the third parameter, and the current 3-parameter kernel."""
    old = make_project(tmp_path / "old")
    kc.load(project_spec(old))
    old_entry = _only_entry(kc_env)
    new = make_project(tmp_path / "new")
    (new / "add.cc").write_text(
        "#include <tvm/ffi/function.h>\n#include \"kc_add.h\"\n"
        "int64_t add(int64_t a, int64_t b, int64_t c) { return a + b + c + KC_OFFSET; }\n"
        "TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add);\n")
    spec3 = kc.KernelSpec(name="adder", sources=["add.cc"], root=new, include_dirs=["include"],
                          functions={"add": "Callable[[int, int, int], int]"})
    kc.load(spec3)
    new_entry = [e for e in kc_env.entries() if e != old_entry][0]
    return old_entry, new_entry, spec3


def test_stale_so_with_lying_manifest_is_rejected_after_dlopen_before_any_call(kc_env, tmp_path):
    old_entry, new_entry, spec3 = _build_old_and_new(kc_env, tmp_path)
    # Replace the new entry's binary by the stale one and make the manifest's checksum agree,
    # so only identity/metadata checks can catch it.
    replace_file(new_entry / "adder.so", (old_entry / "adder.so").read_bytes())
    m = manifest(new_entry)
    m["so_sha256"] = toolchain.sha256_file(new_entry / "adder.so")
    m["so_size"] = (new_entry / "adder.so").stat().st_size
    (new_entry / "manifest.json").write_text(json.dumps(m))
    kc_env.reset_counts()
    code = f"""
import kernelcache as kc
from pathlib import Path
spec = kc.KernelSpec(name="adder", sources=["add.cc"], root=Path({str(spec3.root)!r}), include_dirs=["include"],
                     functions={{"add": "Callable[[int, int, int], int]"}})
m = kc.load(spec)
print(m.add(1, 2, 3), kc.stats()["quarantined"])
"""
    out = kc_env.run_py(code)
    assert out.stdout.split() == ["6", "1"]
    assert kc_env.compiles() == 1
    reasons = [(q / "QUARANTINE_REASON").read_text() for q in _quarantined(kc_env)]
    assert any("identity" in r or "schema" in r for r in reasons), reasons


def test_stale_manifest_schema_is_rejected_before_dlopen(kc_env, tmp_path):
    old_entry, new_entry, spec3 = _build_old_and_new(kc_env, tmp_path)
    m = manifest(new_entry)
    m["schemas"] = {"add": "Callable[[int, int], int]"}  # what an older build exported
    (new_entry / "manifest.json").write_text(json.dumps(m))
    kc_env.reset_counts()
    kc.reset_process_state()
    assert kc.load(spec3).add(1, 1, 1) == 3
    assert kc_env.compiles() == 1
    assert any("manifest schema differs" in (q / "QUARANTINE_REASON").read_text() for q in _quarantined(kc_env))


def test_sources_that_still_mismatch_raise_schema_mismatch(kc_env, project):
    spec = kc.KernelSpec(name="adder", sources=["add.cc"], root=project, include_dirs=["include"],
                         functions={"add": "Callable[[int, int, int], int]"})
    with pytest.raises(kc.SchemaMismatch) as ei:
        kc.load(spec)
    msg = str(ei.value)
    assert "Callable[[int, int, int], int]" in msg and "Callable[[int, int], int]" in msg
    assert ei.value.mismatches["add"] == ("Callable[[int, int, int], int]", "Callable[[int, int], int]")
    assert kc_env.entries() == []  # nothing published


def test_missing_function_is_reported(kc_env, project):
    spec = kc.KernelSpec(name="adder", sources=["add.cc"], root=project, include_dirs=["include"],
                         functions={"add": "Callable[[int, int], int]", "sub": "Callable[[int, int], int]"})
    with pytest.raises(kc.SchemaMismatch, match="sub: expected .* found <missing>"):
        kc.load(spec)
