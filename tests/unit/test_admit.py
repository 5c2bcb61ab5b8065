"""admit.py, the one door: validate, dlopen with every symbol bound, identity and schemas.

On real entries (copies of the session's adder, so damage stays private to a test) and on a
real shared object with an unresolved symbol.
"""
from __future__ import annotations

import shutil
import subprocess
import threading

import pytest
from kernelcache.entry import manifest
from kernelcache.lookup import admit

import kernelcache as kc
from kernelcache.kinds.tvm_ffi import bind_now
from kernelcache.storage.entry import Entry
from kernelcache.storage.local import LocalStore
from tests.support import replace_file


@pytest.fixture
def own_copy(built_adder, tmp_path):
    """A private copy of the session's adder cache: (spec, entry, store)."""
    cache = tmp_path / "cache"
    shutil.copytree(built_adder.settings.cache_dir, cache)
    s = built_adder.settings.replace(cache_dir=cache)
    path = cache / built_adder.entry_dir.relative_to(built_adder.settings.cache_dir)
    return built_adder.spec, Entry(path, manifest.read(path)), LocalStore(s)


def test_accept_admits_once_and_hands_the_module_out_again(own_copy):
    spec, entry, store = own_copy
    kc.reset_process_state()
    mod, rej = admit.accept(spec, entry, store)
    assert rej is None and mod.add(2, 3) == 5
    again, rej = admit.accept(spec, entry, store)
    assert again is mod and rej is None
    kc.reset_process_state()
    fresh, rej = admit.accept(spec, entry, store)
    assert rej is None and fresh is not mod and fresh.add(1, 1) == 2


def test_a_damaged_binary_is_rejected_before_dlopen(own_copy):
    spec, entry, store = own_copy
    kc.reset_process_state()
    data = bytearray(entry.so_path.read_bytes())
    data[len(data) // 2] ^= 0x01
    replace_file(entry.so_path, bytes(data))
    mod, rej = admit.accept(spec, entry, store)
    assert mod is None and rej.code == "binary" and "sha256" in rej.detail


def test_a_schema_other_than_the_spec_is_rejected(own_copy):
    spec, entry, store = own_copy
    kc.reset_process_state()
    other = kc.KernelSpec(name="adder", sources=["add.cc"], root=spec.root, include_dirs=["include"],
                          functions={"add": "Callable[[int], int]"})
    mod, rej = admit.accept(other, entry, store)
    assert mod is None and rej.code == "schema" and "add" in rej.mismatches


def test_a_replaced_file_at_a_dlopened_path_loads_from_a_private_copy(own_copy):
    spec, entry, store = own_copy
    assert admit.dlopen_path(entry.so_path, store) == entry.so_path  # first sight: the path itself
    assert admit.dlopen_path(entry.so_path, store) == entry.so_path  # same inode: still the path
    replace_file(entry.so_path, entry.so_path.read_bytes())  # same bytes, new inode
    private = admit.dlopen_path(entry.so_path, store)
    assert private != entry.so_path and private.read_bytes() == entry.so_path.read_bytes()
    assert store.settings.layout.tmp in private.parents


def test_bind_now_turns_an_unresolved_symbol_into_an_oserror(tmp_path):
    src = tmp_path / "bad.cc"
    src.write_text('extern "C" int kc_missing_symbol(); extern "C" int f() { return kc_missing_symbol(); }\n')
    so = tmp_path / "bad.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(so), str(src)], check=True, timeout=120)
    with pytest.raises(OSError, match="kc_missing_symbol"):
        bind_now(so)


def test_name_lock_is_one_lock_per_name():
    a, b = admit.name_lock("k1"), admit.name_lock("k2")
    assert admit.name_lock("k1") is a and a is not b and isinstance(a, type(threading.Lock()))
